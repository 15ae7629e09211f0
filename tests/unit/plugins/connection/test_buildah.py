"""hpc.stateless.buildah: results and pipelined input through files, and when a command is run again.

``buildah run`` itself is replaced by a stand-in that runs the wrapped shell command on the host with the
container's /tmp mapped to a test directory: the race this guards against (buildah failing before the
shell starts, "Close_Fd sealing memfd copy: Device or resource busy") cannot be produced on demand.
The real connection against a real working container is tested in tests/integration/test_build.py.
"""

from __future__ import annotations

import subprocess

import pytest
from ansible.errors import AnsibleConnectionFailure
from ansible.playbook.play_context import PlayContext

from ansible_collections.hpc.stateless.plugins.connection import buildah as buildah_plugin
from ansible_collections.hpc.stateless.plugins.module_utils import _process

MEMFD_RACE = b"Close_Fd sealing memfd copy: Device or resource busy\nError: exit status 1\n"


class FakeBuildah:
    """Stands in for ``Connection._buildah``: each call takes the next scripted behaviour."""

    def __init__(self, root, script):
        self.root, self.script, self.calls = root, list(script), 0

    def __call__(self, verb, args=(), in_data=None):  # pylint: disable=unused-argument
        assert verb == "run" and args[:2] == ["/bin/sh", "-c"]
        self.calls += 1
        behaviour = self.script.pop(0)
        wrapped = args[2].replace("/tmp/", f"{self.root}/tmp/")
        if behaviour == "not started":
            return 1, b"", MEMFD_RACE
        if behaviour == "killed after start":
            out = wrapped.split(" >", 1)[1].split(" ", 1)[0]
            open(out, "wb").close()  # pylint: disable=consider-using-with
            return 137, b"", b""
        proc = subprocess.run(["/bin/sh", "-c", wrapped], capture_output=True, check=False)
        return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture
def connection(tmp_path):
    (tmp_path / "tmp").mkdir()
    conn = buildah_plugin.Connection(PlayContext(), None)
    conn._connected = True  # pylint: disable=protected-access
    conn._mount_point = str(tmp_path).encode()  # pylint: disable=protected-access
    conn._container_id = "hpc-stateless-unit"  # pylint: disable=protected-access
    conn.user = None
    return conn


def run(connection, tmp_path, script, cmd, in_data=None):
    fake = FakeBuildah(tmp_path, script)
    connection._buildah = fake  # pylint: disable=protected-access
    return fake, connection.exec_command(cmd, in_data=in_data)


def test_status_and_both_streams_come_back(connection, tmp_path):
    fake, result = run(connection, tmp_path, ["run"], "echo out; echo err >&2; exit 3")
    assert result == (3, b"out\n", b"err\n")
    assert fake.calls == 1
    assert not list((tmp_path / "tmp").iterdir()), "result files left in the container"


def test_pipelined_input_reaches_the_command_and_is_removed(connection, tmp_path):
    result = run(connection, tmp_path, ["run"], "cat", in_data=b"module code\n")[1]
    assert result == (0, b"module code\n", b"")
    assert not list((tmp_path / "tmp").iterdir()), "the input file stayed in the container"


def test_a_run_that_never_started_is_repeated(connection, tmp_path):
    fake, result = run(connection, tmp_path, ["not started", "run"], "echo once >> /tmp/runs; cat /tmp/runs")
    assert result == (0, b"once\n", b"")
    assert fake.calls == 2


def test_a_command_that_may_have_run_is_never_repeated(connection, tmp_path):
    fake, result = run(connection, tmp_path, ["killed after start", "run"], "true")
    assert result[0] == 137
    assert fake.calls == 1


def test_three_runs_that_never_started_fail_with_buildahs_error(connection, tmp_path):
    with pytest.raises(AnsibleConnectionFailure, match="3 times .*Close_Fd sealing memfd copy"):
        run(connection, tmp_path, ["not started"] * 3, "true")
    assert not list((tmp_path / "tmp").iterdir())


class Executor:
    """The process runner's executor: records argv and environment, answers rc 0 with ``stdout``."""

    def __init__(self, stdout=b""):
        self.stdout, self.calls, self.envs = stdout, [], []

    def __call__(self, argv, *, env, timeout, input, cwd, text):  # pylint: disable=redefined-builtin,unused-argument
        self.calls.append(argv)
        self.envs.append(env)
        return _process.Result(argv, 0, self.stdout, b"")


@pytest.fixture
def executor(monkeypatch):
    # One buildah run per task (persistent=false); the agent's path is tested in test_buildah_persistent.py.
    monkeypatch.setattr(buildah_plugin.Connection, "_persistent", lambda self: False)
    monkeypatch.setattr(_process, "which", lambda name, hint="": f"/usr/bin/{name}")
    fake = Executor(b"/var/lib/containers/storage/overlay/x/merged\n")
    _process.set_executor(fake)
    yield fake
    _process.set_executor(None)


def test_buildah_is_called_through_the_collections_client(executor, monkeypatch):
    monkeypatch.delenv("BUILDAH_ISOLATION", raising=False)
    context = PlayContext()
    context.remote_addr = "hpc-stateless-base-abcdef-0123456789ab"
    conn = buildah_plugin.Connection(context, None)
    conn._connect()  # pylint: disable=protected-access
    conn.close()
    assert executor.calls == [["/usr/bin/buildah", "mount", context.remote_addr],
                              ["/usr/bin/buildah", "umount", context.remote_addr]]
    assert {env["BUILDAH_ISOLATION"] for env in executor.envs} == {"chroot"}
    assert executor.envs[0]["LANG"] == "C"


def test_another_user_runs_through_buildah_with_its_own_streams(executor, tmp_path):
    context = PlayContext()
    context.remote_addr, context.remote_user = "c", "slurm"
    conn = buildah_plugin.Connection(context, None)
    rc, out, _err = conn.exec_command("id -u", in_data=b"x")
    assert (rc, out) == (0, b"/var/lib/containers/storage/overlay/x/merged\n")
    assert executor.calls[-1] == ["/usr/bin/buildah", "run", "--user", "slurm", "c", "id", "-u"]
    conn.put_file("/etc/hostname", "/tmp/h")
    assert executor.calls[-1] == ["/usr/bin/buildah", "copy", "--chown", "slurm", "c", "/etc/hostname", "/tmp/h"]
    conn.fetch_file("/etc/slurm/slurm.conf", str(tmp_path / "slurm.conf"))
    assert executor.calls[-1] == ["/usr/bin/buildah", "run", "--user", "slurm", "c", "cat", "/etc/slurm/slurm.conf"]
    assert (tmp_path / "slurm.conf").read_bytes() == executor.stdout


@pytest.mark.parametrize("persistent", [True, False])
def test_a_missing_buildah_is_a_connection_failure(monkeypatch, tmp_path, persistent):
    monkeypatch.setattr(buildah_plugin.Connection, "_persistent", lambda self: persistent)
    monkeypatch.setattr(buildah_plugin.Connection, "get_option", lambda self, name: 600)
    monkeypatch.setenv("PATH", str(tmp_path))
    conn = buildah_plugin.Connection(PlayContext(), None)
    with pytest.raises(AnsibleConnectionFailure, match="apt-get install buildah"):
        conn._connect()  # pylint: disable=protected-access


def test_the_connection_stands_on_ansible_core_alone():
    """No other collection's private methods: every class it inherits from is ansible-core's or ours."""
    assert all(cls.__module__.split(".")[0] in ("ansible", "builtins", "abc")
               or cls.__module__.startswith("ansible_collections.hpc.stateless.")
               for cls in buildah_plugin.Connection.__mro__)
