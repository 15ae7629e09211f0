# hpc.stateless — `make image` builds, verifies, packs and deploys the default image, `make test` runs every suite.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV := $(CURDIR)/.venv
export PATH := $(VENV)/bin:$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export ANSIBLE_FORCE_COLOR ?= 0
export PYTHONPATH := $(CURDIR)/.collections
export BUILDAH_ISOLATION ?= chroot
# Outside the checkout: inside it, ansible-test would see build/ as git-ignored and skip everything.

.PHONY: help setup setup-image image build build-collection test unit lint changelog mypy sanity integration collection molecule bench faults fault-suite clean

help:
	@echo "make image  - set up what the image needs, then build, verify, pack and deploy the default image"
	@echo "              (ansible-playbook site.yml: layers, nspawn boot + compliance suite + Lynis, cpio.zst, build/tftpboot)"
	@echo "make test   - set up everything, then run unit, lint, sanity, collection, integration, fault and molecule tests"
	@echo "make bench  - run every benchmark; table of medians, ratios and goals in bench/results.md"
	@echo "make faults - fault injection: kill, fill, corrupt and misconfigure; report what survived"

# setup-image: only the host and Python packages make image needs; setup: everything make test and make bench need.
setup:
	@bash scripts/setup.sh

setup-image:
	@bash scripts/setup.sh --image

image: setup-image
	@$(MAKE) --no-print-directory build

# The default layers, built (or found cached) with the embedded inventory. An unprivileged user builds
# inside one user namespace of `buildah unshare` for the whole playbook (docs/rootless.md).
UNSHARE := $(if $(filter-out 0,$(shell id -u)),buildah unshare --)
build:
	$(UNSHARE) ansible-playbook site.yml

# The collection (site) test, integration tests and Molecule scenarios start from the default layers built here.
# unit, lint and sanity need no image and one core each, the build waits on the mirror and the disk much of
# its time: two jobs run at a time (-j2), each one's output printed whole when it ends; a failure still
# fails make test. One slot builds, then runs the collection test on the built layers (build-collection);
# the other runs sanity (~4.5 min, longest first), unit and lint (~1 min each), changelog and mypy (seconds
# each) meanwhile, so neither slot idles while the other finishes. The integration suite then runs alone, on two pytest-xdist workers (below;
# about two thirds of the time one worker takes); the fault suite and the Molecule
# scenarios share no image prefix, boot tree or container name and leave one core idle each: they run side
# by side.
test: setup
	@$(MAKE) --no-print-directory -j2 --output-sync=target build-collection sanity unit lint changelog mypy
	@$(MAKE) --no-print-directory integration
	@$(MAKE) --no-print-directory -j2 --output-sync=target fault-suite molecule

# make test's first slot: the collection test needs the default layers, nothing of unit, lint or sanity.
build-collection: build
	@$(MAKE) --no-print-directory collection

unit:
	pytest -q tests/unit

lint:
	ansible-lint --profile production --offline

# Every fragment in changelogs/fragments is valid, and CHANGELOG.rst is what changelogs/changelog.yaml makes.
# Fragments not yet released are not in CHANGELOG.rst until `antsibull-changelog release` (docs/layout.md).
# The type check of plugins/ (.mypy.ini: its backlog of modules is listed there), from the collection's path.
mypy:
	cd .collections && mypy --config-file ../.mypy.ini -p ansible_collections.hpc.stateless.plugins

changelog:
	antsibull-changelog lint
	@out=$$(mktemp) && trap 'rm -f $$out' EXIT && \
	  ANSIBLE_COLLECTIONS_PATH=$(CURDIR)/.collections antsibull-changelog generate --output $$out --output-format rst && \
	  { cmp -s $$out CHANGELOG.rst || { echo "CHANGELOG.rst is not what changelogs/changelog.yaml makes: run antsibull-changelog generate" >&2; exit 1; }; }

# ansible-test must run from an ansible_collections/<ns>/<name> path: test a copy of the tree, in a fresh
# directory of its own (mktemp: mode 0700), never a fixed name in /tmp that another user could make first
# (ansible-test imports and runs the code it finds there).
sanity:
	@top=$$(mktemp -d "$${TMPDIR:-/tmp}/hpc-stateless-sanity.XXXXXXXX") && trap 'rm -rf "$$top"' EXIT && \
	root="$$top/ansible_collections/hpc/stateless" && mkdir -p "$$root" && \
	git ls-files -co --exclude-standard -z | rsync -a --from0 --files-from=- ./ "$$root/" && \
	echo "ansible-test sanity in $$root" && cd "$$root" && ansible-test sanity --venv --python 3.11 --color no

collection:
	pytest -q --durations=5 tests/collection

# Two workers: the groups of tests/integration/conftest.py (WORKER_GROUPS) keep what shares the host's cluster,
# build user or qemu on one worker; every other file runs whole on one worker (its module fixtures once).
integration:
	pytest -q -p no:cacheprovider -n 2 --dist loadgroup --durations=25 tests/integration

molecule:
	@if ls molecule/*/molecule.yml >/dev/null 2>&1; then molecule test --all; else echo "no molecule scenarios"; fi

# Every benchmark, one after another, then bench/results.json and bench/results.md (medians,
# ratios, goals). BENCH=pack,plan picks some; BENCH_FLAGS=--no-run only tabulates the last results
# (--quick, --report-only, --dry-run: docs/bench.md).
bench: setup
	python benchmarks/run_all.py $(if $(BENCH),--only $(BENCH)) $(BENCH_FLAGS)

# Every case kills, fills, corrupts or misconfigures something and asserts what survives: the
# tests/faults suite and the integration cases marked `fault`, with one summary (docs/faults.md).
faults: setup
	pytest -q -p no:cacheprovider -m fault tests/faults tests/integration

# In make test: the integration suite has run its fault cases already.
fault-suite:
	pytest -q -p no:cacheprovider --durations=10 tests/faults

clean:
	rm -rf build .pytest_cache
