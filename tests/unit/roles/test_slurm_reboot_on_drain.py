# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Decision logic of roles/slurm/files/slurm-reboot-on-drain (the NHC reboot-on-drain check).

The script runs for real; only ``scontrol`` is a test double (a Slurm controller cannot run in
a unit test): it prints the ``scontrol -o show node`` line a test gives it, the way Slurm 22.05
prints it, and records every other call. Hooks and the reboot command are shell commands that
append to the same record, so the tests see what ran and in which order.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "roles" / "slurm" / "files" / "slurm-reboot-on-drain"

FAKE_SCONTROL = r"""#!/bin/bash
# TEST DOUBLE of scontrol: canned "show node" output, every other call recorded.
if [[ $1 == -o && $2 == show && $3 == node ]]; then
    [[ -f "$FAKE_DIR/show.rc" ]] && { cat "$FAKE_DIR/show.out"; exit "$(cat "$FAKE_DIR/show.rc")"; }
    [[ $4 == "$(cat "$FAKE_DIR/node")" ]] || { echo "Node $4 not found" >&2; exit 1; }
    cat "$FAKE_DIR/show.out"
    exit 0
fi
printf 'scontrol' >>"$FAKE_DIR/calls"
printf ' [%s]' "$@" >>"$FAKE_DIR/calls"
printf '\n' >>"$FAKE_DIR/calls"
"""


def node_line(node: str = "node01", state: str = "IDLE", reason: str | None = None,
              reason_time: str = "2026-03-01T10:05:00", boot_time: str = "2026-03-01T09:00:00") -> str:
    """A ``scontrol -o show node`` line as Slurm 22.05 prints it (OS= holds spaces and '#')."""
    line = (f"NodeName={node} Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUEfctv=1 CPUTot=1 CPULoad=0.01 "
            f"AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr={node} NodeHostName={node} "
            f"Version=22.05.8 OS=Linux 6.1.0-31-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.128-1 (2025-02-07) "
            f"RealMemory=256 AllocMem=0 FreeMem=1000 Sockets=1 Boards=1 State={state} ThreadsPerCore=1 "
            f"TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=debug BootTime={boot_time} "
            f"SlurmdStartTime={boot_time} LastBusyTime=2026-03-01T09:30:00 CfgTRES=cpu=1,mem=256M,billing=1 "
            f"AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 "
            f"ExtSensorsTemp=n/s")
    if reason is not None:
        line += f" Reason={reason} [root@{reason_time}]"
    return line + "\n"


class Harness:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.fake = root / "scontrol"
        self.fake.write_text(FAKE_SCONTROL)
        self.fake.chmod(0o755)
        (root / "node").write_text("node01")
        self.calls_file = root / "calls"
        self.config = root / "reboot-on-drain.conf"

    def configure(self, pre: tuple[str, ...] = (), post: tuple[str, ...] = (), **settings: str) -> None:
        values = {"SCONTROL": str(self.fake), "NODE_NAME": "node01",
                  "REBOOT_COMMAND": f"echo reboot >> {self.calls_file}"}
        values.update(settings)
        lines = [f"{key}={value}" for key, value in values.items()]
        lines += [f"PRE_COMMAND={command}" for command in pre]
        lines += [f"POST_COMMAND={command}" for command in post]
        self.config.write_text("# test\n" + "\n".join(lines) + "\n")

    def show(self, line: str, rc: int | None = None) -> None:
        (self.root / "show.out").write_text(line)
        if rc is not None:
            (self.root / "show.rc").write_text(str(rc))

    def run(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        environ = {key: value for key, value in os.environ.items() if key != "SLURMD_NODENAME"}
        environ.update({"FAKE_DIR": str(self.root), **(env or {})})
        return subprocess.run([str(SCRIPT), "-c", str(self.config), *args], capture_output=True, text=True,
                              env=environ, check=False)

    @property
    def calls(self) -> list[str]:
        return self.calls_file.read_text().splitlines() if self.calls_file.exists() else []


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    h = Harness(tmp_path)
    h.configure()
    return h


REBOOT_ASAP = "scontrol [reboot] [ASAP] [nextstate=RESUME] [reason=rebooting] [node01]"
RESUME = "scontrol [update] [NodeName=node01] [State=RESUME]"


@pytest.mark.parametrize("state", ["IDLE", "ALLOCATED", "MIXED", "IDLE+CLOUD"])
def test_node_in_service_is_left_alone(harness, state):
    harness.show(node_line(state=state))
    result = harness.run()
    assert result.returncode == 0, result.stderr
    assert harness.calls == []


@pytest.mark.parametrize("state", ["IDLE+DRAIN", "MIXED+DRAIN", "ALLOCATED+DRAIN", "DOWN+DRAIN"])
@pytest.mark.parametrize("reason", ["reboot", "Reboot", "reboot: new image 2026-03", "reboot for BIOS update"])
def test_drained_for_reboot_asks_slurm_to_reboot_when_idle(harness, state, reason):
    harness.show(node_line(state=state, reason=reason))
    result = harness.run()
    assert result.returncode == 0, result.stderr
    assert harness.calls == [REBOOT_ASAP]
    assert "asking Slurm to reboot it when idle" in result.stdout


def test_nextstate_and_reasons_come_from_the_configuration(harness):
    harness.configure(NEXTSTATE="DOWN", TRIGGER_REASON="maint-reboot", REBOOTING_REASON="maint-rebooting")
    harness.show(node_line(state="IDLE+DRAIN", reason="reboot"))
    assert harness.run().returncode == 0
    assert harness.calls == [], "'reboot' is not the configured trigger"
    harness.show(node_line(state="IDLE+DRAIN", reason="maint-reboot"))
    assert harness.run().returncode == 0
    assert harness.calls == ["scontrol [reboot] [ASAP] [nextstate=DOWN] [reason=maint-rebooting] [node01]"]


@pytest.mark.parametrize("flag", ["REBOOT_REQUESTED", "REBOOT_ISSUED"])
def test_reboot_already_requested_is_not_requested_again(harness, flag):
    harness.show(node_line(state=f"IDLE+DRAIN+{flag}", reason="reboot"))
    result = harness.run()
    assert result.returncode == 0
    assert harness.calls == []
    assert "reboot already requested" in result.stdout


@pytest.mark.parametrize("reason", ["NHC: check_fs_mount_rw: / not mounted", "rebooted by hand", "maintenance"])
def test_other_drain_reasons_are_not_touched(harness, reason):
    harness.show(node_line(state="IDLE+DRAIN", reason=reason))
    assert harness.run().returncode == 0
    assert harness.calls == []


def test_local_mode_waits_for_jobs(harness):
    harness.configure(MODE="local")
    harness.show(node_line(state="MIXED+DRAIN", reason="reboot"))
    result = harness.run()
    assert result.returncode == 0
    assert harness.calls == []
    assert "waiting for its jobs to end (State=MIXED+DRAIN)" in result.stdout


def test_local_mode_runs_hooks_marks_and_reboots_an_idle_node(harness):
    log = harness.calls_file
    harness.configure(MODE="local", pre=(f"echo pre-1 >> {log}", f"echo pre-2 >> {log}"))
    harness.show(node_line(state="IDLE+DRAIN", reason="reboot"))
    result = harness.run()
    assert result.returncode == 0, result.stderr
    assert harness.calls == ["pre-1", "pre-2",
                             "scontrol [update] [NodeName=node01] [State=DRAIN] [Reason=rebooting]",
                             "reboot"]


def test_local_mode_does_not_reboot_when_a_pre_command_fails(harness):
    log = harness.calls_file
    harness.configure(MODE="local", pre=("false", f"echo never >> {log}"))
    harness.show(node_line(state="IDLE+DRAIN", reason="reboot"))
    result = harness.run()
    assert result.returncode == 1
    assert "pre-reboot command failed: false" in result.stderr
    assert harness.calls == [
        "scontrol [update] [NodeName=node01] [State=DRAIN] [Reason=reboot: pre-reboot command failed]"]


@pytest.mark.parametrize("state", ["IDLE+DRAIN", "DOWN+DRAIN", "DOWN", "IDLE+DRAIN+NOT_RESPONDING"])
def test_back_from_reboot_runs_post_commands_and_resumes(harness, state):
    log = harness.calls_file
    harness.configure(post=(f"echo post >> {log}",))
    harness.show(node_line(state=state, reason="rebooting",
                           reason_time="2026-03-01T10:05:00", boot_time="2026-03-01T10:09:12"))
    result = harness.run()
    assert result.returncode == 0, result.stderr
    assert harness.calls == ["post", RESUME]
    assert "back from its reboot (booted 2026-03-01T10:09:12); resuming" in result.stdout


def test_not_yet_rebooted_waits(harness):
    harness.show(node_line(state="IDLE+DRAIN", reason="rebooting",
                           reason_time="2026-03-01T10:05:00", boot_time="2026-02-27T08:00:00"))
    result = harness.run()
    assert result.returncode == 0
    assert harness.calls == []
    assert "waiting for the reboot" in result.stdout


def test_rebooting_with_a_reboot_pending_is_left_to_slurm(harness):
    harness.show(node_line(state="DOWN+DRAIN+REBOOT_ISSUED", reason="rebooting",
                           reason_time="2026-03-01T10:05:00", boot_time="2026-03-01T10:09:12"))
    assert harness.run().returncode == 0
    assert harness.calls == []


def test_failed_post_command_keeps_the_node_out_of_service(harness):
    harness.configure(post=("exit 3",))
    harness.show(node_line(state="IDLE+DRAIN", reason="rebooting", boot_time="2026-03-01T11:00:00"))
    result = harness.run()
    assert result.returncode == 1
    assert "stays out of service" in result.stderr
    assert harness.calls == []


def test_unknown_node_or_unreachable_controller_is_not_an_error(harness):
    harness.show("slurm_load_node error: Unable to contact slurm controller (connect failure)\n", rc=1)
    result = harness.run()
    assert result.returncode == 0
    assert "controller is unreachable" in result.stdout
    assert harness.calls == []


def test_node_name_defaults_to_slurmd_nodename(harness):
    harness.configure(NODE_NAME="")
    (harness.root / "node").write_text("cn042")
    harness.show(node_line(node="cn042", state="IDLE+DRAIN", reason="reboot"))
    result = harness.run(env={"SLURMD_NODENAME": "cn042"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert harness.calls == ["scontrol [reboot] [ASAP] [nextstate=RESUME] [reason=rebooting] [cn042]"]


def test_dry_run_only_prints(harness):
    harness.show(node_line(state="IDLE+DRAIN", reason="reboot"))
    result = harness.run("-n")
    assert result.returncode == 0
    assert f"dry run: would run: {harness.fake} reboot ASAP nextstate=RESUME reason=rebooting node01" in result.stdout
    assert harness.calls == []


def test_reboot_program_mode_runs_pre_commands_then_reboots(harness):
    log = harness.calls_file
    harness.configure(pre=(f"echo pre >> {log}", "false"))
    result = harness.run("-r")
    assert result.returncode == 0
    assert harness.calls == ["pre", "reboot"], "Slurm asked for the reboot: a failed hook must not stop it"


@pytest.mark.parametrize(("line", "message"), [
    ("MODE=remote", "MODE must be scontrol or local, got 'remote'"),
    ("NEXTSTATE=IDLE", "NEXTSTATE must be RESUME or DOWN, got 'IDLE'"),
    ("REBOOTING_REASON=Reboot", "TRIGGER_REASON and REBOOTING_REASON must be set and differ"),
    ("REBOOT_CMD=reboot", "line 2: unknown key REBOOT_CMD"),
    ("just words", "line 2: expected KEY=value, got: just words"),
])
def test_bad_configuration_is_refused(harness, line, message):
    harness.config.write_text(f"# test\n{line}\n")
    result = harness.run()
    assert result.returncode == 2
    assert message in result.stderr
    assert str(harness.config) in result.stderr
