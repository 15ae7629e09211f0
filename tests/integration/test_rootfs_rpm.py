"""The rootfs module's EL (dnf) and SUSE (zypper) paths, run for real against a local RPM repository.

The test builds its own repository: two noarch packages made with rpmbuild, signed with a
throw-away gpg key, indexed with createrepo_c, with a signed repomd.xml as zypper expects.
``hpc-test-release`` ships /etc/hpc-test-release and requires the capability
``hpc-test-base-marker``, which only ``hpc-test-base`` provides, so the tool must resolve a
dependency. ``hpc-test-base`` also owns the top directory of the host cache path (``/tmp``
under pytest), so the module's removal of the tools' state about the host cache from the root
must stop at a directory a package owns.

The module runs as a script (``python -m``), the way Ansible's module debugging runs it,
with Debian's real dnf, zypper and rpm. Needs root (dnf and rpm chown files in the root).
No fakes.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils._build.bootstrap import RECORD_RELPATH, rpmdb_path

REPO = Path(__file__).resolve().parents[2]
TOOLS = {"rpmbuild": "rpm", "rpmsign": "rpm", "rpm": "rpm", "createrepo_c": "createrepo-c", "gpg": "gpg",
         "dnf": "dnf", "zypper": "zypper"}
RELEASE_TEXT = "hpc test release 1.0\n"
ALL_PACKAGES = ["gpg-pubkey", "hpc-test-base", "hpc-test-release"]

_missing = sorted({package for tool, package in TOOLS.items() if not shutil.which(tool)})
pytestmark = [
    pytest.mark.skipif(bool(_missing), reason=f"needs the Debian packages {', '.join(_missing)} (scripts/setup.sh)"),
    pytest.mark.skipif(os.geteuid() != 0, reason="dnf --installroot and zypper --root need root"),
]

SPEC = """\
Name: {name}
Version: 1.0
Release: 1
Summary: hpc.stateless rootfs test package
License: GPL-3.0-or-later
BuildArch: noarch
{deps}

%description
Test package built by tests/integration/test_rootfs_rpm.py.

%install
{install}

%files
{files}
"""


@dataclass(frozen=True)
class RpmRepo:
    dir: Path
    url: str
    key: Path
    other_key: Path
    cache_top: str  # the directory hpc-test-base owns: the top of every host path under pytest's basetemp


def _run(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> str:
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, check=False, timeout=60)
    assert proc.returncode == 0, f"{' '.join(argv)} failed ({proc.returncode}): {proc.stdout}{proc.stderr}"
    return proc.stdout


def _gen_key(home: Path, email: str, env: dict[str, str]) -> Path:
    home.mkdir(mode=0o700)
    _run(["gpg", "--homedir", str(home), "--batch", "--passphrase", "", "--quick-gen-key",
          f"HPC Test <{email}>", "rsa2048", "sign", "never"], env)
    key = home.parent / f"{email}.asc"
    key.write_text(_run(["gpg", "--homedir", str(home), "--armor", "--export", email], env))
    return key


def _build_rpm(top: Path, name: str, deps: str, files: dict[str, str], dirs: list[str], env: dict[str, str]) -> Path:
    """Build one noarch package shipping `files` ({path: content}) and owning the directories `dirs`."""
    made = sorted({os.path.dirname(path) for path in files} | set(dirs))
    install = [f"mkdir -p %{{buildroot}}{directory}" for directory in made]
    install += [f"printf '%s' '{content}' > %{{buildroot}}{path}" for path, content in files.items()]
    top.mkdir(exist_ok=True)
    spec = top / f"{name}.spec"
    spec.write_text(SPEC.format(name=name, deps=deps, install="\n".join(install),
                                files="\n".join([f"%dir {d}" for d in dirs] + list(files))))
    _run(["rpmbuild", "--nodeps", "--define", f"_topdir {top}", "-bb", str(spec)], env)
    return top / "RPMS" / "noarch" / f"{name}-1.0-1.noarch.rpm"


@pytest.fixture(scope="module")
def rpm_repo(tmp_path_factory):
    """A signed local repository, also served over HTTP on 127.0.0.1; gpg agents stopped after."""
    work = tmp_path_factory.mktemp("rpmrepo")
    home = work / "home"  # HOME for rpmbuild, rpmsign, gpg: no user macros or ~/.rpmdb involved
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "LC_ALL": "C"}
    gnupg, other = work / "gnupg", work / "gnupg-other"
    key = _gen_key(gnupg, "hpc-test@example.invalid", env)
    other_key = _gen_key(other, "other@example.invalid", env)
    cache_top = "/" + Path(tmp_path_factory.getbasetemp()).resolve().parts[1]
    try:
        top = work / "rpmbuild"
        rpms = [
            _build_rpm(top, "hpc-test-base", "Provides: hpc-test-base-marker = 1.0",
                       {"/usr/share/hpc-test/base": "base\n"}, [cache_top], env),
            _build_rpm(top, "hpc-test-release", "Requires: hpc-test-base-marker",
                       {"/etc/hpc-test-release": RELEASE_TEXT}, [], env),
        ]
        repo = work / "repo"
        repo.mkdir()
        for rpm in rpms:
            shutil.copy(rpm, repo)
        _run(["rpmsign", "--define", f"__gpg {shutil.which('gpg')}", "--define", f"_gpg_path {gnupg}",
              "--define", "_gpg_name hpc-test@example.invalid", "--addsign",
              *sorted(str(p) for p in repo.glob("*.rpm"))], env)
        _run(["createrepo_c", "--quiet", str(repo)], env)
        _run(["gpg", "--homedir", str(gnupg), "--batch", "--yes", "--detach-sign", "--armor",
              "-u", "hpc-test@example.invalid", str(repo / "repodata" / "repomd.xml")], env)

        handler = functools.partial(_QuietHandler, directory=str(repo))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield RpmRepo(repo, f"http://127.0.0.1:{server.server_address[1]}/", key, other_key, cache_top)
        finally:
            server.shutdown()
            server.server_close()
    finally:
        for homedir in (gnupg, other):
            subprocess.run(["gpgconf", "--homedir", str(homedir), "--kill", "gpg-agent"], env=env,
                           capture_output=True, check=False)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - signature of the base class
        pass


def run_rootfs(args: dict, tmp_path: Path) -> tuple[dict, int]:
    """Run the module file as a script with `args`; return (result, exit code)."""
    args_file = tmp_path / f"args-{len(list(tmp_path.glob('args-*')))}.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = {**os.environ, "PYTHONPATH": str(REPO / ".collections")}
    proc = subprocess.run([sys.executable, "-m", "ansible_collections.hpc.stateless.plugins.modules.rootfs",
                           str(args_file)], capture_output=True, text=True, env=env, check=False, timeout=120)
    try:
        return json.loads(proc.stdout), proc.returncode
    except ValueError:
        raise AssertionError(f"module printed no JSON (rc={proc.returncode}): {proc.stdout}{proc.stderr}") from None


def installed(root: Path, distro: str) -> list[str]:
    """Package names in the root's rpm database, read where the target distro's rpm reads it."""
    out = _run(["rpm", f"--root={root}", f"--dbpath={rpmdb_path(distro)}", "-qa", "--qf", "%{NAME}\n"],
               {**os.environ, "HOME": str(root), "LC_ALL": "C"})
    return sorted(out.split())


def stored_record(root: Path) -> dict:
    return json.loads((root / RECORD_RELPATH).read_text(encoding="utf-8"))


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.lstat().st_mtime_ns, p.lstat().st_size) for p in root.rglob("*")}


def tool_version(tool: str) -> str:
    return _run([tool, "--version"], {**os.environ, "LC_ALL": "C"}).splitlines()[0].split()[-1]


def assert_no_host_cache_path(root: Path, cache: Path, cache_top: str) -> None:
    """The tools' state about the host cache was removed, up to the directory hpc-test-base owns."""
    assert not (root / str(cache).lstrip("/")).exists()
    kept = root / cache_top.lstrip("/")
    assert kept.is_dir() and os.listdir(kept) == []


# --- dnf (EL family) -------------------------------------------------------------------------

def test_dnf_signed_over_http_then_rerun(rpm_repo, tmp_path):
    root, cache = tmp_path / "root", tmp_path / "cache"
    args = {"path": str(root), "distro": "rocky", "release": "9", "mirror": rpm_repo.url,
            "keyring": str(rpm_repo.key), "packages": ["hpc-test-release"], "cache_dir": str(cache)}
    result, code = run_rootfs(args, tmp_path)
    assert code == 0, result.get("msg")
    assert result["changed"] is True
    assert (root / "etc" / "hpc-test-release").read_text() == RELEASE_TEXT
    assert rpmdb_path("rocky") == "/var/lib/rpm"
    assert (root / "var" / "lib" / "rpm" / "rpmdb.sqlite").is_file()
    assert installed(root, "rocky") == ALL_PACKAGES  # the key was imported into the new root
    assert stored_record(root) == result["record"]
    assert result["record"]["tool_version"] == tool_version("dnf")
    assert result["record"]["packages"] == ["hpc-test-release"]
    # keepcache: the downloaded packages stay in the host cache for the next build.
    assert sorted(p.name for p in cache.glob("*/packages/*.rpm")) == [
        "hpc-test-base-1.0-1.noarch.rpm", "hpc-test-release-1.0-1.noarch.rpm"]
    assert_no_host_cache_path(root, cache, rpm_repo.cache_top)
    assert "Complete!" in result["stdout_lines"]

    before = snapshot(root)
    again, code = run_rootfs(args, tmp_path)
    assert (code, again["changed"], again["commands"]) == (0, False, [])
    assert again["record"] == result["record"]
    assert snapshot(root) == before


def test_dnf_refuses_packages_signed_with_another_key(rpm_repo, tmp_path):
    root = tmp_path / "root"
    result, code = run_rootfs({"path": str(root), "distro": "almalinux", "release": "9", "mirror": str(rpm_repo.dir),
                               "keyring": str(rpm_repo.other_key), "packages": ["hpc-test-release"],
                               "cache_dir": str(tmp_path / "cache")}, tmp_path)
    assert code == 1
    assert result["msg"].startswith("bootstrap command failed (rc=1): ")
    assert any(line.startswith("Public key for hpc-test-") and "is not installed" in line
               for line in result["stderr_lines"])
    assert not (root / RECORD_RELPATH).exists()
    assert not (root / "etc" / "hpc-test-release").exists()


def test_dnf_force_rebootstraps_and_never_wipes_across_a_mount(rpm_repo, tmp_path):
    root, cache = tmp_path / "root", tmp_path / "cache"
    args = {"path": str(root), "distro": "rocky", "release": "9", "mirror": str(rpm_repo.dir), "gpg_check": False,
            "packages": ["hpc-test-release"], "cache_dir": str(cache)}
    first, code = run_rootfs(args, tmp_path)
    assert code == 0, first.get("msg")
    assert installed(root, "rocky") == ["hpc-test-base", "hpc-test-release"]  # no key without gpg_check
    assert "--nogpgcheck" in first["cmd"]

    smaller = {**args, "packages": ["hpc-test-base"]}
    refused, code = run_rootfs(smaller, tmp_path)
    assert code == 1
    assert refused["differing_keys"] == ["packages"]
    assert installed(root, "rocky") == ["hpc-test-base", "hpc-test-release"]

    mountpoint = root / "mnt-below"
    mountpoint.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "none", str(mountpoint)], capture_output=True, check=False).returncode == 0:
        try:
            (mountpoint / "precious").write_text("x")
            blocked, code = run_rootfs({**smaller, "force": True}, tmp_path)
            assert code == 1
            assert blocked["msg"] == (f"refusing to wipe {root}: file systems are mounted below it ({mountpoint}); "
                                      "unmount them first.")
            assert (mountpoint / "precious").read_text() == "x"
        finally:
            subprocess.run(["umount", str(mountpoint)], check=True)
    (root / "stray.txt").write_text("stray")

    forced, code = run_rootfs({**smaller, "force": True}, tmp_path)
    assert code == 0, forced.get("msg")
    assert forced["changed"] is True
    assert forced["diff"]["before"]["packages"] == ["hpc-test-release"]
    assert installed(root, "rocky") == ["hpc-test-base"]
    assert not (root / "etc" / "hpc-test-release").exists()
    assert not (root / "stray.txt").exists() and not mountpoint.exists()
    assert stored_record(root)["packages"] == ["hpc-test-base"]


# --- zypper (SUSE family) --------------------------------------------------------------------

def test_zypper_signed_local_dir_then_rerun(rpm_repo, tmp_path):
    root, cache = tmp_path / "root", tmp_path / "cache"
    args = {"path": str(root), "distro": "opensuse-leap", "release": "15.6", "mirror": str(rpm_repo.dir),
            "keyring": str(rpm_repo.key), "packages": ["hpc-test-release"], "cache_dir": str(cache)}
    result, code = run_rootfs(args, tmp_path)
    assert code == 0, result.get("msg")
    assert [argv[1] for argv in result["commands"]] == [f"--root={root}"] * 3
    assert result["commands"][0][2:] == ["--import", str(rpm_repo.key)]
    assert (root / "etc" / "hpc-test-release").read_text() == RELEASE_TEXT
    assert rpmdb_path("opensuse-leap") == "/usr/lib/sysimage/rpm"
    assert (root / "usr" / "lib" / "sysimage" / "rpm" / "rpmdb.sqlite").is_file()
    assert installed(root, "opensuse-leap") == ALL_PACKAGES
    assert stored_record(root) == result["record"]
    assert result["record"]["tool_version"] == tool_version("zypper")
    repo_file = (root / "etc" / "zypp" / "repos.d" / "hpc-stateless-base.repo").read_text()
    assert f"baseurl=file:{rpm_repo.dir}\n" in repo_file and "gpgcheck=1\n" in repo_file
    assert sorted(p.name for p in (cache / "packages" / "hpc-stateless-base").glob("*.rpm")) == [
        "hpc-test-base-1.0-1.noarch.rpm", "hpc-test-release-1.0-1.noarch.rpm"]
    assert (cache / "raw" / "hpc-stateless-base" / "repodata" / "repomd.xml").is_file()
    assert_no_host_cache_path(root, cache, rpm_repo.cache_top)

    before = snapshot(root)
    again, code = run_rootfs(args, tmp_path)
    assert (code, again["changed"], again["commands"]) == (0, False, [])
    assert snapshot(root) == before


def test_zypper_unsigned_check_over_http(rpm_repo, tmp_path):
    root = tmp_path / "root"
    result, code = run_rootfs({"path": str(root), "distro": "sles", "release": "15.6", "mirror": rpm_repo.url,
                               "gpg_check": False, "packages": ["hpc-test-release"],
                               "cache_dir": str(tmp_path / "cache")}, tmp_path)
    assert code == 0, result.get("msg")
    assert "--no-gpg-checks" in result["cmd"]
    assert installed(root, "sles") == ["hpc-test-base", "hpc-test-release"]
    assert "gpgcheck=0\n" in (root / "etc" / "zypp" / "repos.d" / "hpc-stateless-base.repo").read_text()


def test_zypper_refuses_metadata_signed_with_another_key(rpm_repo, tmp_path):
    root = tmp_path / "root"
    result, code = run_rootfs({"path": str(root), "distro": "opensuse-leap", "release": "15.6",
                               "mirror": str(rpm_repo.dir), "keyring": str(rpm_repo.other_key),
                               "packages": ["hpc-test-release"], "cache_dir": str(tmp_path / "cache")}, tmp_path)
    assert code == 1
    assert result["msg"].startswith("bootstrap command failed (rc=104): ")
    assert any("is signed with an unknown key" in line for line in result["stdout_lines"])
    assert not (root / RECORD_RELPATH).exists()
    assert not (root / "etc" / "hpc-test-release").exists()


# --- updates repositories (issue 27) ---------------------------------------------------------

def test_zypper_and_dnf_enable_the_updates_mirror_beside_the_mirror(rpm_repo, tmp_path):
    """updates_mirror is a second repository: hpc-test-release comes from it, hpc-test-base from the mirror."""
    updates = tmp_path / "updates"
    updates.mkdir()
    shutil.copy(next(rpm_repo.dir.glob("hpc-test-release-*.rpm")), updates)
    _run(["createrepo_c", "--quiet", str(updates)], {**os.environ, "LC_ALL": "C"})
    base_only = tmp_path / "base-only"
    base_only.mkdir()
    shutil.copy(next(rpm_repo.dir.glob("hpc-test-base-*.rpm")), base_only)
    _run(["createrepo_c", "--quiet", str(base_only)], {**os.environ, "LC_ALL": "C"})
    for distro in ("opensuse-leap", "fedora"):
        root = tmp_path / distro
        result, code = run_rootfs({"path": str(root), "distro": distro, "release": "15.6", "mirror": str(base_only),
                                   "updates_mirror": str(updates), "gpg_check": False,
                                   "packages": ["hpc-test-release"], "cache_dir": str(tmp_path / f"cache-{distro}")},
                                  tmp_path)
        assert code == 0, result.get("msg")
        assert installed(root, distro) == ["hpc-test-base", "hpc-test-release"]
        assert result["record"]["sources"] == [f"release file://{base_only}", f"updates file://{updates}"]
    repos = sorted(p.name for p in (tmp_path / "opensuse-leap" / "etc" / "zypp" / "repos.d").iterdir())
    assert repos == ["hpc-stateless-base.repo", "hpc-stateless-updates.repo"]


def test_an_updates_mirror_without_a_repository_fails_before_anything_runs(rpm_repo, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    root = tmp_path / "root"
    result, code = run_rootfs({"path": str(root), "distro": "fedora", "release": "40", "mirror": str(rpm_repo.dir),
                               "updates_mirror": str(empty), "packages": ["hpc-test-release"], "layer": "base",
                               "cache_dir": str(tmp_path / "cache")}, tmp_path)
    assert code == 1
    assert result["msg"].startswith(f"the updates source file://{empty} of layer base cannot be used: the mirror holds "
                                    f"no repository (file://{empty}/repodata/repomd.xml: no such file)")
    assert result["msg"].endswith("or switch it off with updates: false.")
    assert result["source"] == {"kind": "updates", "uri": f"file://{empty}", "suite": ""}
    assert not root.exists()


# --- without root (rootless builds) ----------------------------------------------------------
# The module runs as the rootless build user of tests/integration/test_rootless.py: as that user
# (the module wraps each tool in `buildah unshare`), and as root of the user namespace
# `buildah unshare` makes (how a rootless site.yml runs it). Files root owns inside the namespace
# are the user's own on the host, as in buildah's rootless storage.

from rootless_support import USER, as_user, ensure_user  # noqa: E402  (the rootless build user's set-up)


@pytest.fixture
def user_dir(tmp_path):
    """A directory the build user owns (pytest's basetemp is root's, mode 0700); removed by root after."""
    account = ensure_user(USER)
    work = Path(tempfile.mkdtemp(prefix="hpc-rootfs-rootless-", dir="/var/tmp"))
    os.chown(work, account.pw_uid, account.pw_gid)
    yield work, account
    shutil.rmtree(work)


def run_rootfs_as_user(args: dict, work: Path, in_namespace: bool) -> tuple[dict, int]:
    """The module as a script run by USER, directly or as root of `buildah unshare`."""
    args_file = work / f"args-{len(list(work.glob('args-*')))}.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    os.chmod(args_file, 0o644)
    argv = [str(REPO / ".venv" / "bin" / "python"), "-m", "ansible_collections.hpc.stateless.plugins.modules.rootfs",
            str(args_file)]
    proc = as_user(USER, (["buildah", "unshare", "--"] if in_namespace else []) + argv,
                   env={"PYTHONPATH": str(REPO / ".collections")}, cwd=work)
    try:
        return json.loads(proc.stdout), proc.returncode
    except ValueError:
        raise AssertionError(f"module printed no JSON (rc={proc.returncode}): {proc.stdout}{proc.stderr}") from None


@pytest.mark.parametrize(("in_namespace", "mode"), [(False, "unshare"), (True, "userns")])
def test_dnf_without_root(rpm_repo, user_dir, in_namespace, mode):
    work, account = user_dir
    key = work / "key.asc"
    shutil.copy(rpm_repo.key, key)
    os.chmod(key, 0o644)
    root, cache = work / "root", work / "cache"
    args = {"path": str(root), "distro": "rocky", "release": "9", "mirror": rpm_repo.url, "keyring": str(key),
            "packages": ["hpc-test-release"], "cache_dir": str(cache)}
    result, code = run_rootfs_as_user(args, work, in_namespace)
    assert code == 0, result.get("msg")
    assert result["record"]["mode"] == mode
    assert (result["cmd"][:3] == [shutil.which("buildah"), "unshare", "--"]) is (mode == "unshare")
    release = root / "etc" / "hpc-test-release"
    assert release.read_text() == RELEASE_TEXT
    # root inside the namespace is the user on the host: what the user's buildah storage expects
    assert (release.stat().st_uid, release.stat().st_gid) == (account.pw_uid, account.pw_gid)
    assert installed(root, "rocky") == ALL_PACKAGES
    assert not (root / str(cache).lstrip("/")).exists()
    assert stored_record(root) == result["record"]


def test_debian_root_as_root_of_a_user_namespace(user_dir):
    """mmdebstrap (root mode) inside `buildah unshare`: apt's package cache is the user's own, device nodes
    cannot be made, the kernel's hooks would build no initramfs. Downloads from deb.debian.org once."""
    work, account = user_dir
    root = work / "root"
    args = {"path": str(root), "distro": "debian", "release": "bookworm", "variant": "essential"}
    result, code = run_rootfs_as_user(args, work, in_namespace=True)
    assert code == 0, result.get("msg")
    record = result["record"]
    assert (record["tool"], record["mode"]) == ("mmdebstrap", "userns")
    cache = Path(account.pw_dir, ".cache", "hpc-stateless", "debootstrap")
    assert f"-o lowerdir={cache}," in " ".join(result["cmd"])
    assert any(cache.glob("libc6_*.deb")), "the packages stay in the user's cache"
    assert not list((root / "var" / "cache" / "apt" / "archives").glob("*.deb")), "and none in the root"
    passwd = root / "etc" / "passwd"
    assert (passwd.stat().st_uid, passwd.stat().st_gid) == (account.pw_uid, account.pw_gid)
    assert not [entry.name for entry in (root / "dev").iterdir()
                if stat.S_ISCHR(entry.lstat().st_mode) or stat.S_ISBLK(entry.lstat().st_mode)]
    assert stored_record(root) == record
    # bootstrapped from the three suites, and the root keeps them (issue 27)
    sources = root / "etc" / "apt" / "sources.list"
    assert sources.read_text().splitlines()[1:] == [
        "deb http://deb.debian.org/debian bookworm main", "deb http://deb.debian.org/debian bookworm-updates main",
        "deb http://deb.debian.org/debian-security bookworm-security main"]
    assert (sources.stat().st_uid, sources.stat().st_gid) == (account.pw_uid, account.pw_gid)
