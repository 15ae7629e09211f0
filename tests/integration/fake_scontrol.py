"""A recording fake of Slurm's ``scontrol`` for the rolling-update tests (a test double).

A fleet of physical nodes with slurmctld cannot run on this build host, so the rolling-update
playbook is tested against this stand-in. It keeps the node records a real slurmctld keeps
(State with flags, Reason, BootTime), records every call, and simulates a reboot the way a
stateless node does one: after a delay the node "PXE-boots" whatever its pxelinux entry and
the served symlink under the boot root point at *at that moment* (so a rollback of the links
is visible in what the node comes back with), gets a new BootTime and is resumed.

State directory (``--state DIR``)::

    DIR/boot_root                     path of the boot tree
    DIR/calls.jsonl                   one JSON line per call: {"argv": [...], "time": ...}
    DIR/nodes/<node>/slurm.json       {"State", "Reason", "BootTime", "behaviour", "mac", "image", "boot_delay"}
    DIR/nodes/<node>/etc/image-release

behaviour: ``ok``; ``fail`` (never comes back: DOWN+NOT_RESPONDING); ``wrong-image`` (comes
back, resumed, but still runs its old image); ``no-reboot`` (Slurm takes it back into service
without a new BootTime, as slurmctld does through ReturnToService=2 after "reboot timed out" when
the node never really rebooted).

The records follow what slurmctld 22.05 printed on the test cluster (test_cluster_rollout.py):
``NextState=RESUME`` after ``State=`` while a ``reboot ... nextstate=RESUME`` is pending, and
``Reason=<reason> : reboot issued`` once the reboot is issued.

Supported: ``show node [--oneliner|-o] NODE``, ``reboot [ASAP] [nextstate=X] [reason=...] NODES``,
``update NodeName=X State=DRAIN Reason=...`` (the NHC reboot-on-drain trigger).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime()) + f".{time.time_ns() % 10**9:09d}"


def _node_dir(state: str, node: str) -> str:
    return os.path.join(state, "nodes", node)


def _load(state: str, node: str) -> dict | None:
    try:
        with open(os.path.join(_node_dir(state, node), "slurm.json"), encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        return None


def _save(state: str, node: str, record: dict) -> None:
    path = os.path.join(_node_dir(state, node), "slurm.json")
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        json.dump(record, handle)
    os.replace(path + ".tmp", path)


def _expand(nodelist: str) -> list[str]:
    return [name for name in nodelist.split(",") if name]


def _start_boot(state: str, node: str) -> None:
    subprocess.Popen([sys.executable, __file__, "--state", state, "_boot", node], start_new_session=True,
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _pxe_image(state: str, record: dict) -> str:
    """The image the node's own pxelinux entry boots (fallback: default entry, then its record)."""
    with open(os.path.join(state, "boot_root"), encoding="utf-8") as handle:
        boot_root = handle.read().strip()
    mac = record.get("mac", "").lower().replace(":", "-")
    for name in (f"01-{mac}", "default"):
        try:
            with open(os.path.join(boot_root, "pxelinux.cfg", name), encoding="utf-8") as handle:
                match = re.search(r"^\s*KERNEL\s+([^/\s]+)/vmlinuz", handle.read(), re.M)
        except FileNotFoundError:
            continue
        if match:
            return os.path.join(boot_root, match.group(1))
    return os.path.join(boot_root, record["image"])


def boot(state: str, node: str) -> None:
    record = _load(state, node)
    time.sleep(float(record.get("boot_delay", 0.5)))
    record = _load(state, node)
    record.update(State="DOWN+DRAIN+REBOOT_ISSUED", Reason=record.get("Reason", "") + " : reboot issued")
    _save(state, node, record)
    time.sleep(0.2)
    behaviour = record.get("behaviour", "ok")
    if behaviour == "fail":
        record.update(State="DOWN+NOT_RESPONDING", Reason="Not responding [slurm@fake]", NextState="")
        _save(state, node, record)
        return
    if behaviour == "no-reboot":
        record.update(State="IDLE", Reason="", NextState="")
        _save(state, node, record)
        return
    if behaviour == "ok":
        served = _pxe_image(state, record)
        with open(os.path.join(served, "manifest.json"), encoding="utf-8") as handle:
            manifest = json.load(handle)
        release = os.path.join(_node_dir(state, node), "etc", "image-release")
        with open(release + ".tmp", "w", encoding="utf-8") as handle:
            handle.write(f"IMAGE={manifest['image']}\nVERSION={manifest['version']}\nLAYER={manifest.get('layer', '')}\n"
                         f"LAYER_KEY=\nBUILD_TIME={manifest.get('created', '')}\n")
        os.replace(release + ".tmp", release)
    record.update(State="IDLE", Reason="", BootTime=_now(), NextState="")
    _save(state, node, record)


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] != "--state":
        print("usage: fake_scontrol --state DIR ...", file=sys.stderr)
        return 2
    state, args = argv[1], argv[2:]
    if args[:1] == ["_boot"]:
        boot(state, args[1])
        return 0
    with open(os.path.join(state, "calls.jsonl"), "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"argv": args, "time": time.time()}) + "\n")

    if args[:2] == ["show", "node"]:
        names = [a for a in args[2:] if not a.startswith("-")]
        record = _load(state, names[0]) if names else None
        if record is None:
            print(f"Node {names[0] if names else ''} not found", file=sys.stderr)
            return 1
        next_state = f"NextState={record['NextState']} " if record.get("NextState") else ""
        print(f"NodeName={names[0]} Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 State={record['State']} "
              f"ThreadsPerCore=1 {next_state}BootTime={record['BootTime']} SlurmdStartTime={record['BootTime']} "
              f"Reason={record.get('Reason') or ''}".rstrip())
        return 0

    if args[:1] == ["reboot"]:
        options = {key.lower(): value for key, _sep, value in (a.partition("=") for a in args[1:] if "=" in a)}
        nodes = [a for a in args[1:] if "=" not in a and a.upper() != "ASAP"]
        if len(nodes) != 1:
            print("scontrol: error: one node list expected", file=sys.stderr)
            return 1
        for node in _expand(nodes[0]):
            record = _load(state, node)
            if record is None:
                print(f"scontrol: error: Invalid node name specified: {node}", file=sys.stderr)
                return 1
            record.update(State="IDLE+DRAIN+REBOOT_REQUESTED", Reason=options.get("reason", "reboot requested"),
                          NextState=options.get("nextstate", "").upper())
            _save(state, node, record)
            _start_boot(state, node)
        return 0

    if args[:1] == ["update"]:
        fields = {key.lower(): value for key, _sep, value in (a.partition("=") for a in args[1:])}
        node = fields.get("nodename", "")
        record = _load(state, node)
        if record is None:
            print(f"scontrol: error: Invalid node name specified: {node}", file=sys.stderr)
            return 1
        if fields.get("state", "").upper() == "DRAIN":
            # What the slurm role's reboot-on-drain check does on the node when it sees the reason.
            record.update(State="IDLE+DRAIN", Reason=fields.get("reason", ""))
            _save(state, node, record)
            _start_boot(state, node)
        return 0

    print(f"fake scontrol: unsupported call {args}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
