#!/usr/bin/env bash
# Idempotent set-up for hpc.stateless: host packages, a pinned .venv, and the
# collection made visible to Ansible in place. A second run installs nothing.
# --image sets up only what make image needs; without it, everything make test and make bench need.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

# `setup.sh --image` (make image): what building, verifying, packing and deploying the default image needs.
image_packages=(
  buildah systemd-container mmdebstrap debootstrap squashfs-tools cpio zstd pigz xz-utils
  git gpg gpg-agent uidmap fuse-overlayfs pxelinux syslinux-common lynis python3-venv
  openscap-scanner ssg-debian
)
# `setup.sh` (make test, make bench): the image set and what the test suites and benchmarks need on top.
test_packages=(
  podman qemu-system-x86 rsync dnf zypper rpm createrepo-c
  docker-registry graphviz busybox-static ipxe-qemu
  e2fsprogs fdisk parted iproute2 util-linux nodejs curl shellcheck
  strace openssl lighttpd default-jre-headless apt-utils socat
  nginx openssh-server openssh-client aria2 opentracker iptables python3-libtorrent
  qemu-user-static binfmt-support arch-test qemu-system-arm
)

image_only=false
case "${1:-}" in
  --image) image_only=true ;;
  "") ;;
  *) echo "usage: $0 [--image]  (--image: only what make image needs; no option: everything make test needs)" >&2; exit 2 ;;
esac
host_packages=("${image_packages[@]}")
$image_only || host_packages+=("${test_packages[@]}")

step() { printf '==> %s\n' "$*"; }

missing=()
for pkg in "${host_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
done
if ((${#missing[@]})) && ((EUID != 0)); then
  echo "host packages missing: ${missing[*]}; install them as root (sudo scripts/setup.sh${1:+ $1}) and run this again" >&2
  exit 1
elif ((${#missing[@]})); then
  step "installing host packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  step "host packages present"
fi

# Cross builds (docs/arch.md): qemu-user's binfmt handlers run an arm64 layer's programs on this host. The
# packages register them; a host or container without binfmt_misc mounted (or with the handlers disabled)
# gets it mounted and the handlers enabled here. Idempotent: nothing happens when they are enabled.
if ! $image_only && ((EUID == 0)); then
  binfmt=/proc/sys/fs/binfmt_misc
  if [[ ! -e $binfmt/status ]]; then
    step "mounting binfmt_misc on $binfmt"
    mount -t binfmt_misc binfmt_misc "$binfmt"
  fi
  if [[ "$(head -n1 "$binfmt/qemu-aarch64" 2>/dev/null)" != enabled ]]; then
    step "enabling qemu-user's binfmt handlers"
    update-binfmts --enable
  fi
fi

# True when every user can run interpreter $1: the file and each directory above it are
# executable by others (a Python under /root/.pyenv is not, so a build user could not start Ansible).
runnable_by_all() {
  local path
  path="$(readlink -f "$1" 2>/dev/null)" && [[ -x $path ]] || return 1
  while [[ $path != / ]]; do
    [[ "$(stat -c %A "$path")" == *[xt] ]] || return 1
    path="$(dirname "$path")"
  done
}

# The .venv is built on an interpreter every user can run (the distribution's python3, installed
# with python3-venv above), so an unprivileged build user can use a checkout set up by root.
python="${PYTHON:-/usr/bin/python3}"
runnable_by_all "$python" || { echo "$python cannot be run by every user; set PYTHON to one that can" >&2; exit 1; }
if [[ -e .venv/bin/python ]] && ! runnable_by_all .venv/bin/python; then
  if [[ "$(.venv/bin/python -c 'import sys; print(sys.version_info[:2])' 2>/dev/null)" == \
        "$("$python" -c 'import sys; print(sys.version_info[:2])')" ]]; then
    # Same Python version: point the venv at $python in place; the installed packages stay valid.
    step "pointing .venv at $python (its interpreter $(readlink -f .venv/bin/python) is private)"
    rm -f .venv/bin/python .venv/bin/python3 .venv/bin/python3.*[0-9]
    "$python" -m venv --upgrade --without-pip .venv
  else
    step "rebuilding .venv on $python (its interpreter $(readlink -f .venv/bin/python) is private)"
    rm -rf .venv
  fi
fi
if [[ ! -x .venv/bin/python ]]; then
  step "creating .venv"
  "$python" -m venv .venv
fi
# requirements.txt: what make image runs; requirements-test.txt: what the tests add. One stamp per set
# (the full set's covers the image set's).
image_stamp=.venv/.requirements-image.sha256 full_stamp=.venv/.requirements.sha256
image_want="$(cat requirements.txt constraints.txt | sha256sum | cut -d' ' -f1)"
full_want="$(cat requirements.txt requirements-test.txt constraints.txt | sha256sum | cut -d' ' -f1)"
if [[ "$(cat "$full_stamp" 2>/dev/null)" == "$full_want" ]] ||
   { $image_only && [[ "$(cat "$image_stamp" 2>/dev/null)" == "$image_want" ]]; }; then
  step "Python dependencies up to date"
elif $image_only; then
  step "installing pinned Python dependencies of make image into .venv"
  .venv/bin/pip install -q --disable-pip-version-check -r requirements.txt -c constraints.txt
  echo "$image_want" > "$image_stamp"
else
  step "installing pinned Python dependencies into .venv"
  .venv/bin/pip install -q --disable-pip-version-check -r requirements.txt -r requirements-test.txt -c constraints.txt
  echo "$image_want" > "$image_stamp"
  echo "$full_want" > "$full_stamp"
fi

# The collection is used in place: ansible.cfg points collections_path here.
link=.collections/ansible_collections/hpc/stateless
if [[ "$(readlink "$link" 2>/dev/null)" != "$repo" ]]; then
  step "linking collection at $link"
  mkdir -p "$(dirname "$link")"
  ln -sfn "$repo" "$link"
fi

# Only the tests use the next two (not indented, so each stays as it is in the full set-up).
if ! $image_only; then

# gitlab-ci-local runs generated pipelines in the tests; pinned (later releases need Node 22).
gcl_version=4.60.0
if [[ "$(.tools/gitlab-ci-local/node_modules/.bin/gitlab-ci-local --version 2>/dev/null)" != "$gcl_version" ]]; then
  command -v npm >/dev/null || { echo "npm is missing: install Node.js 20 with npm" >&2; exit 1; }
  step "installing gitlab-ci-local $gcl_version into .tools/ (takes a few minutes once)"
  npm install --prefix .tools/gitlab-ci-local --no-audit --no-fund --loglevel=error "gitlab-ci-local@$gcl_version" >/dev/null
fi

# ansible-test --venv downloads a get-pip script from a host this machine cannot reach;
# give it our stand-in (same interface) under the name it caches the download as.
pip_version="$(.venv/bin/python - <<'PY'
import re, pathlib, ansible_test
text = pathlib.Path(ansible_test.__file__).parent.joinpath("_internal/python_requirements.py").read_text()
print(re.search(r"pip='([0-9.]+)'", text).group(1))
PY
)"
get_pip="$HOME/.ansible/test/cache/get_pip_${pip_version//./_}.py"
if ! cmp -s scripts/ansible_test_get_pip.py "$get_pip"; then
  step "installing the ansible-test pip bootstrap for pip $pip_version"
  mkdir -p "$(dirname "$get_pip")"
  cp scripts/ansible_test_get_pip.py "$get_pip"
fi
fi

# A build user (not root): rootless buildah on the kernel's overlay instead of its vfs fallback (a full
# copy per layer), and the subordinate-id check every rootless build runs (docs/rootless.md).
if ((EUID != 0)); then
  conf="${XDG_CONFIG_HOME:-$HOME/.config}/containers/storage.conf"
  if [[ ! -e $conf && ! -e "${XDG_DATA_HOME:-$HOME/.local/share}/containers/storage" ]]; then
    step "writing $conf (overlay storage for rootless buildah)"
    mkdir -p "$(dirname "$conf")"
    printf '[storage]\ndriver = "overlay"\n' > "$conf"
  fi
  PYTHONPATH="$repo/.collections" .venv/bin/python -c '
from ansible_collections.hpc.stateless.plugins.module_utils._build import rootless
try:
    rootless.preflight()
except rootless.RootlessError as exc:
    raise SystemExit(str(exc))' || exit 1
  step "subordinate ids and newuidmap/newgidmap present for $(id -un)"
fi

# A root build in a user namespace (hpc_stateless_build_userns) maps container root to root's subordinate ids.
if ((EUID == 0)); then
  for file in /etc/subuid /etc/subgid; do
    if ! grep -q '^root:' "$file" 2>/dev/null; then
      line=$(PYTHONPATH="$repo/.collections" .venv/bin/python -c '
import sys
from ansible_collections.hpc.stateless.plugins.module_utils._build import rootless
print(rootless.suggested_line(sys.argv[1], "root"))' "$file")
      step "adding $line to $file (root builds in a user namespace)"
      echo "$line" >> "$file"
    fi
  done
fi

step "set-up complete"
