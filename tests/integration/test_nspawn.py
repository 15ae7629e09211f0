"""The hpc.stateless.nspawn connection against real systemd-nspawn, nsenter and buildah.

One booted container per module-scoped fixture; directory mode tests are cheap (no boot).
Every test checks that its sessions left nothing: no session directory, no mount, no
supervisor or systemd-nspawn process, no buildah working container.
"""

from __future__ import annotations

import hashlib
import os
import textwrap
import time
import tracemalloc
import uuid
from pathlib import Path

import pytest
from ansible.errors import AnsibleConnectionFailure

from conftest import buildah, read_from_image, run_site
from nspawn_support import (
    connection,
    leftovers,
    new_runtime_dir,
    remove_runtime_dir,
    run,
    build_test_layers,
    wait_clean,
)


@pytest.fixture(scope="module")
def layers():
    return build_test_layers()


@pytest.fixture(scope="module")
def runtime_dir():
    path = new_runtime_dir()
    yield path
    remove_runtime_dir(path)


@pytest.fixture(scope="module")
def booted(layers, runtime_dir):
    """One booted container of the ``units`` layer for the whole module."""
    conn = connection(runtime_dir, host="nspawn-booted", image=layers["units"], boot=True)
    conn._connect()
    yield conn
    conn.reset()


# ------------------------------------------------------------------------ booted mode
def test_boot_reaches_running_with_the_images_own_systemd(booted):
    rc, out, _err = run(booted, "systemctl is-system-running; cat /proc/1/comm; hostname")
    assert rc == 0
    assert out.split() == ["running", "systemd", "nspawn-booted"]
    state = booted._state
    assert state["system_state"] == "running"
    assert state["failed_units"] == []
    assert 0 < state["boot_seconds"] < 30


def test_booted_units_of_the_role_are_active(booted):
    rc, out, _err = run(booted, "systemctl is-active hpc-nspawn-daemon.service; "
                                "systemctl show -p Result --value hpc-nspawn-once.service")
    assert (rc, out.split()) == (0, ["active", "success"])


def test_booted_container_has_only_loopback_by_default(booted):
    rc, out, _err = run(booted, "ip -o link show | cut -d: -f2")
    assert rc == 0
    assert out.split() == ["lo"]


def test_commands_get_the_containers_environment_stdin_and_exit_code(booted):
    rc, out, _err = run(booted, 'echo "$PATH|$HOME|$container|${ANSIBLE_CONFIG:-unset}"; cat; exit 7',
                        in_data=b"piped input\n")
    assert rc == 7
    assert out.splitlines() == ["/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin|/root|"
                                "systemd-nspawn|unset", "piped input"]


def test_a_new_connection_object_reuses_the_running_container(booted, layers, runtime_dir):
    """Ansible makes a new connection for every task: they must all reach the same container."""
    run(booted, "echo first-task > /etc/nspawn-task-marker")
    second = connection(runtime_dir, host="nspawn-booted", image=layers["units"], boot=True)
    rc, out, _err = run(second, "cat /etc/nspawn-task-marker")
    assert (rc, out) == (0, "first-task\n")
    assert second._state["leader_pid"] == booted._state["leader_pid"]
    second.close()  # closing a task's connection does not stop the container
    assert run(booted, "true")[0] == 0


def test_put_and_fetch_stream_large_files(booted, tmp_path):
    source = tmp_path / "big.bin"
    with open(source, "wb") as handle:
        for _mebibyte in range(48):
            handle.write(os.urandom(1 << 20))
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    tracemalloc.start()
    try:
        booted.put_file(str(source), "/var/tmp/big.bin")
        booted.fetch_file("/var/tmp/big.bin", str(tmp_path / "back.bin"))
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # 48 MiB went each way; the plugin holds one buffer at a time, never the file.
    assert peak < 8 << 20, f"peak Python memory {peak} bytes: the file was not streamed"
    rc, out, _err = run(booted, "sha256sum /var/tmp/big.bin")
    assert (rc, out.split()[0]) == (0, digest)
    assert hashlib.sha256((tmp_path / "back.bin").read_bytes()).hexdigest() == digest


def test_put_file_of_an_empty_file_and_a_relative_path(booted, tmp_path):
    (tmp_path / "empty").write_bytes(b"")
    booted.put_file(str(tmp_path / "empty"), "var/tmp/empty")
    assert run(booted, "stat -c %s /var/tmp/empty") == (0, "0\n", "")


def test_remote_user_runs_commands_as_that_user(layers, runtime_dir, booted):
    as_nobody = connection(runtime_dir, host="nspawn-booted", image=layers["units"], boot=True,
                           ansible_user="nobody")
    rc, out, _err = run(as_nobody, 'id -un; echo "$HOME"')
    assert (rc, out.split()) == (0, ["nobody", "/nonexistent"])
    missing = connection(runtime_dir, host="nspawn-booted", image=layers["units"], boot=True,
                         ansible_user="no-such-user")
    with pytest.raises(AnsibleConnectionFailure, match="user 'no-such-user' does not exist in the container"):
        run(missing, "true")


def test_writes_never_reach_the_image(booted, layers):
    run(booted, "echo changed > /etc/hpc-nspawn-marker")
    assert read_from_image(layers["units"], "/etc/hpc-nspawn-marker") == "\n"


def test_a_container_that_shut_down_is_reported_and_cleaned_up(layers, runtime_dir):
    conn = connection(runtime_dir, host="nspawn-poweroff", image=layers["base"], boot=True)
    assert run(conn, "systemctl is-system-running")[1].strip() == "running"
    run(conn, "systemctl --no-block poweroff")
    session, state = conn._session, conn._state
    deadline = time.monotonic() + 30
    while session.container_running(state) and time.monotonic() < deadline:
        time.sleep(0.1)
    with pytest.raises(AnsibleConnectionFailure, match="container of host nspawn-poweroff is no longer running"):
        run(conn, "true")
    # the supervisor saw systemd-nspawn exit and released the working container
    # (the module's booted container lives on in the same runtime dir: look at this session only)
    deadline = time.monotonic() + 30
    while True:
        left = [item for items in leftovers(runtime_dir).values() for item in items if session.spec.id in item]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert left == []


# ------------------------------------------------------------------------ directory mode
def test_directory_mode_on_an_image(layers, runtime_dir):
    conn = connection(runtime_dir, host="nspawn-dir", image=layers["units"])
    rc, out, _err = run(conn, "cat /proc/1/comm; hostname; echo kept > /etc/dir-marker")
    assert (rc, out.split()) == (0, ["(sd-stubinit)", "nspawn-dir"])
    # the next task (a new connection object) sees the write: the working container is kept
    again = connection(runtime_dir, host="nspawn-dir", image=layers["units"])
    assert run(again, "cat /etc/dir-marker")[1] == "kept\n"
    container = [c for c in leftovers(runtime_dir).get("containers", []) if conn._session.spec.id in c]
    assert len(container) == 1
    conn.reset()
    assert not any(conn._session.spec.id in item for items in leftovers(runtime_dir).values() for item in items)


@pytest.fixture()
def tree(layers):
    """A directory tree: the mount of a working container of the base layer."""
    name = f"hpc-nspawn-test-tree-{uuid.uuid4().hex[:8]}"
    buildah("from", "--pull=never", "--quiet", "--name", name, layers["base"])
    try:
        yield Path(buildah("mount", name).strip())
    finally:
        buildah("umount", name, check=False)
        buildah("rm", name, check=False)


def test_directory_mode_on_a_tree_is_ephemeral_by_default(tree, runtime_dir):
    conn = connection(runtime_dir, host="nspawn-tree", root=str(tree))
    assert run(conn, "echo overlay > /etc/tree-marker; cat /etc/tree-marker")[1] == "overlay\n"
    overlay = conn._state["root"]
    assert overlay.startswith(runtime_dir) and overlay in leftovers(runtime_dir)["mounts"]
    assert not (tree / "etc/tree-marker").exists()
    conn.reset()
    assert not (tree / "etc/tree-marker").exists()
    assert leftovers(runtime_dir).get("mounts", []) == []


def test_directory_mode_in_place_writes_into_the_tree(tree, runtime_dir):
    conn = connection(runtime_dir, host="nspawn-inplace", root=str(tree), ephemeral=False)
    assert run(conn, "echo in-place > /etc/tree-marker")[0] == 0
    assert (tree / "etc/tree-marker").read_text() == "in-place\n"
    assert not os.path.exists(conn._session.dir)  # nothing had to outlive the command


# ------------------------------------------------------------------------ a playbook run
PLAYBOOK = textwrap.dedent("""\
    - name: Booted mode as Ansible uses it
      hosts: nspawn_pb
      gather_facts: true
      vars:
        ansible_connection: hpc.stateless.nspawn
        ansible_nspawn_image: "{{ image }}"
        ansible_nspawn_boot: true
        ansible_nspawn_runtime_dir: "{{ runtime_dir }}"
      tasks:
        - name: Facts come from inside the booted container
          ansible.builtin.assert:
            that:
              - ansible_facts.service_mgr == 'systemd'
              - ansible_facts.virtualization_type == 'container'
              - ansible_facts.hostname == 'nspawn-pb'
              - ansible_facts.distribution_release == 'bookworm'

        - name: Copy and template go through put_file
          ansible.builtin.copy:
            content: "written by a task\\n"
            dest: /etc/pb-marker
            mode: "0644"

        - name: Fetch goes through fetch_file
          ansible.builtin.fetch:
            src: /etc/pb-marker
            dest: "{{ fetch_dir }}/"

        - name: Create a user with a password, and give root one
          ansible.builtin.shell: |
            useradd --create-home --shell /bin/sh tester
            printf 'tester:tester-pw\\nroot:root-pw\\n' | chpasswd
          changed_when: true

        - name: Become another user with su (root needs no password)
          ansible.builtin.command: id -un
          become: true
          become_method: ansible.builtin.su
          become_user: tester
          register: su_down
          changed_when: false

        - name: Become root with su from an unprivileged user, answering the password prompt
          ansible.builtin.command: id -un
          vars:
            ansible_user: tester
            ansible_become_password: root-pw
          become: true
          become_method: ansible.builtin.su
          register: su_up
          changed_when: false

        - name: Check who ran the commands
          ansible.builtin.assert:
            that:
              - su_down.stdout == 'tester'
              - su_up.stdout == 'root'

        - name: Stop the container
          ansible.builtin.meta: reset_connection

        - name: The next task boots a fresh container from the unchanged image
          ansible.builtin.stat:
            path: /etc/pb-marker
          register: after_reset

        - name: Check that the reset threw the container away
          ansible.builtin.assert:
            that: not after_reset.stat.exists
    """)


@pytest.fixture()
def own_runtime_dir():
    """A runtime dir no other session of this module uses."""
    path = new_runtime_dir()
    yield path
    remove_runtime_dir(path)


def test_playbook_facts_transfers_become_and_reset(layers, own_runtime_dir, tmp_path):
    runtime_dir = own_runtime_dir
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    (tmp_path / "hosts.yml").write_text("all:\n  hosts:\n    nspawn_pb:\n")
    proc = run_site("-e", f"image={layers['units']}", "-e", f"runtime_dir={runtime_dir}",
                    "-e", f"fetch_dir={tmp_path / 'fetched'}",
                    inventory=tmp_path / "hosts.yml", playbook=str(tmp_path / "play.yml"))
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert (tmp_path / "fetched/nspawn_pb/etc/pb-marker").read_text() == "written by a task\n"
    assert "nspawn_pb                  : ok=" in proc.stdout
    # the session of the second boot ends with the ansible-playbook process
    assert wait_clean(runtime_dir) == {}
