"""The action hpc.stateless.layer: the module's function in this process for a local build host (validated by the
same argument spec), the module itself otherwise; failures keep the command, exit code and stderr."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from ansible.errors import AnsibleActionFail
from ansible.parsing.dataloader import DataLoader
from ansible.playbook.play_context import PlayContext
from ansible.playbook.task import Task
from ansible.template import Templar

from ansible_collections.hpc.stateless.plugins.action import layer as layer_action
from ansible_collections.hpc.stateless.plugins.module_utils import _process
from ansible_collections.hpc.stateless.plugins.module_utils._build import layer_task


def _action(args, transport="local", check_mode=False):
    task = Task()
    task.args = args
    task.check_mode = check_mode
    connection = SimpleNamespace(transport=transport, _shell=SimpleNamespace(tmpdir="unused"))
    loader = DataLoader()
    return layer_action.ActionModule(task, connection, PlayContext(), loader, Templar(loader), None)


def test_a_local_build_host_runs_the_function_here_with_defaults_and_check_mode(monkeypatch):
    calls = []
    monkeypatch.setattr(layer_task, "run", lambda params, check, diff, on_wait=None: calls.append((params, check)) or {"changed": False})
    action = _action({"name": "slurm", "key": "k1", "state": "committed"}, check_mode=True)
    monkeypatch.setattr(action, "_execute_module", lambda **kw: pytest.fail("no module process for a local host"))
    assert action.run(task_vars={})["changed"] is False
    params, check = calls[0]
    assert check is True and params["extra_tags"] == ["latest"] and params["image_prefix"] == "localhost/hpc-stateless"


def test_a_remote_build_host_runs_the_module_with_the_tasks_arguments(monkeypatch):
    action = _action({"name": "slurm", "state": "absent"}, transport="ssh")
    sent = []
    monkeypatch.setattr(action, "_execute_module", lambda **kw: sent.append(kw) or {"changed": True, "removed": []})
    monkeypatch.setattr(layer_task, "run", lambda *a: pytest.fail("the module runs on the build host"))
    assert action.run(task_vars={})["changed"] is True
    assert sent[0]["module_name"] == "hpc.stateless.layer" and sent[0]["module_args"] == {"name": "slurm", "state": "absent"}


def test_the_argument_spec_is_the_modules_one_here_too():
    with pytest.raises(AnsibleActionFail, match="state is started but all of the following are missing: key"):
        _action({"name": "slurm"}).run(task_vars={})


def test_a_failing_buildah_is_a_failed_result_with_its_command(monkeypatch):
    class Broken:
        def __init__(self, *args, **kwargs):
            pass

        def absent(self, check_mode):
            raise _process.ProcessError(["buildah", "rm", "x"], 125, "storage is locked")

    monkeypatch.setattr(layer_task, "LayerBuilder", Broken)
    result = _action({"name": "slurm", "state": "absent"}).run(task_vars={})
    assert result["failed"] and result["msg"].startswith("layer slurm: buildah rm x failed")
    assert (result["cmd"], result["rc"], result["stderr"]) == (["buildah", "rm", "x"], 125, "storage is locked")


@pytest.mark.parametrize("name", ["layer", "bootlink", "bootconfig", "pack"])
def test_each_in_process_action_runs_its_own_modules_options_and_passes_check_and_diff(monkeypatch, name):
    """The actions of the controller's modules: the module's FQCN, and the task module whose spec the module file
    uses too (one place for the options); check mode and diff mode reach the function."""
    import importlib  # pylint: disable=import-outside-toplevel
    action_module = importlib.import_module(f"ansible_collections.hpc.stateless.plugins.action.{name}")
    module_file = importlib.import_module(f"ansible_collections.hpc.stateless.plugins.modules.{name}")
    cls = action_module.ActionModule
    assert cls.MODULE == f"hpc.stateless.{name}" and module_file.ARGUMENT_SPEC is cls.TASK.ARGUMENT_SPEC
    task = Task()
    task.args = {"ignored": True}
    task.check_mode, task.diff = True, True
    loader = DataLoader()
    action = cls(task, SimpleNamespace(transport="local", _shell=SimpleNamespace(tmpdir="unused")), PlayContext(),
                 loader, Templar(loader), None)
    seen = []
    monkeypatch.setattr(action, "validate_argument_spec", lambda spec, **kw: (None, {"spec": spec, **kw}))
    monkeypatch.setattr(cls.TASK, "run", lambda params, check, diff, on_wait=None: seen.append((params, check, diff, on_wait)) or {})
    action.run(task_vars={})
    params, check, diff, on_wait = seen[0]
    assert params["spec"] is cls.TASK.ARGUMENT_SPEC and check is True and diff is True and callable(on_wait)
    assert {k: v for k, v in params.items() if k != "spec"} == cls.TASK.VALIDATION
