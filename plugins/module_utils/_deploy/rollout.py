# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The rules of the rolling update (playbooks/rolling_update.yml), which reaches them through the
``hpc.stateless.roll_*`` and ``hpc.stateless.slurm_*`` filters (plugins/filter/rollout.py).

* which version each image serves (its ``manifest.json`` under the boot root);
* which image a node boots, what its ``/etc/image-release`` says it runs, and whether it needs a
  reboot (and why, in words an admin reads in ``--check``);
* the batches: the canary first, then ``batch_size`` at a time;
* how Slurm is asked (``scontrol reboot ASAP nextstate=RESUME`` or the NHC drain) and when a node
  counts as rebooted from ``scontrol show node --oneliner``: back in service (no DRAIN/DOWN/REBOOT...
  flag) with a ``BootTime`` after the request, read on the Slurm host's clock (Slurm's own rule), or
  given up by Slurm (``reboot timed out`` after ``ResumeTimeout``);
* how a failed node and a failed canary (with the rollback of the boot links) are reported.

Pure functions over what the playbook read (slurp and command results, ``hostvars``): no I/O.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ansible_collections.hpc.stateless.plugins.module_utils._contract.manifest import parse_manifest
from ansible_collections.hpc.stateless.plugins.module_utils._contract.names import ArtifactError
from ansible_collections.hpc.stateless.plugins.module_utils._contract.release import parse_image_release
from ansible_collections.hpc.stateless.plugins.module_utils._deploy.bootconfig import default_boot_image

#: The ways to ask Slurm for a reboot (hpc_stateless_roll_method).
METHODS = ("scontrol", "nhc")
#: A node whose Slurm state holds one of these words is not in service (``IDLE+DRAIN``, ``DOWN+REBOOT_ISSUED``...).
OUT_OF_SERVICE = ("DRAIN", "DOWN", "REBOOT", "NOT_RESPONDING", "FAIL", "MAINT", "UNKNOWN", "FUTURE")
#: What Slurm writes into a node's Reason when it gave up on a reboot (after ResumeTimeout).
GAVE_UP = "reboot timed out"
#: The Slurm reason of the reboot request unless hpc_stateless_roll_reboot_reason says otherwise.
DEFAULT_REBOOT_REASON = "hpc.stateless rolling update to {image} {version}"

# Fields of `scontrol show node --oneliner`: each key is a whole word (State is not NextState).
_SLURM_FIELD = re.compile(r"(?:^| )([A-Za-z]+)=([^ ]*)")
# A BootTime Slurm knows (not "None" or "Unknown").
_SLURM_TIME = re.compile(r"[0-9]{4}-")
# How long a message quoted from elsewhere (an unreachable node's error) may get.
_QUOTE_LENGTH = 120


class RolloutError(ValueError):
    """A setting or an input the roll cannot use; the message names the variable or the file."""


def _shorten(text: object, length: int = _QUOTE_LENGTH) -> str:
    """``text`` stripped and cut at a word to at most ``length`` characters (``...`` marks the cut)."""
    text = str(text if text is not None else "").strip()
    if len(text) <= length:
        return text
    cut = text[:length - 3]
    return (cut.rsplit(" ", 1)[0] if " " in cut else cut) + "..."


def _slurped_text(result: Mapping[str, Any]) -> str | None:
    """The text of a file ``ansible.builtin.slurp`` read, or None when it read nothing."""
    content = result.get("content")
    if not isinstance(content, str):
        return None
    try:
        return base64.b64decode(content, validate=True).decode("utf-8", "replace")
    except (binascii.Error, ValueError):
        return None


# --------------------------------------------------------------------------- what is served


def served_versions(manifests: Iterable[Mapping[str, Any]], boot_root: str) -> dict[str, str]:
    """``{image: version}`` from the slurp results of ``<boot_root>/<image>/manifest.json`` (``item`` the image).

    An image whose manifest could not be read (not served) is left out; a served manifest that is no pack
    manifest raises :class:`RolloutError` naming the file.
    """
    served: dict[str, str] = {}
    for result in manifests:
        text = _slurped_text(result)
        if text is None:
            continue
        image = str(result.get("item"))
        where = f"{boot_root}/{image}/manifest.json"
        try:
            served[image] = parse_manifest(text.encode("utf-8"), where)["version"]
        except ArtifactError as exc:
            raise RolloutError(str(exc)) from None
    return served


# --------------------------------------------------------------------------- one node before the roll


@dataclasses.dataclass(frozen=True)
class NodeState:
    """What a node runs against what its image serves; ``reason`` is empty when it needs no reboot."""

    image: str
    target: str
    release: dict[str, str]
    unreachable: bool
    reason: str

    @property
    def pending(self) -> bool:
        """The roll reboots it: it runs something else, answers, and its image is served."""
        return bool(self.reason) and not self.unreachable and bool(self.target)

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "pending": self.pending}


def release_difference(release: Mapping[str, str], image: str, version: str) -> str:
    """How ``release`` (an ``/etc/image-release``) differs from ``image`` ``version``; empty when it is that one."""
    running_image, running_version = release.get("IMAGE", ""), release.get("VERSION", "")
    if running_image != image:
        return f"runs image {running_image or '?'} {running_version or '?'}, its entry boots {image} {version}"
    if running_version != version:
        return f"runs {image} {running_version or '?'}, served is {version}"
    return ""


def node_state(release_file_result: Mapping[str, Any], *, image: str, served: Mapping[str, str], boot_root: str,
               release_file: str) -> NodeState:
    """Whether a node needs a reboot into the version its image serves, and why.

    ``release_file_result`` is the slurp of its ``release_file`` (``ignore_unreachable``); ``image`` the image
    it boots (:func:`node_image`); ``served`` is :func:`served_versions`.
    """
    target = served.get(image, "")
    unreachable = bool(release_file_result.get("unreachable"))
    text = None if unreachable else _slurped_text(release_file_result)
    release = parse_image_release(text) if text is not None else {}
    if unreachable:
        reason = (f"unreachable ({_shorten(release_file_result.get('msg'))}); it boots {image} {target or '?'} "
                  "when it next PXE-boots")
    elif image not in served:
        reason = f"its image {image} is not served under {boot_root}"
    elif text is None:
        reason = f"no readable {release_file} ({_shorten(release_file_result.get('msg') or 'unknown error')})"
    else:
        reason = release_difference(release, image, target)
    return NodeState(image=image, target=target, release=release, unreachable=unreachable, reason=reason)


def node_image(boot_image: str | None, default_image: str | None, images: Iterable[str]) -> str:
    """The image a node boots: its own ``hpc_stateless_boot_image``, else the boot tree's default image."""
    return boot_image or default_boot_image(default_image, images)


# --------------------------------------------------------------------------- the batches


def _positive(value: object, variable: str, percent: bool = False) -> int | str:
    text = str(value).strip()
    if percent and re.fullmatch(r"[0-9]+%", text) and int(text[:-1]) > 0:
        return text
    if isinstance(value, bool) or not re.fullmatch(r"[0-9]+", text) or int(text) < 1:
        allowed = "a node count (1 or more)" + (' or a share such as "20%"' if percent else "")
        raise RolloutError(f"{variable}: {value!r} is not {allowed}")
    return int(text)


def _percentage(value: object, variable: str) -> int:
    text = str(value).strip()
    if isinstance(value, bool) or not re.fullmatch(r"[0-9]+", text) or int(text) > 100:
        raise RolloutError(f"{variable}: {value!r} is not a percentage (0 to 100)")
    return int(text)


def roll_plan(nodes: Sequence[str], states: Mapping[str, Mapping[str, Any]], *, canary_size: object,
              batch_size: object, max_fail_percentage: object) -> dict[str, Any]:
    """The batches of the roll, and the report of which nodes need a reboot and why.

    ``states`` maps each node of ``nodes`` that was looked at to its :meth:`NodeState.as_dict`. The pending
    nodes are rebooted by name: the first ``canary_size`` of them alone, then ``batch_size`` at a time
    (``serial`` of the play); ``max_fail_percentage`` of a batch may fail.
    """
    canary_count = _positive(canary_size, "hpc_stateless_roll_canary_size")
    batch = _positive(batch_size, "hpc_stateless_roll_batch_size", percent=True)
    max_fail = _percentage(max_fail_percentage, "hpc_stateless_roll_max_fail_percentage")
    pending = sorted(node for node in nodes if (states.get(node) or {}).get("pending"))
    canary = pending[:int(canary_count)]
    lines = [f"{len(pending)} of {len(nodes)} nodes need a reboot"
             + (": every reachable node runs the served version" if not pending else "")]
    for node in nodes:
        reason = (states.get(node) or {}).get("reason") or ""
        if reason:
            lines.append(f"{node}: {reason}{' (canary)' if node in canary else ''}")
    return {"pending": pending, "canary": canary, "serial": [canary_count, batch], "max_fail_percentage": max_fail,
            "summary": "; ".join(lines)}


# --------------------------------------------------------------------------- Slurm


def reboot_argv(node: str, *, method: str, scontrol: str, image: str, version: str, reason: str = "",
                nhc_reason: str = "reboot") -> list[str]:
    """The ``scontrol`` command that asks Slurm to reboot ``node`` (its Slurm node name).

    ``scontrol``: ``reboot ASAP nextstate=RESUME reason=<reason>`` (Slurm drains the node, reboots it when it
    is idle and resumes it); ``nhc``: a drain with ``nhc_reason``, which the slurm role's reboot-on-drain
    check acts on. An empty ``reason`` is :data:`DEFAULT_REBOOT_REASON`.
    """
    if method == "scontrol":
        why = reason or DEFAULT_REBOOT_REASON.format(image=image, version=version)
        return [scontrol, "reboot", "ASAP", "nextstate=RESUME", f"reason={why}", node]
    if method == "nhc":
        return [scontrol, "update", f"NodeName={node}", "State=DRAIN", f"Reason={nhc_reason}"]
    raise RolloutError(f"hpc_stateless_roll_method: {method!r} is not one of {', '.join(METHODS)}")


def slurm_node_fields(text: str) -> dict[str, str]:
    """The fields of ``scontrol show node --oneliner NODE``; ``Reason`` runs to the end of the line.

    A key is a whole word (``State`` is not ``NextState``); ``Reason`` may hold spaces and ``=``; a missing
    ``Reason`` is empty.
    """
    fields = dict(_SLURM_FIELD.findall(text or ""))
    _head, found, reason = (text or "").partition(" Reason=")
    fields["Reason"] = reason.strip() if found else ""
    return fields


def in_service(state: str) -> bool:
    """Slurm runs jobs on a node in ``state`` (``IDLE``, ``MIXED``...): no :data:`OUT_OF_SERVICE` word in it."""
    return bool(state) and not any(word in state for word in OUT_OF_SERVICE)


def gave_up(reason: str) -> bool:
    """Slurm gave up on the node's reboot (ResumeTimeout passed without the node registering)."""
    return GAVE_UP in reason.lower()


def rebooted(boot_time: str, boot_time_before: str, requested_at: str) -> bool:
    """The node booted since the reboot request: a known ``BootTime`` other than the one before, not before
    ``requested_at`` (both times as Slurm and ``date +%Y-%m-%dT%H:%M:%S`` print them on the Slurm host)."""
    return bool(_SLURM_TIME.match(boot_time)) and boot_time != boot_time_before and boot_time >= requested_at


@dataclasses.dataclass(frozen=True)
class RebootCheck:
    """One look at a node's Slurm record after the reboot request."""

    state: str
    boot_time: str
    reason: str
    in_service: bool
    gave_up: bool
    rebooted: bool
    msg: str

    @property
    def done(self) -> bool:
        """Waiting is over: Slurm has the node in service again, or gave up on its reboot."""
        return self.in_service or self.gave_up

    @property
    def ok(self) -> bool:
        """The node rebooted and Slurm took it back."""
        return self.in_service and self.rebooted

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "done": self.done, "ok": self.ok}


def reboot_check(show_node: str, *, boot_time_before: str = "", requested_at: str = "", timeout: object = "?") -> RebootCheck:
    """Judge ``scontrol show node --oneliner`` output after a reboot request; ``msg`` says why it failed.

    ``boot_time_before`` is the node's BootTime before the request, ``requested_at`` the Slurm host's clock at
    the request, ``timeout`` the seconds waited (for the message).
    """
    fields = slurm_node_fields(show_node)
    state, boot_time, reason = fields.get("State", ""), fields.get("BootTime", ""), fields["Reason"]
    check = {"in_service": in_service(state), "gave_up": gave_up(reason),
             "rebooted": rebooted(boot_time, boot_time_before, requested_at)}
    shown_state, shown_boot = state or "?", boot_time or "?"
    if check["in_service"] and check["rebooted"]:
        msg = ""
    elif check["gave_up"]:
        msg = (f"Slurm gave up on its reboot after ResumeTimeout: State={shown_state} Reason={reason} "
               f"(BootTime={shown_boot}, reboot asked at {requested_at}): the node did not boot within ResumeTimeout "
               "or its slurmd never registered")
    elif check["in_service"]:
        msg = (f"back in service without a new boot: Slurm says State={shown_state} BootTime={shown_boot}, not after "
               f"the reboot request at {requested_at}: the node did not reboot, or its slurmd reports an old boot time "
               "(in a container it reports the host's: start slurmd with -b)")
    else:
        msg = (f"not back in service after {timeout} s: Slurm says State={shown_state} BootTime={shown_boot} "
               f"(before {boot_time_before or '?'}) Reason={reason or '-'}")
    return RebootCheck(state=state, boot_time=boot_time, reason=reason, msg=msg, **check)


# --------------------------------------------------------------------------- after the reboot, and failures


def release_check(release_file_result: Mapping[str, Any], *, image: str, version: str) -> dict[str, Any]:
    """Whether the node came back running ``image`` ``version`` (the slurp of its release file after the reboot)."""
    text = _slurped_text(release_file_result)
    release = parse_image_release(text) if text is not None else {}
    ok = release.get("IMAGE", "") == image and release.get("VERSION", "") == version
    msg = "" if ok else (f"came back running {release.get('IMAGE') or '?'} {release.get('VERSION') or '?'}, not {image} "
                         f"{version}: check its PXE entry (pxelinux.cfg/01-<mac>) and DHCP")
    return {"release": release, "ok": ok, "msg": msg}


def _probe_text(probe: Mapping[str, Any]) -> str:
    """What the look at a node that Slurm did not take back found, as ``; ...`` to append (may be empty)."""
    if probe.get("skipped"):
        return ""
    if probe.get("unreachable"):
        return f"; the node does not answer ({_shorten(probe.get('msg') or 'unreachable')})"
    found = dict(line.split("=", 1) for line in probe.get("stdout_lines") or [] if re.match(r"[a-z]+=", line))
    if "release" not in found:
        return ""
    text = f"; on the node: runs {found['release']}, slurmd {found.get('slurmd') or 'not found'}"
    if found.get("error"):
        text += f", slurmd's last error: {_shorten(found['error'], 200)}"
    return text


def node_failure(task: str, result: Mapping[str, Any], probe: Mapping[str, Any] | None = None,
                 slurm_task: str = "Slurm rebooted") -> str:
    """Why a node failed its reboot: the failed ``task``'s message, with what the ``probe`` of the node found
    when the failed task is the Slurm check (its name holds ``slurm_task``)."""
    message = str(result.get("msg") or "").strip()
    if slurm_task in task:
        return message + _probe_text(probe or {"skipped": True})
    return f"{task}: {message or str(result.get('stderr') or 'failed').strip()}"


def _rollback_text(results: Iterable[Mapping[str, Any]], servers: Sequence[str] = ()) -> str:
    ran = [result for result in results if not result.get("skipped")]
    if not ran:
        return "boot links left as they are (hpc_stateless_roll_rollback is false)"
    parts = []
    for result in ran:
        image = result.get("item") or result.get("rollback_image") or result.get("image")
        if result.get("current") is None:
            parts.append(f"{image} ROLLBACK FAILED ({result.get('msg') or 'no result'})")
        else:
            parts.append(f"{image} {result.get('old_current')} -> {result.get('current')}")
    # Every boot server rolls back as one: the same change on each is said once.
    where = f" on {', '.join(servers)}" if len(servers) > 1 else ""
    return f"boot links rolled back{where}: " + ", ".join(dict.fromkeys(parts))


def canary_report(batch: Sequence[str], failures: Mapping[str, str], rollback_results: Iterable[Mapping[str, Any]] | None,
                  servers: Sequence[str] = ()) -> str:
    """The message that stops the roll after a failed canary; empty when no node of ``batch`` failed.

    ``failures`` maps a failed node to :func:`node_failure`; ``rollback_results`` are the ``bootlink
    state=rollback`` results of every boot server (skipped or none when the links were left alone), ``servers``
    the boot servers they ran on.
    """
    failed = [f"{node}: {failures[node]}" for node in batch if node in failures]
    if not failed:
        return ""
    return (f"canary failed - {'; '.join(failed)}; {_rollback_text(rollback_results or [], servers)}; roll stopped, "
            "no further node rebooted")
