"""Command lines, defaults, errors and records of rootfs_bootstrap (pure functions, nothing runs).

The real runs of these command lines are in tests/integration/test_rootfs_rpm.py.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
import subprocess
from pathlib import Path

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils._build import caches
from ansible_collections.hpc.stateless.plugins.module_utils._build import bootstrap as bootstrap_module
from ansible_collections.hpc.stateless.plugins.module_utils._layers import graph as layer_graph
from ansible_collections.hpc.stateless.plugins.module_utils._build.bootstrap import (
    BOOTSTRAP_KEYS,
    CACHE_LOCK_NAME,
    DISTRO_FAMILIES,
    FAMILY_TOOLS,
    MODE_MAPPED,
    MODE_ROOT,
    MODE_UNSHARE,
    MODE_USERNS,
    MMDEBSTRAP_FILE_MIRROR_HOOKS,
    REPO_ID,
    BootstrapSpec,
    RootfsBootstrap,
    RootfsError,
    RootfsRequest,
    bootstrap_commands,
    bootstrap_record,
    cache_lock,
    cache_state_in_root,
    debootstrap_argv,
    distro_family,
    downloaded_packages_in_root,
    dnf_argv,
    effective_packages,
    in_user_namespace,
    APT_RETRIES,
    make_dev_entries,
    mapped_target,
    parse_lists_argv,
    mmdebstrap_argv,
    privilege_mode,
    resolve_tool,
    parse_tool_version,
    record_differences,
    required_binaries,
    resolve_mirror,
    rpm_macros,
    rpmdb_path,
    unreadable_by_others,
    zypper_argvs,
)
from ansible_collections.hpc.stateless.plugins.module_utils._build import idshift
from ansible_collections.hpc.stateless.plugins.module_utils._build.idshift import IdRange

ROOT = "/srv/root"
ROCKY_URL = "https://dl.rockylinux.org/pub/rocky/9/BaseOS/x86_64/os/"


def deb(**kw) -> BootstrapSpec:
    return BootstrapSpec(**{"path": ROOT, "distro": "debian", "release": "bookworm",
                            "mirror": "http://deb.debian.org/debian", **kw})


def rocky(**kw) -> BootstrapSpec:
    return BootstrapSpec(**{"path": ROOT, "distro": "rocky", "release": "9", "mirror": ROCKY_URL, **kw})


def leap(**kw) -> BootstrapSpec:
    return BootstrapSpec(**{"path": ROOT, "distro": "opensuse-leap", "release": "15.6",
                            "mirror": "/srv/mirror/leap", **kw})


# --- distro families -------------------------------------------------------------------------

def test_distro_families_is_layer_graph_table():
    assert DISTRO_FAMILIES is layer_graph.SUPPORTED_DISTROS


@pytest.mark.parametrize(("distro", "family"), [
    ("debian", "debootstrap"), ("ubuntu", "debootstrap"), ("rocky", "dnf"), ("almalinux", "dnf"),
    ("fedora", "dnf"), ("ol", "dnf"), ("opensuse-leap", "zypper"), ("sles", "zypper"),
])
def test_distro_family(distro, family):
    assert distro_family(distro) == family
    assert BootstrapSpec(path=ROOT, distro=distro, release="x", mirror="m").family == family


def test_unknown_distro_lists_supported():
    with pytest.raises(ValueError) as err:
        distro_family("arch")
    assert str(err.value).startswith("distro 'arch' is not supported; supported: almalinux, centos, debian, ")
    assert str(err.value).endswith("sles, ubuntu")
    with pytest.raises(ValueError, match="distro 'gentoo' is not supported"):
        BootstrapSpec(path=ROOT, distro="gentoo", release="x", mirror="m")


# --- mirrors ---------------------------------------------------------------------------------

def test_default_mirrors():
    assert resolve_mirror("debian", None) == "http://deb.debian.org/debian"
    assert resolve_mirror("ubuntu", "") == "http://archive.ubuntu.com/ubuntu"


def test_explicit_mirror_wins():
    assert resolve_mirror("debian", "http://mirror.local/debian") == "http://mirror.local/debian"
    assert resolve_mirror("rocky", "/srv/mirror/rocky") == "/srv/mirror/rocky"


@pytest.mark.parametrize("distro", ["rocky", "fedora", "opensuse-leap", "sles"])
def test_rpm_distros_require_mirror(distro):
    with pytest.raises(ValueError) as err:
        resolve_mirror(distro, None)
    assert str(err.value).startswith(f"mirror is required for distro {distro!r}")


# --- debootstrap -----------------------------------------------------------------------------

def test_debootstrap_minimal_argv():
    assert debootstrap_argv(deb()) == [
        "debootstrap", "--components=main", "--cache-dir=/var/cache/hpc-stateless/debootstrap",
        "bookworm", ROOT, "http://deb.debian.org/debian",
    ]


def test_debootstrap_full_argv():
    spec = deb(variant="minbase", packages=("systemd-sysv", "python3", "python3"), components=("main", "contrib"),
               arch="arm64", keyring="/usr/share/keyrings/debian-archive-keyring.gpg",
               extra_args=("--merged-usr",), cache_dir="/var/tmp/debcache")
    assert debootstrap_argv(spec, "/usr/sbin/debootstrap") == [
        "/usr/sbin/debootstrap", "--variant=minbase", "--include=python3,systemd-sysv",
        "--components=main,contrib", "--arch", "arm64", "--cache-dir=/var/tmp/debcache",
        "--keyring=/usr/share/keyrings/debian-archive-keyring.gpg", "--merged-usr",
        "bookworm", ROOT, "http://deb.debian.org/debian",
    ]


def test_debootstrap_no_gpg_check_drops_keyring():
    argv = debootstrap_argv(deb(gpg_check=False, keyring="/k.gpg"))
    assert "--no-check-gpg" in argv
    assert not [arg for arg in argv if arg.startswith("--keyring")]
    # Options stay before the three positionals.
    assert argv[-3:] == ["bookworm", ROOT, "http://deb.debian.org/debian"]


def test_debootstrap_empty_components_fall_back_to_main():
    assert "--components=main" in debootstrap_argv(deb(components=()))


# --- mmdebstrap (the default Debian tool) ----------------------------------------------------

# The cache is the read-only lower layer of an overlay: the bootstrap's writes go to a directory of its own.
VIEW = f"/var/cache/hpc-stateless/.builds/bootstrap-{hashlib.sha256(ROOT.encode()).hexdigest()[:12]}"
OVERLAY = (f"mount -t overlay overlay -o lowerdir=/var/cache/hpc-stateless/debootstrap,upperdir={VIEW}/upper,"
           f"workdir={VIEW}/work")
CACHE_HOOKS = [
    "--skip=essential/unlink",
    "--skip=cleanup/apt/lists",
    f"--hook-dir={MMDEBSTRAP_FILE_MIRROR_HOOKS}",
    '--setup-hook=mkdir -p "$1/var/cache/apt/archives" && { '
    f'{OVERLAY} "$1/var/cache/apt/archives" || {OVERLAY},userxattr "$1/var/cache/apt/archives" '
    f'|| mount -o bind {VIEW}/upper "$1/var/cache/apt/archives"; }}',
    '--customize-hook=umount "$1/var/cache/apt/archives"',
]


def test_mmdebstrap_is_the_default_debian_tool():
    assert deb().tool == "mmdebstrap"
    assert BootstrapSpec(path=ROOT, distro="ubuntu", release="noble", mirror="m").tool == "mmdebstrap"
    assert rocky().tool == "dnf" and leap().tool == "zypper"
    assert FAMILY_TOOLS is layer_graph.BOOTSTRAP_TOOLS


def test_mmdebstrap_minimal_argv_shares_the_debian_cache():
    assert mmdebstrap_argv(deb()) == ["mmdebstrap", "--mode=root", "--components=main", APT_RETRIES, *CACHE_HOOKS,
                                      "bookworm", ROOT, "deb http://deb.debian.org/debian bookworm main",
                                      "deb http://deb.debian.org/debian bookworm-updates main",
                                      "deb http://deb.debian.org/debian-security bookworm-security main"]
    assert deb().cache_dir == deb(tool="debootstrap").cache_dir == "/var/cache/hpc-stateless/debootstrap"


def test_mmdebstrap_full_argv():
    spec = deb(variant="minbase", packages=("systemd-sysv", "python3"), components=("main", "contrib"),
               arch="arm64", keyring="/k.gpg", extra_args=("--verbose",), cache_dir="/var/tmp/my cache",
               mirror="/srv/mirror/debian")
    argv = mmdebstrap_argv(spec, "/usr/bin/mmdebstrap")
    assert argv[:8] == ["/usr/bin/mmdebstrap", "--mode=root", "--variant=minbase", "--include=python3,systemd-sysv",
                        "--components=main,contrib", APT_RETRIES, "--architectures=arm64", "--keyring=/k.gpg"]
    # the cache path is quoted for the hook's shell; a local mirror becomes a file:// URL
    assert "-o lowerdir='/var/tmp/my cache',upperdir=/var/tmp/.builds/bootstrap-" in argv[11]
    assert argv[-6:] == ["--verbose", "bookworm", ROOT, "deb file:///srv/mirror/debian bookworm main contrib",
                         "deb file:///srv/mirror/debian bookworm-updates main contrib",
                         "deb http://deb.debian.org/debian-security bookworm-security main contrib"]


def test_a_local_deb_is_an_include_of_its_own():
    """mmdebstrap takes an --include value holding a "/" whole, as the path of one .deb ("x.deb,hostname is not an
    existing file")."""
    argv = mmdebstrap_argv(deb(packages=("hostname", "/srv/debs/site_1.0_all.deb", "bash")))
    assert [a for a in argv if a.startswith("--include=")] == ["--include=bash,hostname",
                                                               "--include=/srv/debs/site_1.0_all.deb"]
    assert [a for a in mmdebstrap_argv(deb(packages=("/a.deb",))) if a.startswith("--include")] == ["--include=/a.deb"]


def test_mmdebstrap_no_gpg_check_allows_unsigned_and_drops_keyring():
    argv = mmdebstrap_argv(deb(gpg_check=False, keyring="/k.gpg"))
    assert '--aptopt=Acquire::AllowInsecureRepositories "true"' in argv
    assert '--aptopt=APT::Get::AllowUnauthenticated "true"' in argv
    assert not any(arg.startswith("--keyring") for arg in argv)


def test_tool_must_fit_the_distro():
    with pytest.raises(ValueError, match="tool 'mmdebstrap' cannot bootstrap distro 'rocky'; use one of: dnf"):
        rocky(tool="mmdebstrap")
    assert resolve_tool("debian", "debootstrap") == "debootstrap"
    assert resolve_tool("sles", None) == "zypper"


# --- privilege modes -------------------------------------------------------------------------

HOST_UID_MAP = "         0          0 4294967295\n"
BUILDAH_UNSHARE_UID_MAP = "         0       1001          1\n         1     100000      65536\n"


def test_privilege_mode_from_euid_and_namespace():
    assert not in_user_namespace(HOST_UID_MAP)
    assert in_user_namespace(BUILDAH_UNSHARE_UID_MAP)
    assert privilege_mode(0, HOST_UID_MAP) == MODE_ROOT
    assert privilege_mode(0, BUILDAH_UNSHARE_UID_MAP) == MODE_USERNS
    assert privilege_mode(1001, HOST_UID_MAP) == MODE_UNSHARE


def test_userns_mode_runs_the_tools_as_they_are():
    assert bootstrap_commands(deb(mode=MODE_USERNS)) == [mmdebstrap_argv(deb())]
    assert bootstrap_commands(rocky(mode=MODE_USERNS)) == [dnf_argv(rocky())]


def test_unshare_mode_wraps_every_command_in_buildah_unshare():
    binaries = {"buildah": "/usr/bin/buildah", "zypper": "/usr/bin/zypper", "rpm": "/usr/bin/rpm"}
    commands = bootstrap_commands(leap(keyring="/k", mode=MODE_UNSHARE), binaries)
    assert [argv[:4] for argv in commands] == [["/usr/bin/buildah", "unshare", "--", "/usr/bin/rpm"]] + [
        ["/usr/bin/buildah", "unshare", "--", "/usr/bin/zypper"]] * 2
    assert [argv[3:] for argv in commands] == zypper_argvs(leap(keyring="/k"), "/usr/bin/zypper", "/usr/bin/rpm")
    assert bootstrap_commands(deb(mode=MODE_UNSHARE))[0][:4] == ["buildah", "unshare", "--", "mmdebstrap"]
    # an environment for the tool only (rpm's private HOME) is set inside the namespace
    inside = bootstrap_commands(rocky(mode=MODE_UNSHARE), inner_env={"HOME": "/tmp/h"})
    assert inside == [["buildah", "unshare", "--", "env", "HOME=/tmp/h", *dnf_argv(rocky())]]


def test_debootstrap_needs_root_on_the_host():
    with pytest.raises(ValueError, match="tool debootstrap needs root on the host .*as an ordinary user.*mmdebstrap"):
        deb(tool="debootstrap", mode=MODE_UNSHARE)
    with pytest.raises(ValueError, match="inside a user namespace"):
        deb(tool="debootstrap", mode=MODE_USERNS)
    with pytest.raises(ValueError, match="mode 'fake' is not one of root, mapped, userns, unshare"):
        deb(mode="fake")
    assert deb(tool="debootstrap", mode=MODE_ROOT).tool == "debootstrap"


# --- dnf -------------------------------------------------------------------------------------

DNF_HEAD = [
    "dnf", f"--installroot={ROOT}", "--releasever=9", "--setopt=reposdir=/dev/null", "--disablerepo=*",
]


def test_dnf_argv_with_keyring():
    spec = rocky(keyring="/srv/keys/RPM-GPG-KEY-Rocky-9", packages=("python3", "bash"))
    assert dnf_argv(spec) == DNF_HEAD + [
        f"--repofrompath={REPO_ID},{ROCKY_URL}", f"--enablerepo={REPO_ID}",
        "--setopt=install_weak_deps=False", "--setopt=cachedir=/var/cache/hpc-stateless/dnf",
        "--setopt=keepcache=True", f"--setopt={REPO_ID}.gpgcheck=True",
        f"--setopt={REPO_ID}.gpgkey=file:///srv/keys/RPM-GPG-KEY-Rocky-9",
        "-y", "install", "bash", "python3",
    ]


def test_dnf_argv_without_keyring_still_checks():
    argv = dnf_argv(rocky())
    assert f"--setopt={REPO_ID}.gpgcheck=True" in argv
    assert "--nogpgcheck" not in argv
    assert not [arg for arg in argv if ".gpgkey=" in arg]
    # Default package set when none are given.
    assert argv[-6:] == ["-y", "install", "bash", "dnf", "python3", "systemd"]


def test_dnf_argv_no_gpg_check_local_mirror_arch_extra_cache():
    spec = rocky(mirror="/srv/mirror/rocky", gpg_check=False, keyring="/ignored.key", arch="aarch64",
                 extra_args=("--setopt=tsflags=nodocs",), cache_dir="/var/tmp/dnfcache", packages=("bash",))
    assert dnf_argv(spec, "/usr/bin/dnf") == [
        "/usr/bin/dnf", f"--installroot={ROOT}", "--releasever=9", "--setopt=reposdir=/dev/null",
        "--disablerepo=*", f"--repofrompath={REPO_ID},file:///srv/mirror/rocky", f"--enablerepo={REPO_ID}",
        "--setopt=install_weak_deps=False", "--setopt=cachedir=/var/tmp/dnfcache", "--setopt=keepcache=True",
        "--forcearch=aarch64", "--nogpgcheck", "--setopt=tsflags=nodocs", "-y", "install", "bash",
    ]
    # The layer's architecture comes in Debian's name (docs/arch.md): dnf gets rpm's.
    assert dnf_argv(rocky(mirror="/srv/mirror/rocky", arch="arm64"), "/usr/bin/dnf").count("--forcearch=aarch64") == 1


# --- zypper ----------------------------------------------------------------------------------

ZYPPER_GLOBAL = ["zypper", f"--root={ROOT}", "--non-interactive", "--cache-dir=/var/cache/hpc-stateless/zypper"]


def test_zypper_argvs_with_keyring():
    spec = leap(keyring="/srv/keys/suse.key", packages=("zypper", "bash"))
    assert zypper_argvs(spec) == [
        ["rpm", f"--root={ROOT}", "--import", "/srv/keys/suse.key"],
        ZYPPER_GLOBAL + ["addrepo", "--refresh", "--keep-packages", "--gpgcheck", "file:///srv/mirror/leap", REPO_ID],
        ZYPPER_GLOBAL + ["install", "--no-recommends", "bash", "zypper"],
    ]


def test_zypper_argvs_no_gpg_check_extra_args_cache_dir():
    spec = leap(mirror="http://mirror.example.org/leap/oss/", gpg_check=False, keyring="/srv/keys/suse.key",
                extra_args=("--no-confirm",), cache_dir="/var/tmp/zc", packages=("bash",))
    glob = ["/usr/bin/zypper", f"--root={ROOT}", "--non-interactive", "--cache-dir=/var/tmp/zc", "--no-gpg-checks"]
    assert zypper_argvs(spec, "/usr/bin/zypper", "/usr/bin/rpm") == [
        glob + ["addrepo", "--refresh", "--keep-packages", "--no-gpgcheck",
                "http://mirror.example.org/leap/oss/", REPO_ID],
        glob + ["install", "--no-recommends", "--no-confirm", "bash"],
    ]


def test_zypper_without_keyring_has_no_import_and_default_packages():
    commands = zypper_argvs(leap())
    assert [argv[0] for argv in commands] == ["zypper", "zypper"]
    assert commands[-1][-4:] == ["bash", "python3", "systemd", "zypper"]


def test_zypper_refuses_another_arch_than_the_build_hosts(monkeypatch):
    """zypper installs the build host's architecture: that one is accepted (the plan names every root's), any other
    refused, in Debian's or rpm's name."""
    monkeypatch.setattr(bootstrap_module, "host_arch", lambda: "amd64")
    with pytest.raises(ValueError) as err:
        zypper_argvs(leap(arch="arm64"))
    assert str(err.value).startswith("arch arm64 is not supported for zypper-family distros")
    with pytest.raises(ValueError, match="arch aarch64 is not supported"):
        bootstrap_commands(leap(arch="aarch64"))
    assert zypper_argvs(leap(arch="amd64")) == zypper_argvs(leap())
    assert zypper_argvs(leap(arch="x86_64")) == zypper_argvs(leap())


# --- dispatch, binaries, rpm database --------------------------------------------------------

def test_bootstrap_commands_use_resolved_binaries():
    binaries = {"debootstrap": "/usr/sbin/debootstrap", "mmdebstrap": "/usr/bin/mmdebstrap", "dnf": "/usr/bin/dnf",
                "zypper": "/usr/bin/zypper", "rpm": "/usr/bin/rpm"}
    assert bootstrap_commands(deb(), binaries)[0][0] == "/usr/bin/mmdebstrap"
    assert bootstrap_commands(deb(tool="debootstrap"), binaries)[0][0] == "/usr/sbin/debootstrap"
    assert [argv[0] for argv in bootstrap_commands(rocky(), binaries)] == ["/usr/bin/dnf"]
    assert [argv[0] for argv in bootstrap_commands(leap(keyring="/k"), binaries)] == [
        "/usr/bin/rpm", "/usr/bin/zypper", "/usr/bin/zypper"]
    assert bootstrap_commands(rocky()) == [dnf_argv(rocky())]


def test_required_binaries_name_debian_packages():
    assert required_binaries(deb()) == {"mmdebstrap": "mmdebstrap"}
    assert required_binaries(deb(tool="debootstrap")) == {"debootstrap": "debootstrap"}
    assert required_binaries(deb(mode=MODE_UNSHARE)) == {"mmdebstrap": "mmdebstrap", "buildah": "buildah"}
    assert required_binaries(rocky(mode=MODE_USERNS)) == {"dnf": "dnf"}
    assert required_binaries(rocky(keyring="/k")) == {"dnf": "dnf"}
    assert required_binaries(leap()) == {"zypper": "zypper"}
    assert required_binaries(leap(keyring="/k")) == {"zypper": "zypper", "rpm": "rpm"}
    assert required_binaries(leap(keyring="/k", gpg_check=False)) == {"zypper": "zypper"}


@pytest.mark.parametrize(("distro", "dbpath"), [
    ("rocky", "/var/lib/rpm"), ("almalinux", "/var/lib/rpm"), ("fedora", "/usr/lib/sysimage/rpm"),
    ("opensuse-leap", "/usr/lib/sysimage/rpm"), ("sles", "/usr/lib/sysimage/rpm"),
])
def test_rpmdb_path_and_macros(distro, dbpath):
    assert rpmdb_path(distro) == dbpath
    assert rpm_macros(distro) == f"%_dbpath {dbpath}\n"


def test_cache_state_in_root():
    assert cache_state_in_root(rocky(cache_dir="/var/tmp/dc")) == [
        f"{ROOT}/var/tmp/dc/expired_repos.json", f"{ROOT}/var/tmp/dc/last_makecache"]
    assert cache_state_in_root(leap()) == [
        f"{ROOT}/var/cache/hpc-stateless/zypper/solv/@System", f"{ROOT}/var/cache/hpc-stateless/zypper/pubkeys"]
    assert cache_state_in_root(deb()) == []


def test_downloaded_packages_in_root_are_debootstraps_debs_only(tmp_path):
    archives = tmp_path / "var/cache/apt/archives"
    (archives / "partial").mkdir(parents=True)
    for name in ("libc6_2.36_amd64.deb", "bash_5.2_amd64.deb", "lock"):
        (archives / name).write_text("x")
    (archives / "odd.deb").mkdir()  # not a file: left alone
    assert downloaded_packages_in_root(deb(path=str(tmp_path), tool="debootstrap")) == [
        str(archives / "bash_5.2_amd64.deb"), str(archives / "libc6_2.36_amd64.deb")]
    assert downloaded_packages_in_root(rocky(path=str(tmp_path))) == []
    assert downloaded_packages_in_root(deb(path=str(tmp_path / "missing"), tool="debootstrap")) == []
    # mmdebstrap's archive is the package cache's overlay, gone before its cleanup: what a package script left
    # there (a link too) is the tree's, never the host's to delete.
    assert downloaded_packages_in_root(deb(path=str(tmp_path))) == []


def test_effective_packages_sorted_unique_with_defaults():
    assert effective_packages(rocky(packages=("vim", "bash", "vim"))) == ["bash", "vim"]
    assert effective_packages(leap()) == ["bash", "python3", "systemd", "zypper"]
    assert effective_packages(deb()) == []


# --- records ---------------------------------------------------------------------------------

def test_bootstrap_record_debootstrap():
    spec = deb(variant="minbase", packages=("python3",), extra_args=("--merged-usr",), tool="debootstrap")
    assert bootstrap_record(spec, tool_version="1.0.128") == {
        "distro": "debian", "release": "bookworm", "mirror": "http://deb.debian.org/debian",
        "variant": "minbase", "packages": ["python3"], "components": ["main"], "arch": None,
        "extra_args": ["--merged-usr"], "tool": "debootstrap", "tool_version": "1.0.128", "mode": "root",
        "sources": ["release http://deb.debian.org/debian bookworm",
                    "updates http://deb.debian.org/debian bookworm-updates",
                    "security http://deb.debian.org/debian-security bookworm-security"],
    }


def test_bootstrap_record_names_mmdebstrap_and_the_mode():
    record = bootstrap_record(deb(mode=MODE_USERNS), tool_version="1.3.5")
    assert (record["tool"], record["tool_version"], record["mode"]) == ("mmdebstrap", "1.3.5", "userns")


def test_record_comparison_ignores_tool_and_mode():
    """A root debootstrap made as root is the same root mmdebstrap makes without it: provenance only."""
    old = bootstrap_record(deb(tool="debootstrap"), tool_version="1.0.128")
    new = bootstrap_record(deb(mode=MODE_UNSHARE), tool_version="1.3.5")
    assert (old["tool"], new["tool"], old["mode"], new["mode"]) == ("debootstrap", "mmdebstrap", "root", "unshare")
    assert record_differences(old, new) == []


def test_bootstrap_record_rpm_families_drop_variant_and_components():
    record = bootstrap_record(rocky(variant="minbase", components=("main", "contrib"), packages=("b", "a")))
    assert (record["variant"], record["components"], record["packages"], record["tool"]) == (
        None, None, ["a", "b"], "dnf")


def test_record_comparison_ignores_tool_version():
    old = bootstrap_record(deb(), tool_version="1.0.128")
    new = bootstrap_record(deb(), tool_version="1.0.134")
    assert old != new
    assert record_differences(old, new) == []


def test_record_comparison_ignores_package_order():
    assert record_differences(bootstrap_record(rocky(packages=("a", "b"))),
                              bootstrap_record(rocky(packages=("b", "a", "a")))) == []


def test_record_comparison_names_differing_keys_sorted():
    old = bootstrap_record(deb(variant="minbase"))
    new = bootstrap_record(deb(release="trixie", packages=("vim",), variant="minbase"), tool_version="x")
    assert record_differences(old, new) == ["packages", "release", "sources"]


def test_record_comparison_missing_key_counts_as_different():
    wanted = bootstrap_record(deb(arch="amd64"))
    old = {key: value for key, value in wanted.items() if key != "arch"}
    assert record_differences(old, wanted) == ["arch"]


@pytest.mark.parametrize(("output", "version"), [
    ("debootstrap 1.0.128+nmu2+deb12u2\n", "1.0.128+nmu2+deb12u2"),
    ("4.14.0\n  Installed: dnf-0:4.14.0\n", "4.14.0"),
    ("\nzypper 1.14.42\n", "1.14.42"),
    ("", None),
])
def test_parse_tool_version(output, version):
    assert parse_tool_version(output) == version


def test_a_bootstrap_that_waits_for_the_cache_says_whom_it_waits_for(tmp_path):
    """Two builds bootstrap at once: the second warns, naming the holder, and fails with its name past the timeout."""
    cache = tmp_path / "cache"
    cache.mkdir()
    keys = {key: None for key in BOOTSTRAP_KEYS}
    keys.update(distro="debian", release="bookworm")
    warnings: list[str] = []
    job = RootfsBootstrap(RootfsRequest(path=str(tmp_path / "root"), bootstrap=keys, cache_dir=str(cache), layer="base"),
                          warn=warnings.append, mode="root")
    held = cache_lock(str(cache), "/other/root", "hpc")
    held.acquire()
    try:
        with pytest.raises(RootfsError, match=r"still held by pid \d+ rootfs bootstrap of layer hpc \(/other/root\) since "
                                              r".* after 0.2 s; wait for that bootstrap to finish \(or end it\)"):
            job.locked_cache(timeout=0.2)
    finally:
        held.release()
    assert len(warnings) == 1 and warnings[0].startswith(
        f"waiting for the debootstrap package cache {cache}, held by pid {os.getpid()} rootfs bootstrap of layer hpc "
        "(/other/root) since ")
    job.locked_cache(timeout=0).release()
    assert (cache / CACHE_LOCK_NAME).read_text().startswith(
        f"pid {os.getpid()} rootfs bootstrap of layer base ({tmp_path / 'root'}) since ")
    assert cache_lock(str(cache), "/r").purpose == "rootfs bootstrap of /r"  # a bootstrap outside a layer build


def test_mmdebstraps_hooks_leave_the_shared_cache_unchanged_by_the_bootstraps_writes(tmp_path):
    """mmdebstrap's own hooks, run by a shell as mmdebstrap runs them (root, as the unit tests): a package script of
    the bootstrap that rewrites a cached .deb in place or adds one writes into the bootstrap's own directory."""
    cache, root = tmp_path / "cache" / "debootstrap", tmp_path / "root"
    cache.mkdir(parents=True)
    root.mkdir()
    (cache / "a_1_all.deb").write_bytes(b"genuine")
    argv = mmdebstrap_argv(deb(path=str(root), cache_dir=str(cache)))
    setup, customize = (next(a.split("=", 1)[1] for a in argv if a.startswith(f"--{hook}-hook="))
                        for hook in ("setup", "customize"))
    view = Path(caches.bootstrap_view(str(cache), str(root)))
    for name in ("upper", "work"):
        (view / name).mkdir(parents=True)
    subprocess.run(["sh", "-c", setup, "hook", str(root)], check=True)
    archives = root / "var" / "cache" / "apt" / "archives"
    try:
        assert (archives / "a_1_all.deb").read_bytes() == b"genuine"  # apt finds what earlier bootstraps fetched
        with open(archives / "a_1_all.deb", "r+b") as handle:
            handle.write(b"EVIL")
        (archives / "b_1_all.deb").write_bytes(b"downloaded")
    finally:
        subprocess.run(["sh", "-c", customize, "hook", str(root)], check=True)
    assert (cache / "a_1_all.deb").read_bytes() == b"genuine"
    assert sorted(p.name for p in cache.iterdir()) == ["a_1_all.deb"]
    assert (view / "upper" / "b_1_all.deb").read_bytes() == b"downloaded"  # merged only once the lists vouch for it
    caches.remove_tree(str(view))
    assert not view.exists() and not os.path.ismount(archives)


def _wget(tmp_path: Path, environ: dict[str, str]) -> subprocess.CompletedProcess:
    """The host's wget, as debootstrap runs it, at a name that never resolves (RFC 2606 .invalid): two tries at most
    (a command-line -e overrides the configuration), so the test takes a second."""
    return subprocess.run(["wget", "-e", "tries=2", "-e", "waitretry=1", "-O", str(tmp_path / "got"),
                           "http://hpc-stateless-mirror.invalid/debian/dists/bookworm/InRelease"],
                          env={**os.environ, **environ, "LC_ALL": "C"}, capture_output=True, text=True, check=False)


def test_debootstrap_s_wget_tries_again_when_the_mirror_s_name_does_not_resolve(tmp_path):
    """debootstrap's own downloads ride out a resolver outage as apt's do: its wget (the host's, really run) takes a
    name-resolution failure as transient and tries again, where by default it gives up at once."""
    keys = {key: None for key in BOOTSTRAP_KEYS}
    keys.update(distro="debian", release="bookworm", tool="debootstrap")
    job = RootfsBootstrap(RootfsRequest(path=str(tmp_path / "root"), bootstrap=keys, cache_dir=str(tmp_path / "c"),
                                        layer="base"), mode="root")
    home = tmp_path / "home"
    home.mkdir()
    environ = job.environment(str(home))
    assert environ["WGETRC"] == str(home / "wgetrc") and "retry_on_host_error = on" in (home / "wgetrc").read_text()
    (tmp_path / "empty").write_text("")
    plain = _wget(tmp_path, {"WGETRC": str(tmp_path / "empty")})
    retried = _wget(tmp_path, environ)
    assert plain.returncode == 4 and "Retrying" not in plain.stderr, plain.stderr  # 4: network failure
    assert retried.returncode == 4 and "Retrying" in retried.stderr, retried.stderr
    assert "hpc-stateless-mirror.invalid" in retried.stderr
    keys.update(tool="mmdebstrap")  # apt's own retries (APT_RETRIES) serve mmdebstrap
    assert "WGETRC" not in RootfsBootstrap(RootfsRequest(path=str(tmp_path / "root"), bootstrap=keys,
                                                         cache_dir=str(tmp_path / "c"), layer="base"),
                                           mode="root").environment(str(home))


def test_the_bootstrap_merge_trusts_the_sources_keyring_or_the_distributions_and_none_without_checks(tmp_path):
    """The keys whose Release signature lets a bootstrapped root's lists vouch for its downloads (_build/caches.py):
    the keyring given, else the host's archive keyrings; without signature checks nothing is merged."""
    keyring = tmp_path / "site.gpg"
    keyring.write_bytes(b"key")
    assert bootstrap_module.merge_keyrings(deb(keyring=str(keyring))) == [str(keyring)]
    assert bootstrap_module.merge_keyrings(deb()) == [
        k for k in bootstrap_module.DISTRO_KEYRINGS if os.path.isfile(k)]
    assert bootstrap_module.merge_keyrings(deb(gpg_check=False)) == []


# --- a root build's bootstrap in a user namespace (mapped) -------------------------------------

RANGES = (IdRange(165536, 65536), IdRange(300000, 65536))
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="device nodes and other owners need root (the unit suite runs as root)")


def test_mapped_mode_runs_mmdebstrap_as_root_of_a_user_namespace():
    """Host root binds the tree where the mapped uid may reach it, then unshare makes the user namespace of root's
    range (and a mount namespace of its own) and runs mmdebstrap there, aimed at the bound tree."""
    spec = deb(mode=MODE_MAPPED, id_ranges=RANGES, cache_dir="/var/cache/hpc-stateless/debootstrap")
    binaries = {"unshare": "/usr/bin/unshare", "mmdebstrap": "/usr/bin/mmdebstrap"}
    [argv] = bootstrap_commands(spec, binaries)
    target = mapped_target(spec)
    assert target == caches.bootstrap_view(spec.cache_dir, ROOT) + "/root"
    inner = argv.index("/usr/bin/unshare", 1)
    assert argv[:inner] == ["/usr/bin/unshare", "--mount", "--propagation=private", "--", "sh", "-c",
                            'mount --bind "$1" "$2" && shift 2 && exec "$@"', "sh", ROOT, target]
    assert argv[inner:inner + 8] == ["/usr/bin/unshare", "--user", "--mount", "--map-users=165536,0,65536",
                                     "--map-groups=300000,0,65536", "--setuid=0", "--setgid=0", "--"]
    tool = argv[inner + 8:]
    assert tool == mmdebstrap_argv(spec, "/usr/bin/mmdebstrap")
    assert tool[tool.index("bookworm") + 1] == target and ROOT not in tool
    assert required_binaries(spec) == {"mmdebstrap": "mmdebstrap", "unshare": "util-linux", "newuidmap": "uidmap",
                                       "newgidmap": "uidmap"}
    assert bootstrap_record(spec)["mode"] == "mapped"
    # Then apt's lists are parsed in the namespace by the tree's own apt-cache (the commit of the bootstrap's
    # container, which is not mapped, would run it as host root); no other bootstrap does.
    parse = parse_lists_argv(spec, binaries)
    assert parse[:inner + 8] == argv[:inner + 8]
    assert parse[inner + 8:] == ["sh", "-c", 'if [ -x "$1/usr/bin/apt-cache" ]; then exec chroot "$1" apt-cache '
                                 'gencaches; fi', "sh", target]
    assert parse_lists_argv(deb()) is None and parse_lists_argv(deb(mode=MODE_USERNS)) is None


@pytest.mark.parametrize("spec_of, tool, advice", [
    (lambda **kw: deb(tool="debootstrap", **kw), "debootstrap", "use tool: mmdebstrap (the default), or set"),
    (rocky, "dnf", "): set hpc_stateless_build_userns: false in the vars of layer base"),
    (leap, "zypper", "): set hpc_stateless_build_userns: false in the vars of layer base"),
])
def test_mapped_mode_refuses_the_tools_that_need_host_root(spec_of, tool, advice):
    with pytest.raises(ValueError) as caught:
        spec_of(mode=MODE_MAPPED, id_ranges=RANGES, layer="base")
    message = str(caught.value)
    assert message.startswith(f"tool {tool} cannot run its package scripts in a user namespace"), message
    assert advice in message and "docs/rootless.md" in message, message
    with pytest.raises(ValueError, match="needs the id ranges"):
        deb(mode=MODE_MAPPED)


def _request(tmp_path, userns, **keys):
    values = {key: None for key in BOOTSTRAP_KEYS}
    values.update({"distro": "debian", "release": "bookworm", **keys})
    return RootfsRequest(path=str(tmp_path / "root"), bootstrap=values, cache_dir=str(tmp_path / "c"), layer="base",
                         userns=userns)


def test_a_root_request_with_userns_bootstraps_mapped_in_roots_range(tmp_path, monkeypatch):
    monkeypatch.setattr(idshift, "root_ranges", lambda: RANGES)
    mapped = RootfsBootstrap(_request(tmp_path, True), mode=MODE_ROOT)
    assert (mapped.spec.mode, mapped.spec.id_ranges) == (MODE_MAPPED, RANGES)
    assert RootfsBootstrap(_request(tmp_path, False), mode=MODE_ROOT).spec.mode == MODE_ROOT
    # A rootless build's tools already run as the user: the option changes nothing there.
    assert RootfsBootstrap(_request(tmp_path, True), mode=MODE_USERNS).spec.mode == MODE_USERNS
    with pytest.raises(RootfsError, match="tool dnf cannot run its package scripts in a user namespace"):
        RootfsBootstrap(_request(tmp_path, True, distro="rocky", release="9", mirror=ROCKY_URL), mode=MODE_ROOT)

    def no_range():
        raise idshift.IdShiftError("root has no range of 65536: add the line 'root:165536:65536' to /etc/subuid")
    monkeypatch.setattr(idshift, "root_ranges", no_range)
    with pytest.raises(RootfsError, match="add the line 'root:165536:65536' to /etc/subuid"):
        RootfsBootstrap(_request(tmp_path, True), mode=MODE_ROOT)


@pytest.fixture
def shared_tmp():
    """A directory any uid may search (pytest's own temporary directories are root's alone, mode 0700)."""
    path = Path(tempfile.mkdtemp(prefix="hpc-rootfs-unit-", dir="/var/tmp"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path)


def test_a_mapped_bootstrap_fails_first_when_its_root_cannot_read_the_keyring(shared_tmp, monkeypatch):
    """The mapped root is "other" to host root's files: a keyring in a private directory is named before anything
    runs, with both ways on."""
    monkeypatch.setattr(idshift, "root_ranges", lambda: RANGES)
    tmp_path = shared_tmp
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    os.chmod(private, 0o700)
    keyring = private / "site.gpg"
    keyring.write_bytes(b"key")
    job = RootfsBootstrap(_request(tmp_path, True, keyring=str(keyring)), mode=MODE_ROOT)
    with pytest.raises(RootfsError, match=rf"the keyring {keyring} cannot be read by the bootstrap's mapped root "
                                          rf"\(root's subordinate uid 165536.*\): {private} is mode 0700\. Make it "
                                          "readable by all"):
        job.check_mapped_access()
    os.chmod(private, 0o755)
    os.chmod(keyring, 0o644)
    job.check_mapped_access()


def test_unreadable_by_others_names_the_first_component_that_stops_any_uid(shared_tmp):
    tmp_path = shared_tmp
    top = tmp_path / "top"
    (top / "sub").mkdir(parents=True)
    target = top / "sub" / "file"
    target.write_text("x")
    for path in (tmp_path, top, top / "sub"):
        os.chmod(path, 0o755)
    os.chmod(target, 0o644)
    assert unreadable_by_others(str(target)) is None
    os.chmod(target, 0o600)
    assert unreadable_by_others(str(target)) == f"{target} is mode 0600"
    os.chmod(target, 0o644)
    os.chmod(top, 0o750)
    assert unreadable_by_others(str(target)) == f"{top} is mode 0750"
    os.chmod(top, 0o755)
    assert unreadable_by_others(str(top / "missing")) == f"{top / 'missing'}: No such file or directory"


@as_root
def test_dev_entries_are_made_as_a_bootstrap_by_host_root_leaves_them(tmp_path):
    root = tmp_path / "root"
    (root / "dev").mkdir(parents=True)
    (root / "dev" / "null").write_text("a package's own file")  # never replaced
    made = make_dev_entries(str(root))
    assert "null" not in made and sorted(made) == sorted(
        ["console", "full", "ptmx", "random", "tty", "urandom", "zero", "fd", "stdin", "stdout", "stderr", "pts", "shm"])
    zero = os.lstat(root / "dev" / "zero")
    assert stat.S_ISCHR(zero.st_mode) and stat.S_IMODE(zero.st_mode) == 0o666
    assert (os.major(zero.st_rdev), os.minor(zero.st_rdev), zero.st_uid, zero.st_gid) == (1, 5, 0, 0)
    assert os.readlink(root / "dev" / "stderr") == "/proc/self/fd/2"
    assert stat.S_IMODE(os.lstat(root / "dev" / "pts").st_mode) == 0o755
    assert (root / "dev" / "null").read_text() == "a package's own file"
    assert make_dev_entries(str(root)) == []


@as_root
def test_dev_entries_never_follow_the_trees_links_onto_the_host(tmp_path):
    """A tree whose /dev is a link to a host directory: resolved inside the tree, where it leads nowhere."""
    host = tmp_path / "host-dir"
    host.mkdir()
    root = tmp_path / "root"
    root.mkdir()
    (root / "dev").symlink_to(host)
    with pytest.raises(OSError):
        make_dev_entries(str(root))
    assert not list(host.iterdir())


@as_root
def test_a_mapped_bootstraps_view_is_its_roots(tmp_path):
    cache = tmp_path / "cache" / "debootstrap"
    cache.mkdir(parents=True)
    view = Path(caches.new_bootstrap_view(str(cache), str(tmp_path / "root"), (165536, 300000)))
    for rel in ("upper", "work", "root", "upper/lock", "upper/partial"):
        info = os.lstat(view / rel)
        assert (info.st_uid, info.st_gid) == (165536, 300000), rel
    assert (view / "upper" / "partial").is_dir() and (view / "upper" / "lock").is_file()
    assert stat.S_IMODE(os.stat(view).st_mode) == 0o755 and os.stat(view.parent).st_mode & 0o011 == 0o011
    plain = Path(caches.new_bootstrap_view(str(cache), str(tmp_path / "root")))
    assert sorted(p.name for p in plain.iterdir()) == ["upper", "work"] and not list((plain / "upper").iterdir())
    assert os.stat(plain / "upper").st_uid == os.geteuid()
