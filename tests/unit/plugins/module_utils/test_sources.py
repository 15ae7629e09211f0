# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A layer's package sources (_contract/sources.py), their schema errors in the layer DAG, the files they
become in the image, the build's filter, and the bootstrap's check of each source's release file."""

from __future__ import annotations

import http.server
import threading

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.hpc.stateless.plugins.filter.layer_apt_sources import layer_apt_sources
from ansible_collections.hpc.stateless.plugins.module_utils._archive.index import APT_RETRY_COUNT
from ansible_collections.hpc.stateless.plugins.module_utils._build.bootstrap import (
    BootstrapSpec,
    debootstrap_upgrade_argv,
    dnf_argv,
    probe_url,
    source_problem,
    zypper_argvs,
)
from ansible_collections.hpc.stateless.plugins.module_utils._contract.sources import (
    Source,
    SourceSpecError,
    bootstrap_sources,
    layer_sources,
    render_deb822,
    render_sources_list,
)
from ansible_collections.hpc.stateless.plugins.module_utils._layers.graph import LayerGraph, LayerSpecError

L = "hpc_stateless_layers"
DEBIAN = "http://deb.debian.org/debian"
SECURITY = "http://deb.debian.org/debian-security"


def dag(bootstrap=None, **child):
    """base (bootstrap) -> app (child's keys)."""
    return {"base": {"bootstrap": {"distro": "debian", "release": "bookworm", **(bootstrap or {})}},
            "app": {"parent": "base", **child}}


def suites(sources):
    return [(s.kind, s.uri, s.suite) for s in sources]


def test_debian_default_is_three_suites_from_two_mirrors():
    assert suites(bootstrap_sources({"distro": "debian", "release": "bookworm"}, "base")) == [
        ("release", DEBIAN, "bookworm"), ("updates", DEBIAN, "bookworm-updates"),
        ("security", SECURITY, "bookworm-security")]


def test_ubuntu_defaults_and_each_mirror_settable():
    assert suites(bootstrap_sources({"distro": "ubuntu", "release": "noble"})) == [
        ("release", "http://archive.ubuntu.com/ubuntu", "noble"),
        ("updates", "http://archive.ubuntu.com/ubuntu", "noble-updates"),
        ("security", "http://security.ubuntu.com/ubuntu", "noble-security")]
    mine = bootstrap_sources({"distro": "debian", "release": "bookworm", "mirror": "/srv/debian",
                              "updates_mirror": "http://u.example/debian", "security_mirror": "http://s.example/ds",
                              "components": ["main", "contrib"], "keyring": "/k/site.gpg"}, "base")
    assert suites(mine) == [("release", "file:///srv/debian", "bookworm"),
                            ("updates", "http://u.example/debian", "bookworm-updates"),
                            ("security", "http://s.example/ds", "bookworm-security")]
    assert {(s.components, s.signed_by, s.layer) for s in mine} == {(("main", "contrib"), "/k/site.gpg", "base")}
    unchecked = bootstrap_sources({"distro": "debian", "release": "bookworm", "keyring": "/k/site.gpg",
                                   "gpg_check": False})
    assert {s.signed_by for s in unchecked} == {None}


def test_each_suite_switches_off_and_development_releases_have_none():
    assert suites(bootstrap_sources({"distro": "debian", "release": "bookworm", "security": False})) == [
        ("release", DEBIAN, "bookworm"), ("updates", DEBIAN, "bookworm-updates")]
    assert suites(bootstrap_sources({"distro": "debian", "release": "bookworm", "updates": False})) == [
        ("release", DEBIAN, "bookworm"), ("security", SECURITY, "bookworm-security")]
    assert suites(bootstrap_sources({"distro": "debian", "release": "sid"})) == [("release", DEBIAN, "sid")]
    assert suites(bootstrap_sources({"distro": "debian", "release": "buster"}))[2] == (
        "security", SECURITY, "buster/updates")


def test_rpm_distros_take_the_mirror_and_an_updates_repository():
    assert suites(bootstrap_sources({"distro": "fedora", "release": "40", "mirror": "/m/f",
                                     "updates_mirror": "http://x/updates"})) == [
        ("release", "file:///m/f", ""), ("updates", "http://x/updates", "")]
    assert suites(bootstrap_sources({"distro": "rocky", "release": "9", "mirror": "/m/r"})) == [
        ("release", "file:///m/r", "")]
    with pytest.raises(SourceSpecError, match=r"^hpc_stateless_layers\.r\.bootstrap\.mirror: is required"):
        bootstrap_sources({"distro": "rocky", "release": "9"}, "r")


def test_layer_sources_are_the_roots_then_each_ancestors_extras_in_order():
    layers = dag(sources=[{"uri": "https://repo.example/slurm", "suite": "bookworm", "keyring": "/k/slurm.gpg"}])
    layers["leaf"] = {"parent": "app", "sources": [{"uri": "/srv/ofed", "suite": "./"}]}
    got = layer_sources("leaf", layers)
    assert [(s.kind, s.layer, s.uri, s.suite, s.components) for s in got[3:]] == [
        ("extra", "app", "https://repo.example/slurm", "bookworm", ("main",)),
        ("extra", "leaf", "file:///srv/ofed", "./", ())]
    assert [s.kind for s in layer_sources("base", layers)] == ["release", "updates", "security"]
    # the DAG's normalised specs give the same sources
    graph = LayerGraph.from_spec(layers)
    assert layer_sources("leaf", {name: graph.spec(name) for name in layers}) == got


def test_layer_sources_name_an_unknown_layer_and_a_loop():
    with pytest.raises(SourceSpecError, match=r"^hpc_stateless_layers\.app\.parent: no layer 'gone'"):
        layer_sources("app", {"app": {"parent": "gone"}})
    with pytest.raises(SourceSpecError, match="parent loop: a -> b -> a"):
        layer_sources("a", {"a": {"parent": "b"}, "b": {"parent": "a"}})


def test_sources_list_and_deb822_name_the_keyring_in_the_image():
    text = render_sources_list(bootstrap_sources({"distro": "debian", "release": "bookworm", "keyring": "/k/m.asc"},
                                                 "base"))
    assert text.splitlines()[1:] == [
        f"deb [signed-by=/etc/apt/keyrings/base-m.asc] {DEBIAN} bookworm main",
        f"deb [signed-by=/etc/apt/keyrings/base-m.asc] {DEBIAN} bookworm-updates main",
        f"deb [signed-by=/etc/apt/keyrings/base-m.asc] {SECURITY} bookworm-security main"]
    stanzas = render_deb822([Source("extra", "https://r/x", "bookworm", ("main", "contrib"), "/k/x.key", "app"),
                             Source("extra", "file:///srv/flat", "./", (), None, "app")]).split("\n\n")[1:]
    assert stanzas == ["Types: deb\nURIs: https://r/x\nSuites: bookworm\nComponents: main contrib\n"
                       "Signed-By: /etc/apt/keyrings/app-x.gpg", "Types: deb\nURIs: file:///srv/flat\nSuites: ./\n"]


@pytest.mark.parametrize(("layers", "path", "problem"), [
    (dag(sources={"uri": "x"}), f"{L}.app.sources", "expected a list of sources, got mapping"),
    (dag(sources=[{"uri": "https://r", "suite": "s", "component": ["main"]}]), f"{L}.app.sources[0].component",
     "unknown key"),
    (dag(sources=[{"suite": "bookworm"}]), f"{L}.app.sources[0].uri", "is required"),
    (dag(sources=[{"uri": "repo.example/x", "suite": "bookworm"}]), f"{L}.app.sources[0].uri",
     "neither an http(s):// or file:// URL"),
    (dag(sources=[{"uri": "https://r", "suite": "a b"}]), f"{L}.app.sources[0].suite", "is not a suite name"),
    (dag(sources=[{"uri": "https://r", "suite": "./", "components": ["main"]}]), f"{L}.app.sources[0].components",
     "a flat repository"),
    (dag(sources=[{"uri": "https://r", "suite": "s", "keyring": "/a/k.gpg"},
                  {"uri": "https://q", "suite": "s", "keyring": "/b/k.gpg"}]), f"{L}.app.sources[1].keyring",
     "would both become k.gpg"),
    (dag({"security_mirror": "deb.example/x"}), f"{L}.base.bootstrap.security_mirror", "neither an http(s)://"),
    (dag({"security": False, "security_mirror": "http://s"}), f"{L}.base.bootstrap.security_mirror",
     "security: false switches that suite off"),
    (dag({"updates": "no"}), f"{L}.base.bootstrap.updates", "expected a bool, got string"),
    ({"r": {"bootstrap": {"distro": "rocky", "release": "9", "mirror": "/m", "security_mirror": "http://s"}}},
     f"{L}.r.bootstrap.security_mirror", "rocky has no separate security repository"),
])
def test_schema_errors_name_the_key(layers, path, problem):
    with pytest.raises(LayerSpecError) as err:
        LayerGraph.from_spec(layers)
    assert err.value.path == path
    assert problem in err.value.problem


def test_the_keys_cover_the_suites_and_the_sources():
    """A root's resolved suites and a layer's sources are in its normalised spec, which the content key hashes."""
    graph = LayerGraph.from_spec(dag({"security": False}, sources=[{"uri": "https://r", "suite": "s"}]))
    assert (graph.spec("base")["bootstrap"]["updates"], graph.spec("base")["bootstrap"]["security"]) == (True, False)
    assert graph.spec("app")["sources"] == [{"uri": "https://r", "suite": "s", "components": ["main"], "keyring": None}]
    assert "sources" not in LayerGraph.from_spec(dag()).spec("app")


def test_filter_resolves_keyrings_in_the_project(tmp_path):
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "slurm.gpg").write_bytes(b"key")
    layers = dag(sources=[{"uri": "https://r/slurm", "suite": "bookworm", "keyring": "keys/slurm.gpg"}])
    got = layer_apt_sources("app", layers, str(tmp_path))
    assert got["path"] == "/etc/apt/sources.list.d/hpc-stateless-app.sources"
    assert got["keyrings"] == [{"src": str(tmp_path / "keys" / "slurm.gpg"), "dest": "/etc/apt/keyrings/app-slurm.gpg"}]
    assert "Signed-By: /etc/apt/keyrings/app-slurm.gpg" in got["content"]
    assert layer_apt_sources("base", layers, str(tmp_path)) == {"path": None, "content": "", "keyrings": []}
    with pytest.raises(AnsibleFilterError, match=r"app\.sources\[0\]\.keyring: .*/nokeys/keys/slurm.gpg is not a readable"):
        layer_apt_sources("app", layers, str(tmp_path / "nokeys"))
    rpm = {"r": {"bootstrap": {"distro": "rocky", "release": "9", "mirror": "/m"}},
           "c": {"parent": "r", "sources": [{"uri": "https://x", "suite": "s"}]}}
    with pytest.raises(AnsibleFilterError, match="apt sources need a Debian or Ubuntu root layer"):
        layer_apt_sources("c", rpm)


# --- the bootstrap side ---------------------------------------------------------------------------

def test_rpm_updates_repository_is_enabled_and_checked():
    spec = BootstrapSpec(path="/r", distro="fedora", release="40", mirror="/m/f", updates_mirror="http://u/f",
                         keyring="/k/f.key")
    argv = dnf_argv(spec)
    assert "--repofrompath=hpc-stateless-updates,http://u/f" in argv and "--enablerepo=hpc-stateless-updates" in argv
    assert "--setopt=hpc-stateless-updates.gpgkey=file:///k/f.key" in argv
    leap = BootstrapSpec(path="/r", distro="opensuse-leap", release="15.6", mirror="/m/oss",
                         updates_mirror="http://u/update")
    assert [argv[-2:] for argv in zypper_argvs(leap)[:2]] == [["file:///m/oss", "hpc-stateless-base"],
                                                              ["http://u/update", "hpc-stateless-updates"]]


def test_debootstrap_upgrades_to_the_other_suites_only_when_there_are_any():
    spec = BootstrapSpec(path="/r", distro="debian", release="bookworm", mirror=DEBIAN, tool="debootstrap")
    argv = debootstrap_upgrade_argv(spec)
    assert argv[:2] == ["chroot", "/r"] and f"apt-get -o Acquire::Retries={APT_RETRY_COUNT} -y dist-upgrade" in argv[-1]
    assert f"apt-get -o Acquire::Retries={APT_RETRY_COUNT} update &&" in argv[-1]  # a resolver outage of ~10 s passes
    assert debootstrap_upgrade_argv(BootstrapSpec(path="/r", distro="debian", release="bookworm", mirror=DEBIAN,
                                                  tool="debootstrap", updates=False, security=False)) is None


@pytest.fixture(name="mirror")
def fixture_mirror(tmp_path):
    """A real HTTP mirror serving dists/bookworm/InRelease only (no test double: urllib talks to it)."""
    (tmp_path / "dists" / "bookworm").mkdir(parents=True)
    (tmp_path / "dists" / "bookworm" / "InRelease").write_text("Suite: bookworm\n")

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(tmp_path), **kwargs)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_missing_suite_and_an_unreachable_mirror_are_named(mirror, tmp_path):
    assert source_problem(Source("release", mirror, "bookworm", ("main",), None, "base")) is None
    missing = source_problem(Source("security", mirror, "bookworm-securty", ("main",), None, "base"))
    assert missing.startswith(f"the security source {mirror} bookworm-securty of layer base cannot be used: the "
                              "mirror does not serve suite 'bookworm-securty'")
    assert "HTTP 404" in missing and "snapshot" in missing and missing.endswith("or switch it off with security: false.")
    gone = source_problem(Source("updates", "http://127.0.0.1:9", "bookworm-updates", ("main",), None, "base"))
    assert "its mirror cannot be reached" in gone and "http_proxy" in gone
    assert probe_url(f"file://{tmp_path}/dists/bookworm/InRelease") is None
    assert probe_url(f"file://{tmp_path}/dists/trixie/InRelease") == "no such file"
