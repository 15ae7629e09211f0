"""hpc.stateless.buildah with its agent (persistent, the default): what the plugin does with a session.

The session is a stand-in recording calls (the real holder and agent are tested in
tests/unit/plugins/module_utils/test_build_holder.py, and with real buildah in
tests/integration/test_buildah_agent.py); the plugin's options are set as Ansible would resolve them.
"""

from __future__ import annotations

import yaml
import pytest
from ansible.errors import AnsibleConnectionFailure, AnsibleError
from ansible.playbook.play_context import PlayContext

from ansible_collections.hpc.stateless.plugins.connection import buildah as buildah_plugin
from ansible_collections.hpc.stateless.plugins.module_utils._buildah_agent.holder import AgentLost, AgentUnavailable


class FakeSession:
    """Records what the plugin asks of the agent's session."""

    instances: list = []
    failures: dict = {}  # "connect" / "exec": the exception that call raises
    warm = False  # whether the last command ran in the agent's warm python

    def __init__(self, container, user, client, idle_timeout=600, log=None, owner=None):  # pylint: disable=unused-argument
        self.container, self.user, self.idle_timeout = container, user, idle_timeout
        self.calls = []
        FakeSession.instances.append(self)

    def connect(self):
        self.calls.append(("connect",))
        if "connect" in FakeSession.failures:
            raise FakeSession.failures["connect"]

    def exec(self, cmd, stdin=None):
        self.calls.append(("exec", cmd, stdin))
        if "exec" in FakeSession.failures:
            raise FakeSession.failures["exec"]
        return 0, b"out", b"err"

    def put(self, local, remote):
        self.calls.append(("put", local, remote))

    def fetch(self, remote, local):
        self.calls.append(("fetch", remote, local))
        raise OSError(f"cannot read {remote}")

    def close(self):
        self.calls.append(("close",))

    def stop(self):
        self.calls.append(("stop",))
        return True


@pytest.fixture(name="conn")
def fixture_conn(monkeypatch):
    FakeSession.instances, FakeSession.failures, FakeSession.warm = [], {}, False
    monkeypatch.setattr(buildah_plugin, "Session", FakeSession)
    options = {"persistent": True, "persistent_idle_timeout": 42}
    monkeypatch.setattr(buildah_plugin.Connection, "get_option", lambda self, name: options[name])
    context = PlayContext()
    context.remote_addr = "hpc-stateless-base-abcdef-0123456789ab"
    return buildah_plugin.Connection(context, None)


def test_commands_and_files_go_through_one_session(conn):
    assert conn.exec_command("echo hi", in_data=b"code") == (0, b"out", b"err")
    conn.put_file("/etc/hostname", "/tmp/h")
    (session,) = FakeSession.instances
    assert (session.container, session.user, session.idle_timeout) == (conn._play_context.remote_addr, None, 42)
    assert session.calls == [("connect",), ("exec", b"echo hi", b"code"), ("put", b"/etc/hostname", "/tmp/h")]
    conn.close()
    assert session.calls[-1] == ("close",) and not conn._connected  # pylint: disable=protected-access


def test_a_module_the_warm_python_ran_says_so_at_vvv(conn, monkeypatch):
    said = []
    monkeypatch.setattr(buildah_plugin.display, "vvv", lambda msg, host=None: said.append(msg))
    conn.exec_command("/bin/sh -c '/usr/bin/python3 && sleep 0'", in_data=b"wrapper")
    assert not any("warm" in msg for msg in said)
    FakeSession.warm = True
    conn.exec_command("/bin/sh -c '/usr/bin/python3 && sleep 0'", in_data=b"wrapper")
    assert said[-1] == "the module ran in the agent's warm python"


def test_a_lost_answer_fails_the_task_and_is_not_retried(conn):
    FakeSession.failures["exec"] = AgentLost("the agent went away; it may have run, so it is not run again")
    with pytest.raises(AnsibleConnectionFailure, match="not run again"):
        conn.exec_command("apt-get install -y x")
    assert [c[0] for c in FakeSession.instances[0].calls] == ["connect", "exec"]


def test_a_file_error_names_the_container(conn, tmp_path):
    with pytest.raises(AnsibleError, match="cannot fetch /missing from container hpc-stateless-base"):
        conn.fetch_file("/missing", str(tmp_path / "x"))


def test_an_agent_that_cannot_start_falls_back_to_one_buildah_run_per_task(conn, monkeypatch):
    FakeSession.failures["connect"] = AgentUnavailable("no python3 in the container")
    calls = []
    monkeypatch.setattr(conn, "_buildah", lambda verb, args=(), in_data=None: calls.append(verb) or (1, b"", b"no"))
    warnings = []
    monkeypatch.setattr(buildah_plugin.display, "warning", warnings.append)
    conn._connect()  # pylint: disable=protected-access
    assert calls == ["mount"] and conn._session is None  # pylint: disable=protected-access
    assert "no python3" in warnings[0] and "one buildah run per task" in warnings[0]


def test_reset_stops_the_agent_switched_off_it_does_not(conn, monkeypatch):
    conn.reset()
    assert FakeSession.instances[-1].calls == [("stop",)]
    monkeypatch.setattr(buildah_plugin.Connection, "_persistent", lambda self: False)
    monkeypatch.setattr(conn, "_buildah", lambda verb, args=(), in_data=None: (0, b"/m\n", b""))
    count = len(FakeSession.instances)
    conn.reset()
    conn._connect()  # pylint: disable=protected-access
    assert len(FakeSession.instances) == count and conn._mount_point == "/m"  # pylint: disable=protected-access


def test_the_switch_is_documented_with_its_variable_and_environment():
    doc = yaml.safe_load(buildah_plugin.DOCUMENTATION)
    option = doc["options"]["persistent"]
    assert option["default"] is True and option["type"] == "boolean"
    assert option["env"] == [{"name": "HPC_STATELESS_BUILDAH_PERSISTENT"}]
    assert option["vars"] == [{"name": "ansible_hpc_stateless_buildah_persistent"}]
    assert doc["options"]["persistent_idle_timeout"]["default"] == 600
