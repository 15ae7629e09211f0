"""The unprivileged build user of the rootless test and benchmark: made when missing, commands run as it.

Used by tests/integration/test_rootless.py and benchmarks/rootless_bench.py (both run as root); also what a root
tree holds entry by entry (:func:`tree_entries`), which test_bootstrap_userns.py and the benchmark compare.
The user keeps its own containers-storage (~/.local/share/containers, overlay unless a
storage.conf says otherwise) between runs, so a bootstrap image copied into it once is reused.
"""

from __future__ import annotations

import json
import os
import pwd
import stat
import subprocess
from pathlib import Path

from conftest import listing_raced

REPO = Path(__file__).resolve().parents[2]
USER = "hpcbuild"
SUBORDINATE_COUNT = 65536
STORAGE_CONF = '[storage]\ndriver = "overlay"\n'


def ensure_user(name: str = USER, subids: bool = True) -> pwd.struct_passwd:
    """``name`` (made with a home when missing); with ``subids`` it has lines in /etc/subuid and /etc/subgid."""
    try:
        account = pwd.getpwnam(name)
    except KeyError:
        argv = ["useradd", "--create-home", "--shell", "/bin/bash", name]
        if not subids:
            argv[1:1] = ["-K", "SUB_UID_COUNT=0", "-K", "SUB_GID_COUNT=0"]
        subprocess.run(argv, check=True)
        account = pwd.getpwnam(name)
    if subids:
        for path in ("/etc/subuid", "/etc/subgid"):
            _ensure_subids(name, Path(path))
    return account


def _ensure_subids(name: str, path: Path) -> None:
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    if any(line.split(":")[0] == name for line in lines):
        return
    ends = [int(f[1]) + int(f[2]) for f in (line.split(":") for line in lines) if len(f) == 3]
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(f"{name}:{max([100000, *ends])}:{SUBORDINATE_COUNT}\n")


def write_user_file(account: pwd.struct_passwd, path: Path, text: str) -> None:
    """``text`` at ``path`` below the user's home, the file and the directories made owned by the user."""
    missing = [p for p in reversed(path.parents) if not p.exists()]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    for made in [*missing, path]:
        os.chown(made, account.pw_uid, account.pw_gid)


def ensure_storage_conf(account: pwd.struct_passwd) -> None:
    """The user's ~/.config/containers/storage.conf, overlay (the kernel's, rootless) when it has none."""
    conf = Path(account.pw_dir, ".config", "containers", "storage.conf")
    if not conf.exists():
        write_user_file(account, conf, STORAGE_CONF)


def as_user(user: str, argv: list[str], env: dict[str, str] | None = None, cwd: Path = Path("/tmp"),
            timeout: float | None = None) -> subprocess.CompletedProcess:
    """``argv`` as ``user`` with a clean environment (its HOME, the checkout's .venv first in PATH)."""
    account = pwd.getpwnam(user)
    base = {"HOME": account.pw_dir, "USER": user, "LOGNAME": user, "LANG": "C.UTF-8",
            "PATH": f"{REPO}/.venv/bin:/usr/local/bin:/usr/bin:/bin:/usr/sbin", "BUILDAH_ISOLATION": "chroot"}
    command = ["runuser", "-u", user, "--", "env", "-i",
               *[f"{k}={v}" for k, v in {**base, **(env or {})}.items()], *argv]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False, timeout=timeout)


def playbook_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """What a user's ansible-playbook of this checkout needs: the checkout is root's, so git is told to trust it."""
    return {"ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "PYTHONPATH": str(REPO / ".collections"),
            "ANSIBLE_NOCOLOR": "1", "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory",
            "GIT_CONFIG_VALUE_0": str(REPO), **(extra or {})}


def buildah_as(user: str | None, *args: str, env: dict[str, str] | None = None) -> str:
    """``buildah <args>`` as root (``user`` None) or as ``user``; AssertionError with stderr when it fails."""
    for _attempt in range(5):
        if user is None:
            proc = subprocess.run(["buildah", *args], capture_output=True, text=True, check=False,
                                  env={**os.environ, **(env or {})})
        else:
            proc = as_user(user, ["buildah", *args], env)
        if not listing_raced(args, proc):
            break
    if proc.returncode != 0:
        raise AssertionError(f"buildah {' '.join(args)} as {user or 'root'} failed: {proc.stderr}")
    return proc.stdout


def tags(images_json: str, repo: str) -> set[str]:
    """Tags (content keys) of ``repo`` in a ``buildah images --json`` listing, without ``latest``."""
    return {name.rsplit(":", 1)[1] for image in json.loads(images_json or "[]") or []
            for name in image.get("names") or [] if name.rsplit(":", 1)[0] == repo and not name.endswith(":latest")}


def copy_images(repo: str, user: str, workdir: Path, env: dict[str, str] | None = None) -> list[str]:
    """Root's images of ``repo`` that ``user``'s storage lacks, copied into it through OCI archives (their
    owners map into the user's namespace); returns the tags copied."""
    missing = tags(buildah_as(None, "images", "--json"), repo) - tags(buildah_as(user, "images", "--json", env=env), repo)
    for tag in sorted(missing):
        archive = workdir / f"copy-{tag[:12]}.tar"
        buildah_as(None, "push", "--quiet", f"{repo}:{tag}", f"oci-archive:{archive}")
        os.chown(archive, pwd.getpwnam(user).pw_uid, -1)
        try:
            image_id = buildah_as(user, "pull", "--quiet", f"oci-archive:{archive}", env=env).strip().splitlines()[-1]
            buildah_as(user, "tag", image_id, f"{repo}:{tag}", env=env)
        finally:
            archive.unlink()
    return sorted(missing)


def tag_root_bootstrap(prefix: str, source_prefix: str = "localhost/hpc-stateless", layer: str = "base") -> None:
    """Root's cached bootstrap images of ``source_prefix`` tagged under ``prefix`` too (same spec, same key)."""
    source = f"{source_prefix}/bootstrap/{layer}"
    for tag in tags(buildah_as(None, "images", "--json"), source):
        buildah_as(None, "tag", f"{source}:{tag}", f"{prefix}/bootstrap/{layer}:{tag}")


#: What differs between two bootstraps of the same packages whoever runs them (a :func:`tree_entries` skip): logs,
#: debconf's and ldconfig's caches, the rootfs module's record (its mode), and apt's binary caches (a mapped
#: bootstrap parses the lists in its namespace; an unmapped one leaves that to its layer's commit).
BOOTSTRAP_VARYING = ("var/log/", "var/cache/debconf/", "var/cache/ldconfig/", "var/lib/hpc-stateless/rootfs.json",
                     "var/cache/apt/srcpkgcache.bin", "var/cache/apt/pkgcache.bin")


def tree_entries(root: Path, skip: tuple[str, ...] = ()) -> dict[str, tuple]:
    """Every entry below ``root`` (relative path -> mode with its kind, owner, group, size of a file or a link, link
    target, device numbers, file capability), but those in ``skip`` (a path, or a prefix ending in "/")."""
    entries = {}
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(top, name)
            rel = str(path.relative_to(root))
            if any(rel == s.rstrip("/") or (s.endswith("/") and rel.startswith(s)) for s in skip):
                continue
            info = os.lstat(path)
            link = os.readlink(path) if stat.S_ISLNK(info.st_mode) else None
            try:
                capability = None if link is not None else os.getxattr(
                    path, "security.capability", follow_symlinks=False)
            except OSError:
                capability = None
            size = info.st_size if stat.S_ISREG(info.st_mode) or link is not None else None
            device = (os.major(info.st_rdev), os.minor(info.st_rdev)) if stat.S_ISCHR(info.st_mode) else None
            entries[rel] = (info.st_mode, info.st_uid, info.st_gid, size, link, device, capability)
    return entries
