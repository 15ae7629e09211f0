# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Compliance benchmark: one 100-check testinfra suite against one image, two ways.

  baseline  testinfra's ansible backend over containers.podman.buildah: every command of every
            check is one ``ansible -m shell`` run, i.e. a controller start, a ``buildah run`` and
            a Python start inside the container (what ``molecule verify`` does by default).
  fast path testinfra's chroot backend on the working container's mount point (what our
            Molecule scenarios use, molecule/conftest.py): every command is ``chroot <root> sh -c``.

Both sides run the same checks, in one invocation, against the same working container, and must
reach the same verdict on every check (the benchmark fails otherwise). Goal: the
100-check suite in <= 30 s on the fast path.

The booted image (issue 28: verify.yml runs the compliance suite in the image booted under systemd-nspawn),
one boot of the same image (``--booted-runs N``, 0 leaves it out):

  nsenter   the 100 checks through molecule/_shared/compliance.py's nsenter backend: every command is
            ``nsenter --target <leader> ... sh -c`` from the build host (what verify uses);
  local     the same 100 checks by testinfra's own local backend started INSIDE the container (one
            ``python3`` entered with nsenter, pytest-testinfra of the build host bound read-only into the boot);
  suite     the real compliance suite as verify runs it: one pytest process (module_utils/_verify/suite.py's
            command and environment), every test of molecule/_shared and of the image's roles; goal <= 20 s.

``--verify-runs N`` (0 leaves it out) times ``playbooks/verify.yml`` on the default inventory's image with
the suite (hpc_stateless_verify_suite=true) and without it, forced to boot, N times each, Lynis left out of
both (records go to a temporary directory): what the suite adds to verify, and so to every integration test
that runs site.yml.

    python benchmarks/compliance_bench.py [--image REF] [--fast-runs N] [--ansible-runs N]
                                          [--ansible-checks N] [--output FILE]

``--image`` defaults to the default inventory's ``compute`` image (its layer's ``:latest``), which
``ansible-playbook site.yml`` builds. ``--ansible-checks N`` times only the first N checks on the
baseline and scales to 100 (the report marks the figure as extrapolated); the default runs all 100.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "molecule" / "_shared"))

import compliance  # noqa: E402  pylint: disable=wrong-import-position
import comparisons  # noqa: E402  pylint: disable=wrong-import-position

GOAL_SECONDS = 30.0
SUITE_SIZE = 100


def log(message: str) -> None:
    print(f"[compliance_bench] {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Check:
    """One compliance check: a testinfra assertion about the image."""

    name: str
    probe: Callable[[Any], bool]


def _package(name: str) -> Check:
    return Check(f"package {name} installed", lambda h: h.package(name).is_installed)


def _file(path: str, user: str, group: str, mode: int) -> Check:
    def probe(h: Any) -> bool:
        f = h.file(path)
        return f.exists and (f.user, f.group, f.mode) == (user, group, mode)
    return Check(f"file {path} {user}:{group} {mode:o}", probe)


def _contains(path: str, text: str) -> Check:
    return Check(f"{path} contains {text!r}", lambda h: text in h.file(path).content_string)


def _unit(name: str, state: str) -> Check:
    return Check(f"unit {name} {state}",
                 lambda h: h.run(f"systemctl is-enabled {name}").stdout.strip() == state)


def _user(name: str) -> Check:
    return Check(f"user {name} exists", lambda h: h.user(name).exists)


def _group(name: str) -> Check:
    return Check(f"group {name} exists", lambda h: h.group(name).exists)


def _command(cmd: str) -> Check:
    return Check(f"command {cmd!r} succeeds", lambda h: h.run(cmd).rc == 0)


def _absent(path: str) -> Check:
    return Check(f"{path} absent", lambda h: not h.file(path).exists)


def _sshd(keyword: str, value: str) -> Check:
    return Check(f"sshd -T {keyword} {value}", lambda h: compliance.sshd_effective(h).get(keyword) == value)


def _no_world_writable() -> Check:
    cmd = compliance.find_command(("/etc", "/usr", "/boot"), r"-perm -0002 ! -type l ! \( -type d -perm -1000 \)")
    return Check("no world-writable files in /etc /usr /boot", lambda h: not h.check_output(cmd))


def _no_empty_passwords() -> Check:
    return Check("no account without a password",
                 lambda h: not compliance.parse_shadow_empty_passwords(h.file("/etc/shadow").content_string))


def suite() -> list[Check]:
    """100 checks that hold for every image at or above the default DAG's hsn layer."""
    checks = [_package(name) for name in (
        "base-files", "bash", "coreutils", "dpkg", "apt", "systemd", "systemd-sysv", "dbus", "python3",
        "python3-apt", "iproute2", "ca-certificates", "tzdata", "chrony", "openssh-server", "locales",
        "linux-image-amd64", "rdma-core", "ibverbs-providers", "ibverbs-utils", "rdmacm-utils",
        "infiniband-diags", "libucx0", "ucx-utils", "util-linux")]
    checks += [_file(*spec) for spec in (
        ("/etc/passwd", "root", "root", 0o644), ("/etc/group", "root", "root", 0o644),
        ("/etc/shadow", "root", "shadow", 0o640), ("/etc/gshadow", "root", "shadow", 0o640),
        ("/etc/fstab", "root", "root", 0o644), ("/etc/ssh/sshd_config", "root", "root", 0o644),
        ("/etc/ssh/sshd_config.d/10-hpc-stateless.conf", "root", "root", 0o600),
        ("/etc/chrony/chrony.conf", "root", "root", 0o644),
        ("/etc/sysctl.d/90-hpc-stateless.conf", "root", "root", 0o644),
        ("/etc/security/limits.d/90-hpc-stateless.conf", "root", "root", 0o644),
        ("/etc/systemd/journald.conf.d/10-hpc-stateless.conf", "root", "root", 0o644),
        ("/etc/modules-load.d/hpc-stateless-hsn.conf", "root", "root", 0o644),
        ("/etc/default/locale", "root", "root", 0o644), ("/etc/timezone", "root", "root", 0o644),
        ("/etc/dpkg/dpkg.cfg.d/90-hpc-stateless-nodoc", "root", "root", 0o644),
        ("/etc/systemd/system/hpc-stateless-ssh-hostkeys.service", "root", "root", 0o644),
        ("/usr/bin/ssh-keygen", "root", "root", 0o755), ("/usr/sbin/sshd", "root", "root", 0o755),
        ("/usr/sbin/chronyd", "root", "root", 0o755), ("/usr/bin/ibv_devinfo", "root", "root", 0o755),
        ("/usr/bin/ucx_info", "root", "root", 0o755), ("/usr/bin/systemctl", "root", "root", 0o755),
        ("/usr/lib/systemd/systemd", "root", "root", 0o755), ("/usr/bin/passwd", "root", "root", 0o4755),
        ("/etc/ssh", "root", "root", 0o755), ("/root", "root", "root", 0o700),
        ("/var/tmp", "root", "root", 0o1777))]
    checks += [_contains(*spec) for spec in (
        ("/etc/ssh/sshd_config.d/10-hpc-stateless.conf", "PasswordAuthentication no"),
        ("/etc/ssh/sshd_config.d/10-hpc-stateless.conf", "PermitRootLogin prohibit-password"),
        ("/etc/ssh/sshd_config.d/10-hpc-stateless.conf", "PermitEmptyPasswords no"),
        ("/etc/ssh/sshd_config", "Include /etc/ssh/sshd_config.d/*.conf"),
        ("/etc/chrony/chrony.conf", "pool pool.ntp.org iburst"),
        ("/etc/systemd/journald.conf.d/10-hpc-stateless.conf", "Storage=volatile"),
        ("/etc/sysctl.d/90-hpc-stateless.conf", "kernel.dmesg_restrict = 1"),
        ("/etc/sysctl.d/90-hpc-stateless.conf", "fs.suid_dumpable = 0"),
        ("/etc/security/limits.d/90-hpc-stateless.conf", "* hard core 0"),
        ("/etc/modules-load.d/hpc-stateless-hsn.conf", "ib_uverbs"),
        ("/etc/modules-load.d/hpc-stateless-hsn.conf", "rdma_ucm"),
        ("/etc/fstab", "tmpfs /tmp tmpfs"),
        ("/etc/default/locale", "LANG=C.UTF-8"))]
    checks += [_unit(*spec) for spec in (
        ("chrony.service", "enabled"), ("ssh.service", "enabled"),
        ("hpc-stateless-ssh-hostkeys.service", "enabled"), ("apt-daily.timer", "masked"),
        ("apt-daily-upgrade.timer", "masked"), ("dpkg-db-backup.timer", "masked"),
        ("e2scrub_all.timer", "masked"), ("fstrim.timer", "masked"),
        ("systemd-journald.service", "static"), ("systemd-sysctl.service", "static"),
        ("systemd-modules-load.service", "static"), ("getty@.service", "enabled"),
        ("systemd-firstboot.service", "masked"), ("dbus.service", "static"),
        ("remote-fs.target", "enabled"))]
    checks += [_user(name) for name in ("root", "daemon", "nobody", "sshd", "_chrony")]
    checks += [_group(name) for name in ("root", "shadow", "adm", "nogroup", "_chrony")]
    checks += [
        _command("chronyd -p -f /etc/chrony/chrony.conf"),
        _command("test -L /init"),
        _command("locale -a | grep -qx en_US.utf8"),
        _command("ls /boot/vmlinuz-*"),
        _absent("/etc/ssh/ssh_host_ed25519_key"),
        _absent("/etc/ssh/ssh_host_rsa_key"),
        _absent("/etc/munge/munge.key"),
        _sshd("passwordauthentication", "no"),
        _no_world_writable(),
        _no_empty_passwords(),
    ]
    if len(checks) != SUITE_SIZE:
        raise AssertionError(f"the suite has {len(checks)} checks, not {SUITE_SIZE}")
    return checks


def default_image() -> str:
    """``<prefix>/<layer of image compute>:latest`` of the default inventory."""
    data = yaml.safe_load((REPO / "inventory" / "group_vars" / "all" / "layers.yml").read_text(encoding="utf-8"))
    prefix = data.get("hpc_stateless_image_prefix", "localhost/hpc-stateless").rstrip("/")
    return f"{prefix}/{data['hpc_stateless_images']['compute']['layer']}:latest"


def run_suite(host: Any, checks: list[Check]) -> tuple[float, list[bool | None]]:
    """Seconds for the whole suite, and each check's verdict (None: the check could not run)."""
    start = time.monotonic()
    verdicts: list[bool | None] = []
    for check in checks:
        try:
            verdicts.append(bool(check.probe(host)))
        except AssertionError:
            verdicts.append(False)
        except Exception as exc:  # noqa: BLE001 - a transport failure is a result to report, not a crash
            log(f"{check.name}: could not run ({type(exc).__name__}: {str(exc)[:120]})")
            verdicts.append(None)
    return time.monotonic() - start, verdicts


def ansible_host(container: str, inventory: Path) -> Any:
    import testinfra

    inventory.write_text(
        f"[all]\n{container} ansible_connection=containers.podman.buildah "
        "ansible_python_interpreter=/usr/bin/python3\n", encoding="utf-8")
    return testinfra.get_host(f"ansible://{container}?ansible_inventory={inventory}")


def summarize(label: str, runs: list[float], checks: int) -> dict[str, Any]:
    median = statistics.median(runs)
    per_check = median / checks
    return {"label": label, "runs": [round(r, 3) for r in runs], "checks_timed": checks,
            "median_seconds": round(median, 3), "per_check_seconds": round(per_check, 4),
            "suite_seconds": round(per_check * SUITE_SIZE, 2)}


BOOTED_GOAL_SECONDS = 20.0
_IN_CONTAINER = "/run/hpc-stateless-bench"
_LOCAL_SIDE = """
import json, sys, time
sys.path[:0] = ["{root}/site", "{root}/shared", "{root}/benchmarks"]
import testinfra, compliance_bench
host = testinfra.get_host("local://")
seconds, verdicts = compliance_bench.run_suite(host, compliance_bench.suite())
print(json.dumps({{"seconds": seconds, "verdicts": verdicts}}))
"""


def _collection() -> Any:
    sys.path.insert(0, str(REPO / ".collections"))
    from ansible_collections.hpc.stateless.plugins.module_utils._nspawn import session, spec  # noqa: E402
    from ansible_collections.hpc.stateless.plugins.module_utils._verify import suite as verify_suite  # noqa: E402
    return session, spec, verify_suite


def booted_bench(image: str, checks: list[Check], runs: int) -> dict[str, Any]:
    """The three sides on one boot of ``image`` (module docstring)."""
    import site as site_module

    session_mod, spec_mod, verify_suite = _collection()
    site_packages = next(p for p in site_module.getsitepackages() if Path(p, "testinfra").is_dir())
    runtime = tempfile.mkdtemp(prefix="hpc-stateless-bench-nspawn-")
    key = Path(runtime, "munge.key")
    key.write_bytes(os.urandom(1024))
    binds = [f"--bind-ro={site_packages}:{_IN_CONTAINER}/site", f"--bind-ro={REPO / 'molecule' / '_shared'}:"
             f"{_IN_CONTAINER}/shared", f"--bind-ro={REPO / 'benchmarks'}:{_IN_CONTAINER}/benchmarks",
             f"--bind={key}:/etc/munge/munge.key"]
    spec = spec_mod.SessionSpec(host="compliance-bench", image=image, boot=True, runtime_dir=runtime,
                                owner_pid=os.getpid(), extra_args=binds)
    session = session_mod.Session(spec)
    log(f"booting {image} under systemd-nspawn")
    state = session.ensure()
    leader = int(state["leader_pid"])
    try:
        time.sleep(5)  # as verify's settle time: units that fail some seconds after boot do so
        nsenter_runs, local_runs, suite_runs = [], [], []
        nsenter_host = compliance.nsenter_host(leader)
        nsenter_verdicts: list[bool | None] = []
        local_verdicts: list[bool | None] = []
        layers = yaml.safe_load((REPO / "inventory" / "group_vars" / "all" / "layers.yml").read_text(encoding="utf-8"))
        layer = layers["hpc_stateless_images"]["compute"]["layer"]
        roles = verify_suite.chain_roles({name: {"parent": spec.get("parent"), "roles": spec.get("roles") or []}
                                          for name, spec in layers["hpc_stateless_layers"].items()}, layer)
        paths = verify_suite.suite_paths(str(REPO / "molecule"), roles)
        counts: dict[str, int] = {}
        for run in range(runs):
            seconds, nsenter_verdicts = run_suite(nsenter_host, checks)
            nsenter_runs.append(seconds)
            proc = subprocess_run(compliance.nsenter_argv(
                leader, f"python3 -c {shlex.quote(_LOCAL_SIDE.format(root=_IN_CONTAINER))}"), compliance.CONTAINER_ENV)
            local = json.loads(proc.stdout.strip().splitlines()[-1])
            local_runs.append(local["seconds"])
            local_verdicts = local["verdicts"]
            with tempfile.TemporaryDirectory() as tmp:
                report = str(Path(tmp, "junit.xml"))
                env = verify_suite.suite_environment(os.environ, leader, "nsenter", layer, roles, image=image,
                                                     inventory=str(REPO / "inventory"))
                started = time.monotonic()
                # rc 1: some check failed - the counts say which; anything else is a suite that could not run
                subprocess_run(verify_suite.pytest_command(sys.executable, str(REPO / "molecule"), report, paths), env,
                               ok=(0, 1))
                suite_runs.append(time.monotonic() - started)
                found = verify_suite.parse_junit(Path(report).read_bytes(), report)
                counts = verify_suite.summary(found)
            log(f"booted run {run + 1}/{runs}: nsenter {nsenter_runs[-1]:.2f} s, local {local_runs[-1]:.2f} s, "
                f"suite {suite_runs[-1]:.2f} s ({sum(counts.values())} checks: {counts})")
    finally:
        problems = session.stop()
        shutil.rmtree(runtime, ignore_errors=True)
        if problems:
            log(f"stopping the bench boot: {problems}")
    mismatches = [c.name for c, a, b in zip(checks, nsenter_verdicts, local_verdicts) if a != b]
    return {
        "image": image, "roles": roles,
        "nsenter": summarize("nsenter backend into the booted container", nsenter_runs, len(checks)),
        "local": summarize("testinfra local backend inside the booted container", local_runs, len(checks)),
        "suite": {"label": "compliance suite in the booted image (one pytest process, as verify)",
                  "runs": [round(r, 3) for r in suite_runs], "median_seconds": round(statistics.median(suite_runs), 3),
                  "checks": sum(counts.values()), "results": counts, "goal_seconds": BOOTED_GOAL_SECONDS,
                  "goal_met": statistics.median(suite_runs) <= BOOTED_GOAL_SECONDS},
        "verdict_mismatches": mismatches,
    }


def verify_bench(runs: int) -> dict[str, Any]:
    """verify.yml on the default image, with and without the suite (forced boots, records in a temp dir)."""
    sides: dict[str, list[float]] = {"without": [], "with": []}
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "BUILDAH_ISOLATION": "chroot"}
    for run in range(runs):
        for side, enabled in (("without", "false"), ("with", "true")):
            with tempfile.TemporaryDirectory() as records:
                argv = [str(REPO / ".venv" / "bin" / "ansible-playbook"), str(REPO / "playbooks" / "verify.yml"),
                        "-e", "hpc_stateless_verify_force=true", "-e", f"hpc_stateless_verify_suite={enabled}",
                        # Lynis and OpenSCAP are lynis_bench.py's and openscap_bench.py's figures; here only the suite differs
                        "-e", "hpc_stateless_verify_lynis=false", "-e", "hpc_stateless_verify_openscap=false",
                        "-e", f"hpc_stateless_verify_record_dir={records}"]
                started = time.monotonic()
                subprocess_run(argv, env, cwd=str(REPO))
                sides[side].append(time.monotonic() - started)
            log(f"verify run {run + 1}/{runs} {side} the suite: {sides[side][-1]:.1f} s")
    return {side: {"runs": [round(r, 2) for r in values], "median_seconds": round(statistics.median(values), 2)}
            for side, values in sides.items()} | {
        "added_seconds": round(statistics.median(sides["with"]) - statistics.median(sides["without"]), 2)}


def subprocess_run(argv: list[str], env: dict[str, str], cwd: str = "/", ok: tuple[int, ...] = (0,)) -> Any:
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode not in ok:
        raise SystemExit(f"{shlex.join(argv[:4])} ... failed (rc {proc.returncode}): {(proc.stdout + proc.stderr)[-2000:]}")
    return proc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--image", help="image to check (default: the default inventory's compute image)")
    parser.add_argument("--fast-runs", type=int, default=5, help="suite runs on the fast path (median)")
    parser.add_argument("--ansible-runs", type=int, default=1, help="suite runs on the baseline (median)")
    parser.add_argument("--ansible-checks", type=int, default=SUITE_SIZE,
                        help="checks timed on the baseline; fewer than 100 are scaled to 100")
    parser.add_argument("--booted-runs", type=int, default=3, help="runs of each side on the booted image (0: none)")
    parser.add_argument("--verify-runs", type=int, default=1, help="verify.yml runs with and without the suite (0: none)")
    parser.add_argument("--output", type=Path, default=REPO / "benchmarks" / "results" / "compliance.json")
    args = parser.parse_args()
    if not 1 <= args.ansible_checks <= SUITE_SIZE:
        parser.error(f"--ansible-checks must be between 1 and {SUITE_SIZE}")

    image = args.image or default_image()
    checks = suite()
    container = f"hpc-stateless-bench-{uuid.uuid4().hex[:8]}"
    log(f"working container {container} from {image}")
    try:
        compliance.buildah("from", "--pull=never", "--quiet", "--name", container, image)
    except compliance.BuildahError as exc:
        raise SystemExit(f"{exc}\nBuild the image first: ansible-playbook site.yml (or pass --image)") from exc
    try:
        with compliance.MountedContainer(container) as root, tempfile.TemporaryDirectory() as tmp:
            fast = compliance.chroot_host(root)
            fast_runs, fast_verdicts = [], []
            for run in range(args.fast_runs):
                seconds, fast_verdicts = run_suite(fast, checks)
                fast_runs.append(seconds)
                log(f"fast path run {run + 1}/{args.fast_runs}: {seconds:.2f} s")
            slow = ansible_host(container, Path(tmp) / "inventory.ini")
            timed = checks[:args.ansible_checks]
            slow_runs, slow_verdicts = [], []
            for run in range(args.ansible_runs):
                log(f"baseline run {run + 1}/{args.ansible_runs}: {len(timed)} checks over ansible ...")
                seconds, slow_verdicts = run_suite(slow, timed)
                slow_runs.append(seconds)
                log(f"baseline run {run + 1}/{args.ansible_runs}: {seconds:.1f} s")
    finally:
        compliance.buildah("rm", container)

    mismatches = [c.name for c, a, b in zip(timed, fast_verdicts, slow_verdicts)
                  if a is not None and b is not None and a != b]
    failed = [c.name for c, ok in zip(checks, fast_verdicts) if ok is False]
    errors = {"fast_path": [c.name for c, ok in zip(checks, fast_verdicts) if ok is None],
              "baseline": [c.name for c, ok in zip(timed, slow_verdicts) if ok is None]}
    fast_summary = summarize("chroot backend on the mounted working container", fast_runs, len(checks))
    slow_summary = summarize("ansible backend over containers.podman.buildah", slow_runs, len(timed))
    slow_summary["extrapolated"] = len(timed) < SUITE_SIZE
    ratio = slow_summary["suite_seconds"] / fast_summary["suite_seconds"]
    result = {
        "benchmark": "compliance",
        "image": image,
        "suite_checks": SUITE_SIZE,
        "fast_path": fast_summary,
        "baseline": slow_summary,
        "speedup": round(ratio, 1),
        "goal_seconds": GOAL_SECONDS,
        "goal_met": fast_summary["suite_seconds"] <= GOAL_SECONDS,
        "verdict_mismatches": mismatches,
        "failed_checks": failed,
        "checks_that_could_not_run": errors,
        "host": {"cpus": os.cpu_count(), "loadavg_1min": round(os.getloadavg()[0], 2)},
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if args.booted_runs > 0:
        result["booted"] = booted_bench(image, checks, args.booted_runs)
    if args.verify_runs > 0:
        result["verify"] = verify_bench(args.verify_runs)
    result["comparisons"] = comparisons.derive("compliance", result)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")

    extrapolated = " (extrapolated)" if slow_summary["extrapolated"] else ""
    print(f"\n100-check compliance suite against {image}")
    print(f"{'path':<52} {'runs':>4} {'median s':>9} {'s/check':>8} {'100 checks s':>13}")
    for summary in (slow_summary, fast_summary):
        print(f"{summary['label']:<52} {len(summary['runs']):>4} {summary['median_seconds']:>9.2f} "
              f"{summary['per_check_seconds']:>8.3f} {summary['suite_seconds']:>13.2f}")
    print(f"speed-up {ratio:.0f}x{extrapolated}; goal <= {GOAL_SECONDS:.0f} s on the fast path: "
          f"{'met' if result['goal_met'] else 'NOT met'}; results in {args.output}")
    if "booted" in result:
        booted = result["booted"]
        print(f"\nbooted image: 100 checks nsenter {booted['nsenter']['median_seconds']:.2f} s, local backend inside "
              f"{booted['local']['median_seconds']:.2f} s; the compliance suite ({booted['suite']['checks']} checks) "
              f"{booted['suite']['median_seconds']:.2f} s (goal <= {BOOTED_GOAL_SECONDS:.0f} s: "
              f"{'met' if booted['suite']['goal_met'] else 'NOT met'})")
    if "verify" in result:
        print(f"verify.yml without the suite {result['verify']['without']['median_seconds']:.1f} s, with it "
              f"{result['verify']['with']['median_seconds']:.1f} s (+{result['verify']['added_seconds']:.1f} s)")
    print("\n" + comparisons.text_table(result["comparisons"]))
    if failed:
        print(f"checks that fail on this image ({len(failed)}): {failed}")
    for side, names in errors.items():
        if names:
            # Seen on the baseline: `buildah run` returns rc 0 and no output while another
            # container is mounted or unmounted by a concurrent build.
            print(f"checks that could not run on the {side.replace('_', ' ')} ({len(names)}): {names}")
    if mismatches:
        print(f"VERDICTS DIFFER between the two paths: {mismatches}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
