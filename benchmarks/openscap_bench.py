# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""OpenSCAP benchmark: the SCAP Security Guide's profiles on our default image beside a plain Debian image of the same
package set, both booted under systemd-nspawn and scanned as verify scans them, and the seconds the scan adds to verify.

  plain  the bootstrap image of the default chain's root layer plus ``apt-get install`` of every package the default
         image marks as manually installed, no roles (lynis_bench.py builds it once and keeps it by key).
  ours   the default image (``<prefix>/<leaf layer>:latest``, which ``site.yml`` builds).

Each image is booted once per profile (ANSSI-BP-028 average, the default of hpc_stateless_verify_openscap_profile, and
the standard profile) and scanned by playbooks/tasks/verify_openscap.yml exactly as verify.yml does: the build host's
oscap bound in, the collection's tailoring, waivers and platform dictionary. Goal: ours passes >= 80 % of the applicable
rules of both profiles (hpc_stateless_verify_openscap_min_pass) with every failed rule waived; the plain image's share is
reported beside it. The seconds are the scan's part of verify: prepare, the scan in the boot, the verdict and the kept
reports (the boot itself is verify's anyway).

Lynis in the same run, both ways a security team meets it: in verify (each image booted, the collection's profile and
waivers, judged by playbooks/tasks/verify_lynis.yml: ours >= 80 with every finding waived) and with Lynis's own default
profile on each image's tree (nspawn directory mode, nothing booted, nothing waived: the score a scan of the unpacked
image gives), each beside the plain image.

    python benchmarks/openscap_bench.py [--image REF] [--bootstrap REF] [--output FILE]
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import comparisons  # noqa: E402  pylint: disable=wrong-import-position
from booted_play import booted_play, munge_key, run_playbook  # noqa: E402  pylint: disable=wrong-import-position
from lynis_bench import MIN_SCORE, image_arguments, lynis_runs, manual_packages, plain_image  # noqa: E402  pylint: disable=wrong-import-position

MIN_PASS = 80
PROFILES = ("anssi_np_nt28_average", "standard")


def playbook(out: Path) -> str:
    """OpenSCAP on each booted image, as verify.yml runs it: the scan prepared, then verify_openscap.yml; the seconds
    from the boot's first answer to the kept reports."""
    now = "(lookup('ansible.builtin.pipe', 'date +%s.%N') | float)"
    return booted_play(
        "OpenSCAP on each booted image, judged as verify judges it",
        binds="(_openscap_scan.binds | default([]))",
        variables={"hpc_stateless_verify_openscap_content": None, "hpc_stateless_verify_openscap_tailoring": None,
                   "hpc_stateless_verify_openscap_waivers": [], "hpc_stateless_verify_openscap_min_pass": MIN_PASS,
                   "hpc_stateless_verify_openscap_timeout": 600, "hpc_stateless_verify_key": ""},
        block=[{"name": "Prepare the OpenSCAP scan, as verify.yml does",
                "hpc.stateless.openscap": {"profile": "{{ hpc_stateless_verify_openscap_profile }}"},
                "register": "_openscap_scan"},
               {"name": "Boot the image (the first task in the container)",
                "ansible.builtin.command": "systemctl is-system-running", "changed_when": False, "failed_when": False},
               {"name": "Time the scan from here",
                "ansible.builtin.set_fact": {"_started": "{{ lookup('ansible.builtin.pipe', 'date +%s.%N') }}"}},
               {"name": "The task file of verify.yml",
                "ansible.builtin.import_tasks": str(REPO / "playbooks/tasks/verify_openscap.yml")}],
        rescue_name="A share below the minimum is a result here, not an error",
        rescue_that="_openscap_verdict.score is defined",
        result="{'verdict': _openscap_verdict | default(none), 'run_seconds': _openscap_run.delta | default(none), "
               f"'seconds': {now} - (_started | default(0) | float)}}",
        cleanup={"name": "Remove the scan's directory", "when": "_openscap_scan.path is defined",
                 "hpc.stateless.openscap": {"state": "absent", "path": "{{ _openscap_scan.path }}"}},
        out=out)


def log(message: str) -> None:
    print(f"[openscap_bench] {message}", file=sys.stderr, flush=True)


def scans(images: dict[str, str], work: Path) -> dict[str, dict[str, Any]]:
    """One booted scan per image and profile (serially: the machine is small), judged by verify_openscap.yml."""
    hosts = {f"{side}-{profile}": {"ansible_nspawn_image": ref, "hpc_stateless_verify_openscap_profile": profile}
             for side, ref in images.items() for profile in PROFILES}
    run_playbook(work, "play", playbook(work), {"all": {"hosts": hosts, "vars": {"munge_key": str(munge_key(work))}}},
                 "openscap_bench")
    results = {}
    for host in hosts:
        data = json.loads((work / f"{host}.json").read_text(encoding="utf-8"))
        verdict = data["verdict"]
        if not verdict or "score" not in verdict:
            raise SystemExit(f"openscap_bench: no verdict for {host} (see the playbook's output)")
        results[host] = {"image": hosts[host]["ansible_nspawn_image"], "score": verdict["score"],
                         "passing": verdict["passing"], "applicable": verdict["applicable"],
                         "passed": verdict["passed"], "unwaived": verdict["unwaived"],
                         "failed": sorted(c["id"].split("/", 1)[1] for c in verdict["checks"]
                                          if c["id"] != "openscap/score" and c.get("detail", "").split(" ")[0].rstrip(":")
                                          in ("fail", "error", "unknown")),
                         "tailored_out": verdict["tailored_out"], "message": verdict["message"],
                         "seconds": round(data["seconds"], 2)}
        log(f"{host}: {results[host]['passing']}/{results[host]['applicable']} ({results[host]['score']} %), "
            f"{results[host]['seconds']} s")
    return results


LYNIS_TREE_PLAYBOOK = """\
- name: Lynis with its default profile on each image's tree (directory mode, not booted)
  hosts: all
  gather_facts: false
  serial: 1
  vars:
    ansible_connection: hpc.stateless.nspawn
    ansible_nspawn_boot: false
    ansible_python_interpreter: auto_silent
    ansible_nspawn_extra_args: "{{ true | hpc.stateless.lynis_nspawn_args }}"
  tasks:
    - name: Lynis, default profile
      ansible.builtin.command:
        argv: "{{ '/run/hpc-stateless-lynis-tree.dat' | hpc.stateless.lynis_argv('', '', true) }}"
        chdir: "{{ 'workdir' | hpc.stateless.lynis_boot_path }}"
      register: _report
      changed_when: false
    - name: Keep the index
      ansible.builtin.copy:
        content: "{{ _report.stdout | regex_search('hardening_index=([0-9]+)', '\\\\1') | first }}"
        dest: "%(out)s/{{ inventory_hostname }}.lynis"
        mode: "0644"
      delegate_to: localhost
      vars:
        ansible_connection: local
        ansible_python_interpreter: "{{ ansible_playbook_python }}"
    - name: Release the image
      ansible.builtin.meta: reset_connection
"""


def lynis_tree(images: dict[str, str], work: Path) -> dict[str, int]:
    """Lynis's hardening index with its default profile on each image's tree (nspawn directory mode, no boot): the
    score a scan of the tree gives, beside verify's booted one with the collection's profile."""
    run_playbook(work, "lynis", LYNIS_TREE_PLAYBOOK % {"out": work},
                 {"all": {"hosts": {name: {"ansible_nspawn_image": ref} for name, ref in images.items()}}}, "openscap_bench")
    return {name: int((work / f"{name}.lynis").read_text(encoding="utf-8")) for name in images}


def main() -> int:
    args = image_arguments(__doc__, "openscap.json").parse_args()

    packages = manual_packages(args.image)
    plain = plain_image(args.bootstrap, packages)
    images = {"plain": plain, "ours": args.image}
    with tempfile.TemporaryDirectory(prefix="openscap-bench.") as tmp:
        result = scans(images, Path(tmp))
        tree = lynis_tree(images, Path(tmp))
        log(f"Lynis, default profile, image tree: plain {tree['plain']}, ours {tree['ours']}")
        (Path(tmp) / "lynis-booted").mkdir()
        booted = lynis_runs(images, Path(tmp) / "lynis-booted")
        log(f"Lynis in verify (booted, the collection's profile): plain {booted['plain']['score']}, "
            f"ours {booted['ours']['score']}")
    rows = []
    for profile in PROFILES:
        plain_r, ours_r = result[f"plain-{profile}"], result[f"ours-{profile}"]
        rows.append(comparisons.comparison(
            f"OpenSCAP {profile}: applicable rules passing, tailored, booted (plain Debian of the same packages vs ours)",
            f"plain {plain_r['passing']}/{plain_r['applicable']}", plain_r["score"],
            f"ours {ours_r['passing']}/{ours_r['applicable']}", ours_r["score"], "reported side by side", None,
            unit="%", higher_is_better=True))
        rows.append(comparisons.comparison(
            f"OpenSCAP {profile}: the default image passes >= {MIN_PASS} % of the applicable rules", "minimum", MIN_PASS,
            "hpc.stateless default image", ours_r["score"], f">= {MIN_PASS} %, every failed rule waived", 1.0,
            kind=comparisons.BUDGET, unit="%", higher_is_better=True,
            also={"every failed rule waived": not ours_r["unwaived"]}))
    average = f"ours-{PROFILES[0]}"
    rows.append(comparisons.comparison(
        "seconds the OpenSCAP scan adds to verify (default profile: scan in the boot, verdict, kept reports)",
        "plain image", result[f"plain-{PROFILES[0]}"]["seconds"], "default image", result[average]["seconds"],
        "reported", None))
    rows.append(comparisons.comparison(
        "Lynis hardening index, its default profile on the image tree (nspawn directory mode, not booted; plain Debian "
        "of the same packages vs ours)", "plain Debian, same packages, no roles", tree["plain"],
        "hpc.stateless default image", tree["ours"], "reported side by side", None, unit="", higher_is_better=True))
    rows.append(comparisons.comparison(
        f"Lynis hardening index in verify (booted, the collection's profile and waivers): the default image >= "
        f"{MIN_SCORE}", "minimum", MIN_SCORE, f"hpc.stateless default image (plain {booted['plain']['score']})",
        booted["ours"]["score"], f">= {MIN_SCORE}, every finding waived", 1.0, kind=comparisons.BUDGET, unit="",
        higher_is_better=True, also={"every finding waived": not booted["ours"]["unwaived"]}))
    lynis = {"tree_default_profile": tree,
             "booted": {name: {key: run[key] for key in ("score", "passed", "unwaived", "lynis_seconds")}
                        for name, run in booted.items()}}
    output = {"benchmark": "openscap", "packages": packages, "min_pass": MIN_PASS, "results": result,
              "lynis": lynis, "comparisons": rows}
    return comparisons.write_results(output, Path(args.output))


if __name__ == "__main__":
    sys.exit(main())
