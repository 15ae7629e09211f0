"""Bad input for the nspawn connection: each is a clear error with the reason, and leaves nothing.

The broken images are made from the test base layer (a working container with files removed
or added, committed under the test prefix) and removed again after the module.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid

import pytest

from conftest import BUILDAH_ENV, REPO, buildah, commit_changed_image
from nspawn_support import TEST_PREFIX, build_test_layers, leftovers, new_runtime_dir, remove_runtime_dir, wait_clean

HANG_UNIT = """[Unit]
Description=A start job that never finishes
[Service]
Type=oneshot
ExecStart=/bin/sleep infinity
TimeoutStartSec=infinity
[Install]
WantedBy=multi-user.target
"""

BROKEN_INIT = "#!/bin/sh\necho 'this init gives up at once' >&2\nexit 3\n"


def make_image(base: str, name: str, change) -> str:
    """Commit ``change(root)`` applied to a working container of ``base`` as a test image."""
    return commit_changed_image(base, f"{TEST_PREFIX}/bad-{name}:latest", change,
                                f"hpc-nspawn-test-{name}-{uuid.uuid4().hex[:6]}")


def without_systemd(root: str) -> None:
    for path in ("usr/lib/systemd/systemd", "sbin/init"):
        if os.path.lexists(os.path.join(root, path)):
            os.unlink(os.path.join(root, path))


def with_hanging_unit(root: str) -> None:
    with open(os.path.join(root, "etc/systemd/system/hang.service"), "w", encoding="utf-8") as handle:
        handle.write(HANG_UNIT)
    os.symlink("/etc/systemd/system/hang.service",
               os.path.join(root, "etc/systemd/system/multi-user.target.wants/hang.service"))


def with_broken_init(root: str) -> None:
    init = os.path.join(root, "usr/lib/systemd/systemd")
    os.unlink(init)
    with open(init, "w", encoding="utf-8") as handle:
        handle.write(BROKEN_INIT)
    os.chmod(init, 0o755)


@pytest.fixture(scope="module")
def bad_images():
    base = build_test_layers()["base"]
    images = {}
    try:
        images["nosystemd"] = make_image(base, "nosystemd", without_systemd)
        images["hang"] = make_image(base, "hang", with_hanging_unit)
        images["badinit"] = make_image(base, "badinit", with_broken_init)
        yield images
    finally:
        if images:
            buildah("rmi", "--force", *images.values(), check=False)


@pytest.fixture()
def runtime_dir():
    path = new_runtime_dir()
    yield path
    remove_runtime_dir(path)


def ping(runtime_dir: str, *variables: str, host: str = "bad") -> subprocess.CompletedProcess:
    """``ansible -m ping`` over the nspawn connection: the error is the connection's."""
    env = {**BUILDAH_ENV, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_NSPAWN_RUNTIME_DIR": runtime_dir}
    argv = [str(REPO / ".venv/bin/ansible"), "all", "-i", f"{host},", "-c", "hpc.stateless.nspawn",
            "-m", "ansible.builtin.ping"]
    for variable in variables:
        argv += ["-e", variable]
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=300)


def assert_unreachable(proc: subprocess.CompletedProcess, *fragments: str) -> None:
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    assert "UNREACHABLE" in output, output
    for fragment in fragments:
        assert fragment in output, f"{fragment!r} not in:\n{output}"


def test_booting_an_image_without_systemd(bad_images, runtime_dir):
    proc = ping(runtime_dir, f"ansible_nspawn_image={bad_images['nosystemd']}", "ansible_nspawn_boot=true")
    assert_unreachable(proc, f"image {bad_images['nosystemd']} (mounted at ",
                       "has no systemd (/usr/lib/systemd/systemd and /lib/systemd/systemd are missing, "
                       "/sbin/init is missing): it cannot be booted")
    # the error comes after the teardown: nothing to wait for
    assert leftovers(runtime_dir) == {}


def test_the_same_image_still_works_in_directory_mode(bad_images, runtime_dir):
    proc = ping(runtime_dir, f"ansible_nspawn_image={bad_images['nosystemd']}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert '"ping": "pong"' in proc.stdout
    assert wait_clean(runtime_dir) == {}


def test_an_image_that_never_reaches_running(bad_images, runtime_dir):
    started = time.monotonic()
    proc = ping(runtime_dir, f"ansible_nspawn_image={bad_images['hang']}", "ansible_nspawn_boot=true",
                "ansible_nspawn_boot_timeout=4", "ansible_nspawn_stop_timeout=3")
    assert_unreachable(proc, "did not finish booting within 4s (ansible_nspawn_boot_timeout)",
                       "system state 'starting'", "hang.service (start, running)", "Last console lines:")
    assert time.monotonic() - started < 60
    assert leftovers(runtime_dir) == {}


def test_an_init_that_exits_at_once(bad_images, runtime_dir):
    proc = ping(runtime_dir, f"ansible_nspawn_image={bad_images['badinit']}", "ansible_nspawn_boot=true")
    assert_unreachable(proc, "systemd-nspawn exited with rc=3 before image", "this init gives up at once")
    assert leftovers(runtime_dir) == {}


def test_a_missing_root(runtime_dir):
    proc = ping(runtime_dir, "ansible_nspawn_root=/nonexistent/tree", "ansible_nspawn_boot=true")
    assert_unreachable(proc, "root /nonexistent/tree does not exist: build the layer first, or point "
                             "ansible_nspawn_root at an existing OS tree")
    assert leftovers(runtime_dir) == {}


def test_a_missing_image(runtime_dir):
    proc = ping(runtime_dir, f"ansible_nspawn_image={TEST_PREFIX}/never-built:latest", "ansible_nspawn_boot=true")
    assert_unreachable(proc, f"image {TEST_PREFIX}/never-built:latest is not in local containers-storage: "
                             "build it first (ansible-playbook site.yml)")
    assert leftovers(runtime_dir) == {}


def test_systemd_nspawn_missing(runtime_dir):
    proc = ping(runtime_dir, "ansible_nspawn_root=/", "ansible_nspawn_exe=/nonexistent/bin/systemd-nspawn")
    assert_unreachable(proc, "/nonexistent/bin/systemd-nspawn is not installed on the controller",
                       "install the package systemd-container")
    assert leftovers(runtime_dir) == {}


def test_root_and_image_together(runtime_dir):
    proc = ping(runtime_dir, "ansible_nspawn_root=/srv/tree", "ansible_nspawn_image=localhost/x:latest")
    assert_unreachable(proc, "host bad: set exactly one of ansible_nspawn_root (a directory) and "
                             "ansible_nspawn_image (a local image)")


@pytest.mark.fault
def test_a_killed_playbook_leaves_nothing(runtime_dir, tmp_path):
    """kill -9 of ansible-playbook while a container runs: its supervisor tears down alone."""
    layers = build_test_layers()
    (tmp_path / "play.yml").write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.command: systemctl is-system-running\n      changed_when: false\n"
        "    - ansible.builtin.pause:\n        seconds: 600\n")
    env = {**BUILDAH_ENV, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NSPAWN_RUNTIME_DIR": runtime_dir}
    log = tmp_path / "play.log"
    with open(log, "wb") as output:
        proc = subprocess.Popen(
            [str(REPO / ".venv/bin/ansible-playbook"), "-i", "victim,", "-c", "hpc.stateless.nspawn",
             "-e", f"ansible_nspawn_image={layers['base']}", "-e", "ansible_nspawn_boot=true",
             str(tmp_path / "play.yml")],
            cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
            start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while "TASK [ansible.builtin.pause]" not in log.read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.3)
        running = leftovers(runtime_dir)
        assert any("systemd-nspawn" in p for p in running["processes"]), running
        assert running.get("containers"), running
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert wait_clean(runtime_dir, timeout=40) == {}
