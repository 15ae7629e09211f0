"""hpc.stateless.buildah: results and pipelined input through files, and when a command is run again.

``buildah run`` itself is replaced by a stand-in that runs the wrapped shell command on the host with the
container's /tmp mapped to a test directory: the race this guards against (buildah failing before the
shell starts, "Close_Fd sealing memfd copy: Device or resource busy") cannot be produced on demand.
The real connection against a real working container is tested in tests/integration/test_build.py.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from ansible.errors import AnsibleConnectionFailure, AnsibleError
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
        if isinstance(behaviour, tuple):  # ("link out", host file): what a process left in the container does
            out = Path(wrapped.split(" >", 1)[1].split(" ", 1)[0])
            out.unlink()
            out.symlink_to(behaviour[1])
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


@pytest.fixture(name="host_secret")
def fixture_host_secret(tmp_path_factory):
    """A file of the build host outside the container, and the directory it is in."""
    secret = tmp_path_factory.mktemp("host") / "shadow"
    secret.write_text("root:$6$host-secret:19000::::::\n")
    secret.chmod(0o600)
    return secret


# Security review (issue 25, finding 5): the container's links lead to the container's files, never the host's.
def test_a_result_file_swapped_for_a_link_to_a_host_file_is_not_read(connection, tmp_path, host_secret):
    with pytest.raises(AnsibleConnectionFailure, match="not a regular file but a symbolic link"):
        run(connection, tmp_path, [("link out", host_secret)], "echo harmless")
    assert not list((tmp_path / "tmp").iterdir()), "the planted link stayed"
    assert host_secret.read_text().startswith("root:$6$host-secret")


def test_a_tmp_that_links_out_of_the_container_is_resolved_inside_it(connection, tmp_path, host_secret):
    (tmp_path / "tmp").rmdir()
    (tmp_path / "tmp").symlink_to(host_secret.parent)  # absolute: the host's directory only when followed on the host
    with pytest.raises(AnsibleConnectionFailure, match="has no /tmp"):
        run(connection, tmp_path, ["run"], "cat", in_data=b"module code")
    assert [path.name for path in host_secret.parent.iterdir()] == ["shadow"], "a file was written on the host"
    (tmp_path / "tmp").unlink()
    (tmp_path / "var" / "tmp").mkdir(parents=True)
    (tmp_path / "tmp").symlink_to("var/tmp")  # the container's own /var/tmp: followed
    assert run(connection, tmp_path, ["run"], "cat", in_data=b"module code")[1] == (0, b"module code", b"")
    assert not list((tmp_path / "var" / "tmp").iterdir())


def test_put_writes_through_the_containers_links_inside_it_never_to_the_host(connection, tmp_path, host_secret):
    source = tmp_path / "source"
    source.write_text("new\n")
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "conf").write_text("old\n")
    (tmp_path / "etc" / "conf").chmod(0o640)
    (tmp_path / "etc" / "link").symlink_to("conf")
    (tmp_path / "etc" / "shadow").symlink_to(host_secret)  # absolute: /<host dir>/shadow inside the container
    (tmp_path / "etc" / "ssh").symlink_to(host_secret.parent)
    connection.put_file(str(source), "/etc/link")
    conf = tmp_path / "etc" / "conf"
    assert conf.read_text() == "new\n" and conf.stat().st_mode & 0o777 == 0o640, "not the mode of the file it replaced"
    connection.put_file(str(source), "/etc/shadow")
    assert not (tmp_path / "etc" / "shadow").is_symlink() and (tmp_path / "etc" / "shadow").read_text() == "new\n"
    with pytest.raises(AnsibleError, match="cannot copy .* to /etc/ssh/sshd_config in container hpc-stateless-unit"):
        connection.put_file(str(source), "/etc/ssh/sshd_config")
    assert host_secret.read_text().startswith("root:$6$host-secret")
    assert [path.name for path in host_secret.parent.iterdir()] == ["shadow"]
    assert sorted(path.name for path in (tmp_path / "etc").iterdir()) == ["conf", "link", "shadow", "ssh"]


def test_fetch_reads_only_regular_files_of_the_container(connection, tmp_path, host_secret):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "hostname").write_text("node\n")
    (tmp_path / "etc" / "name").symlink_to("hostname")
    (tmp_path / "etc" / "shadow").symlink_to(host_secret)
    os.mkfifo(tmp_path / "etc" / "fifo")
    local = tmp_path / "fetched"
    connection.fetch_file("/etc/name", str(local))
    assert local.read_text() == "node\n"
    for path, error in (("/etc/shadow", "No such file|no such file"), ("/etc/fifo", "not a regular file but a FIFO")):
        with pytest.raises(AnsibleError, match=f"cannot fetch {path} from container hpc-stateless-unit: .*({error})"):
            connection.fetch_file(path, str(local))
        assert local.read_text() == "node\n", "a failed fetch touched the local file"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["etc", "fetched", "tmp"]


def test_a_directory_swapped_for_a_link_while_it_is_opened_is_refused(tmp_path, host_secret, monkeypatch):
    """A process in the container swaps /tmp for a link to a host directory between the walk and the open."""
    (tmp_path / "tmp").mkdir()
    resolve = buildah_plugin._imagepath.resolve  # pylint: disable=protected-access

    def swapped_after_the_walk(root, path, follow_last=True):
        found = resolve(root, path, follow_last)
        (tmp_path / "tmp").rename(tmp_path / "tmp.old")
        (tmp_path / "tmp").symlink_to(host_secret.parent)
        return found
    monkeypatch.setattr(buildah_plugin._imagepath, "resolve", swapped_after_the_walk)  # pylint: disable=protected-access
    with pytest.raises(OSError, match="replaced while it was opened"):
        buildah_plugin._imagepath.open_dir(str(tmp_path), "/tmp")  # pylint: disable=protected-access


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
