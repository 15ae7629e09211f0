"""Pieces the fault cases share: catching a process group at the right instant, and what a pack
output and a boot tree must look like after a fault.

A killed run is started in a process group of its own (``faults_site.start_playbook``). The test
polls until the group reaches the instant to hit (a file open for writing under a directory, a
``buildah commit`` running, ...), freezes the whole group with SIGSTOP so the state it saw is the
state that gets killed, then SIGKILLs the group: nothing of ours gets to run a rescue, a
``finally`` or an ``atexit``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

from faults_site import FAULTS_IMAGE, run_site
from deploy_support import write_inventory
from pack_support import pack_module, small_root

# --------------------------------------------------------------------------- process groups


def _stat_fields(pid: str) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def group_processes(pgid: int) -> dict[int, list[str]]:
    """Live (not zombie) processes of process group ``pgid``: ``{pid: argv}``."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        fields = _stat_fields(pid)
        if not fields or int(fields[2]) != pgid or fields[0] in ("Z", "X"):
            continue
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        found[int(pid)] = [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]
    return found


def files_open_for_writing(pgid: int, under: Path) -> dict[str, int]:
    """Files below ``under`` that a process of group ``pgid`` holds open for writing: ``{path: size now}``."""
    prefix = str(under).rstrip("/") + "/"
    found = {}
    for pid in group_processes(pgid):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                with open(f"/proc/{pid}/fdinfo/{fd}", encoding="ascii") as handle:
                    flags = int(next(line for line in handle if line.startswith("flags:")).split()[1], 8)
            except (OSError, StopIteration, ValueError):
                continue
            if target.startswith(prefix) and flags & (os.O_WRONLY | os.O_RDWR):
                try:
                    found[target] = os.path.getsize(target)
                except OSError:
                    found[target] = -1
    return found


def _wait_stopped(pgid: int, timeout: float = 5) -> None:
    """Until every live process of the group is stopped (SIGSTOP is delivered asynchronously)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = [(_stat_fields(str(pid)) or ["X"])[0] for pid in group_processes(pgid)]
        if all(state in ("T", "t") for state in states):
            return
        time.sleep(0.002)


def stop_group_when(proc: subprocess.Popen, condition: Callable[[int], Any], what: str, timeout: float = 300,
                    interval: float = 0.01) -> Any:
    """Poll ``condition(process group id)`` until it holds, then SIGSTOP the whole group of ``proc``, and
    return ``condition``'s value once it still holds with every process stopped (else SIGCONT and poll on):
    the state returned is the state that a following SIGKILL hits. If the run ends first or ``timeout``
    passes, kill it and fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if condition(proc.pid):
            os.killpg(proc.pid, signal.SIGSTOP)
            _wait_stopped(proc.pid)
            seen = condition(proc.pid)
            if seen:
                return seen
            os.killpg(proc.pid, signal.SIGCONT)
        time.sleep(interval)
    ended = proc.poll()
    kill_group(proc)
    how = f"ended first (rc={ended})" if ended is not None else f"was still at it after {timeout:g} s"
    raise AssertionError(f"never saw {what}: the run {how}")


def kill_group(proc: subprocess.Popen, timeout: float = 30) -> None:
    """SIGKILL every process of ``proc``'s group (stopped ones included) and wait until none runs."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=timeout)
    deadline = time.monotonic() + timeout
    while group_processes(proc.pid):
        if time.monotonic() > deadline:
            raise AssertionError(f"processes of group {proc.pid} still run: {group_processes(proc.pid)}")
        time.sleep(0.05)


def processes_rooted_in(directory: str) -> list[str]:
    """Processes whose root directory (chroot) is ``directory`` or below it: ``pid argv`` lines."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            root = os.readlink(f"/proc/{pid}/root")
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if root == directory or root.startswith(directory.rstrip("/") + "/"):
            found.append(f"{pid} {argv.strip()}")
    return found


def mounts_below(directory: str) -> list[str]:
    """Mount points at or below ``directory`` (from /proc/self/mountinfo)."""
    prefix = directory.rstrip("/")
    with open("/proc/self/mountinfo", encoding="utf-8") as handle:
        targets = [line.split()[4].replace("\\040", " ") for line in handle]
    return [t for t in targets if t == prefix or t.startswith(prefix + "/")]


# --------------------------------------------------------------------------- pack output


def sha256sum_check(directory: Path) -> tuple[bool, str]:
    """``sha256sum -c --strict SHA256SUMS`` in ``directory`` (coreutils, not our code): (all good, output)."""
    proc = subprocess.run(["sha256sum", "-c", "--strict", "SHA256SUMS"], cwd=directory, capture_output=True,
                          text=True, check=False)
    return proc.returncode == 0, (proc.stdout + proc.stderr).strip()


def pack_dir(output: Path, version: str, tree_base: Path, blob_bytes: int = 0, **params) -> tuple[int, dict]:
    """Pack a small directory tree (a stand-in kernel in /boot, ``blob_bytes`` of random data) with the
    real hpc.stateless.pack module into ``output/<FAULTS_IMAGE>/<version>``."""
    extra = {"srv/blob": os.urandom(blob_bytes)} if blob_bytes else {}
    extra["etc/faults-version"] = version.encode()
    root = small_root(tree_base, extra=extra)
    return pack_module(image=FAULTS_IMAGE, source_path=str(root), output_dir=str(output), version=version,
                       **params)


def copy_version(packs: Path, version: str, output: Path) -> Path:
    """Copy one pack version directory (``packs/<image>/<version>``) into another pack output."""
    dest = output / FAULTS_IMAGE / version
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(packs / FAULTS_IMAGE / version, dest)
    return dest


def failure_of(stdout: str) -> str:
    """The playbook output from its first failed task on (``fatal:`` or a loop item's ``failed:``)."""
    starts = [i for i in (stdout.find("fatal: ["), stdout.find("failed: [")) if i >= 0]
    assert starts, f"no failed task in the output: {stdout[-3000:]}"
    return stdout[min(starts):]


def hidden_entries(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith(".")) if directory.is_dir() else []


# --------------------------------------------------------------------------- boot tree

DEPLOY_PLAYBOOK = "playbooks/deploy.yml"
GOOD_MAC = "52:54:00:fa:00:01"


def deploy_site(base: Path, boot_root: Path | None = None, nodes: dict | None = None, lock_timeout: float = 0,
                **group_vars) -> dict[str, Path]:
    """An inventory that deploys image FAULTS_IMAGE from ``base/out`` into ``boot_root`` (default ``base/tftp``)."""
    boot_root = boot_root or base / "tftp"
    images = {FAULTS_IMAGE: {"layer": "faulty", "formats": ["cpio.zst"], "kernel_args": "quiet"}}
    inventory = write_inventory(base / "inventory", images,
                                nodes if nodes is not None else {"n1": {"hpc_stateless_boot_mac": GOOD_MAC}},
                                hpc_stateless_boot_root=str(boot_root), hpc_stateless_pack_output_dir=str(base / "out"),
                                hpc_stateless_boot_lock_timeout=lock_timeout, hpc_stateless_boot_copy_loader=False,
                                **group_vars)
    return {"base": base, "root": boot_root, "out": base / "out", "inventory": inventory}


def deploy(site: dict[str, Path], version: str, *extra: str) -> subprocess.CompletedProcess:
    return run_site("-e", f"hpc_stateless_deploy_version={version}", *extra, inventory=site["inventory"],
                    playbook=DEPLOY_PLAYBOOK)


def served(root: Path, image: str = FAULTS_IMAGE) -> str | None:
    """The version ``<root>/<image>`` points at (None without a link)."""
    try:
        target = os.readlink(root / image)
    except FileNotFoundError:
        return None
    return target.rsplit("/", 1)[-1]


def boot_tree_problems(root: Path, image: str = FAULTS_IMAGE) -> list[str]:
    """Everything wrong with a boot tree: links that point at no complete version, versions whose files do
    not verify with ``sha256sum -c``, temp files of interrupted runs. Empty when the tree is consistent."""
    problems = []
    images = root / "images" / image
    link = root / image
    if not os.path.islink(link):
        problems.append(f"{link} is not a symlink")
    elif not os.readlink(link).startswith(f"images/{image}/"):
        problems.append(f"{link} -> {os.readlink(link)}, not into images/{image}/")
    elif not (root / os.readlink(link)).is_dir():
        problems.append(f"{link} -> {os.readlink(link)}, which does not exist")
    previous = images / "previous"
    if os.path.islink(previous) and not (images / os.readlink(previous)).is_dir():
        problems.append(f"{previous} -> {os.readlink(previous)}, which does not exist")
    for entry in sorted(images.iterdir()) if images.is_dir() else []:
        if entry.name.startswith(".") or entry.name == "previous" or entry.is_symlink():
            continue
        good, output = sha256sum_check(entry)
        if not good:
            problems.append(f"{entry}: sha256sum -c failed: {output[-500:]}")
        for name in ("vmlinuz", "initrd"):
            if not (entry / name).is_file():
                problems.append(f"{entry}/{name} is missing")
    problems += [f"leftover {p}" for p in leftovers(root)]
    return problems


def leftovers(root: Path) -> list[Path]:
    """Temp files and directories anywhere in a boot tree (the lock and the render state are not temporary)."""
    return sorted(p for p in root.rglob(".*") if p.relative_to(root).as_posix() not in KEPT_HIDDEN)


KEPT_HIDDEN = (".hpc-stateless.lock", ".hpc-stateless-bootconfig.state")
