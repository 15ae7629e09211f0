"""The rootfs module's decisions, run through its real main() with real arguments.

Each test sets the module arguments the way Ansible passes them (``basic._ANSIBLE_ARGS``),
calls ``main()``, catches the SystemExit and parses the JSON the module printed.
The process runner's executor is wrapped by a spy that records every command and then runs it for real,
so "nothing ran" is asserted, not assumed. None of these tests needs a real bootstrap:
they stop at a refusal, at an existing record or in check mode. The real dnf and zypper
runs are in tests/integration/test_rootfs_rpm.py. The tools (debootstrap, dnf, zypper)
are resolved on the host as the module does; scripts/setup.sh installs them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils import _process
from ansible_collections.hpc.stateless.plugins.module_utils._build import bootstrap
from ansible_collections.hpc.stateless.plugins.module_utils._build.bootstrap import (
    RECORD_RELPATH,
    BootstrapSpec,
    bootstrap_record,
)
from ansible_collections.hpc.stateless.plugins.modules import rootfs

MODULE = rootfs  # what the run_module fixture (conftest.py) runs
REPO = Path(__file__).resolve().parents[4]
SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/sbin", "/usr/sbin", "/usr/local/sbin"])


def host_binary(name: str) -> str:
    found = shutil.which(name, path=SEARCH_PATH)
    assert found, f"{name} is not installed on this host; run scripts/setup.sh"
    return found


@pytest.fixture
def ran():
    """Every command the module runs, in order (the commands still run for real)."""
    calls: list[list[str]] = []
    real = _process.set_executor(None)

    def spy(argv, **kwargs):
        calls.append(list(argv))
        return real(argv, **kwargs)

    _process.set_executor(spy)
    yield calls
    _process.set_executor(real)


@pytest.fixture
def rocky_args(tmp_path) -> dict:
    return {"path": str(tmp_path / "root"), "distro": "rocky", "release": "9", "mirror": str(tmp_path / "mirror"),
            "gpg_check": False, "packages": ["hpc-test-release"], "cache_dir": str(tmp_path / "cache")}


def rocky_spec(args: dict, **changes) -> BootstrapSpec:
    args = {**args, **changes}
    return BootstrapSpec(path=args["path"], distro="rocky", release=args["release"], mirror=args["mirror"],
                         packages=tuple(args["packages"]), gpg_check=args["gpg_check"], cache_dir=args["cache_dir"])


def write_record(root: Path, record: dict) -> Path:
    path = root / RECORD_RELPATH
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record), encoding="utf-8")
    return path


def tree(root: Path) -> dict[str, str]:
    """Relative path -> content (or 'dir') of everything below `root`."""
    return {str(p.relative_to(root)): ("dir" if p.is_dir() else p.read_text(encoding="utf-8"))
            for p in sorted(root.rglob("*"))}


# --- check mode ------------------------------------------------------------------------------

def test_check_mode_returns_commands_and_changes_nothing(run_module, ran, rocky_args, tmp_path):
    result, code = run_module(rocky_args, check_mode=True)
    assert code == 0
    expected = [
        host_binary("dnf"), f"--installroot={tmp_path}/root", "--releasever=9", "--setopt=reposdir=/dev/null",
        "--disablerepo=*", f"--repofrompath=hpc-stateless-base,file://{tmp_path}/mirror",
        "--enablerepo=hpc-stateless-base", "--setopt=install_weak_deps=False",
        f"--setopt=cachedir={tmp_path}/cache", "--setopt=keepcache=True", "--nogpgcheck",
        "-y", "install", "hpc-test-release",
    ]
    assert result["changed"] is True
    assert result["cmd"] == expected
    assert result["commands"] == [expected]
    assert result["record"] == bootstrap_record(rocky_spec(rocky_args))
    assert result["diff"] == {"before": {}, "after": result["record"]}
    assert "stdout_lines" not in result
    assert ran == []
    assert sorted(os.listdir(tmp_path)) == []  # neither the root nor the cache directory was created


def test_check_mode_debootstrap_uses_default_mirror(run_module, ran, tmp_path):
    args = {"path": str(tmp_path / "deb"), "distro": "debian", "release": "bookworm", "variant": "minbase",
            "cache_dir": str(tmp_path / "c"), "tool": "debootstrap"}
    result, code = run_module(args, check_mode=True)
    assert code == 0
    assert result["cmd"] == [host_binary("debootstrap"), "--variant=minbase", "--components=main",
                             f"--cache-dir={tmp_path}/c", "bookworm", f"{tmp_path}/deb",
                             "http://deb.debian.org/debian"]
    assert result["record"]["mirror"] == "http://deb.debian.org/debian"
    assert result["record"]["tool_version"] is None
    assert result["record"]["tool"] == "debootstrap"
    assert ran == []
    assert not (tmp_path / "deb").exists()


def test_check_mode_debian_defaults_to_mmdebstrap_as_root(run_module, ran, tmp_path):
    args = {"path": str(tmp_path / "deb"), "distro": "debian", "release": "bookworm", "variant": "minbase",
            "packages": ["python3"], "cache_dir": str(tmp_path / "c")}
    result, code = run_module(args, check_mode=True)
    assert code == 0
    assert result["cmd"][:5] == [host_binary("mmdebstrap"), "--mode=root", "--variant=minbase", "--include=python3",
                                 "--components=main"]
    assert f"-o lowerdir={tmp_path}/c,upperdir={tmp_path}/.builds/bootstrap-" in result["cmd"][9]
    assert result["cmd"][-5:] == ["bookworm", f"{tmp_path}/deb", "deb http://deb.debian.org/debian bookworm main",
                                  "deb http://deb.debian.org/debian bookworm-updates main",
                                  "deb http://deb.debian.org/debian-security bookworm-security main"]
    assert (result["record"]["tool"], result["record"]["mode"]) == ("mmdebstrap", "root")
    assert ran == []


def test_tool_of_another_family_is_refused(run_module, ran, rocky_args):
    result, code = run_module({**rocky_args, "tool": "mmdebstrap"}, check_mode=True)
    assert code == 1
    assert result["msg"] == "tool 'mmdebstrap' cannot bootstrap distro 'rocky'; use one of: dnf"
    assert ran == []


def test_without_root_commands_run_under_buildah_unshare_with_a_user_cache(run_module, ran, tmp_path, monkeypatch):
    """The module's own mode detection, fed a non-root euid: a test double, since these unit tests run as root.
    The real run as an ordinary user is in tests/integration/test_rootfs_rpm.py."""
    monkeypatch.setattr(bootstrap.os, "geteuid", lambda: 1001)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    args = {"path": str(tmp_path / "deb"), "distro": "debian", "release": "bookworm"}
    result, code = run_module(args, check_mode=True)
    assert code == 0
    assert result["cmd"][:4] == [host_binary("buildah"), "unshare", "--", host_binary("mmdebstrap")]
    assert f"-o lowerdir={tmp_path}/xdg/hpc-stateless/debootstrap," in " ".join(result["cmd"])
    assert result["record"]["mode"] == "unshare"
    result, code = run_module({**args, "tool": "debootstrap"}, check_mode=True)
    assert code == 1
    assert result["msg"].startswith("tool debootstrap needs root on the host (it makes device nodes)")
    assert ran == []


def test_check_mode_zypper_with_keyring_lists_every_command(run_module, ran, tmp_path):
    args = {"path": str(tmp_path / "leap"), "distro": "opensuse-leap", "release": "15.6",
            "mirror": "http://mirror.example.org/leap/oss/", "keyring": str(tmp_path / "suse.key"),
            "packages": ["bash"], "cache_dir": str(tmp_path / "zc")}
    result, _code = run_module(args, check_mode=True)
    zypper = [host_binary("zypper"), f"--root={tmp_path}/leap", "--non-interactive", f"--cache-dir={tmp_path}/zc"]
    assert result["commands"] == [
        [host_binary("rpm"), f"--root={tmp_path}/leap", "--import", f"{tmp_path}/suse.key"],
        zypper + ["addrepo", "--refresh", "--keep-packages", "--gpgcheck", "http://mirror.example.org/leap/oss/",
                  "hpc-stateless-base"],
        zypper + ["install", "--no-recommends", "bash"],
    ]
    assert result["cmd"] == result["commands"][-1]
    assert ran == []


def test_variant_with_dnf_warns(run_module, rocky_args):
    result, _code = run_module({**rocky_args, "variant": "minbase"}, check_mode=True)
    assert result["warnings"] == ["variant is ignored for rocky: dnf always installs minimally"]
    assert result["record"]["variant"] is None


def test_lost_and_found_alone_is_an_empty_directory(run_module, rocky_args):
    root = Path(rocky_args["path"])
    (root / "lost+found").mkdir(parents=True)
    result, code = run_module(rocky_args, check_mode=True)
    assert (code, result["changed"]) == (0, True)
    assert "failed" not in result


# --- existing records ------------------------------------------------------------------------

def test_matching_record_runs_nothing(run_module, ran, rocky_args):
    root = Path(rocky_args["path"])
    existing = bootstrap_record(rocky_spec(rocky_args), tool_version="0.0-older-dnf")
    record_file = write_record(root, existing)
    (root / "etc").mkdir()
    (root / "etc" / "hpc-test-release").write_text("1.0\n", encoding="utf-8")
    before = tree(root)
    mtime = record_file.stat().st_mtime_ns

    result, code = run_module(rocky_args)
    assert code == 0
    assert result["changed"] is False
    assert (result["cmd"], result["commands"]) == ([], [])
    assert result["record"] == existing  # the stored record, with the tool version it was made with
    assert "diff" not in result
    assert ran == []
    assert tree(root) == before
    assert record_file.stat().st_mtime_ns == mtime


def test_matching_record_needs_no_tool(run_module, ran, rocky_args, monkeypatch, tmp_path):
    write_record(Path(rocky_args["path"]), bootstrap_record(rocky_spec(rocky_args)))
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    result, code = run_module(rocky_args)
    assert (code, result["changed"]) == (0, False)
    assert ran == []


def test_differing_record_is_refused_with_keys(run_module, ran, rocky_args):
    root = Path(rocky_args["path"])
    existing = bootstrap_record(rocky_spec(rocky_args, release="8", packages=["bash"]))
    write_record(root, existing)
    before = tree(root)

    result, code = run_module(rocky_args)
    assert code == 1
    assert result["failed"] is True
    assert result["differing_keys"] == ["packages", "release"]
    assert result["record"] == existing
    assert f"{root} already holds a different root file system (differs in: packages, release; " in result["msg"]
    assert "release: '8' -> '9'" in result["msg"]
    assert "packages: ['bash'] -> ['hpc-test-release']" in result["msg"]
    assert "force: true" in result["msg"]
    assert ran == []
    assert tree(root) == before


def test_differing_record_with_force_in_check_mode(run_module, ran, rocky_args):
    root = Path(rocky_args["path"])
    existing = bootstrap_record(rocky_spec(rocky_args, release="8"))
    write_record(root, existing)
    (root / "usr").mkdir()
    before = tree(root)

    result, code = run_module({**rocky_args, "force": True}, check_mode=True)
    assert (code, result["changed"]) == (0, True)
    assert result["diff"] == {"before": existing, "after": bootstrap_record(rocky_spec(rocky_args))}
    assert "--releasever=9" in result["cmd"]
    assert ran == []
    assert tree(root) == before  # check mode wipes nothing


def test_tool_version_change_alone_is_not_a_difference(run_module, rocky_args):
    record = bootstrap_record(rocky_spec(rocky_args), tool_version="1.0")
    write_record(Path(rocky_args["path"]), {**record, "tool_version": "99.0", "tool": "dnf"})
    result, code = run_module(rocky_args)
    assert (code, result["changed"], result["record"]["tool_version"]) == (0, False, "99.0")


def test_unreadable_record_is_refused(run_module, rocky_args):
    root = Path(rocky_args["path"])
    (root / RECORD_RELPATH).parent.mkdir(parents=True)
    (root / RECORD_RELPATH).write_text("[1, 2", encoding="utf-8")
    result, code = run_module(rocky_args)
    assert code == 1
    assert result["msg"].startswith(f"cannot read the bootstrap record {root}/{RECORD_RELPATH}: ")

    (root / RECORD_RELPATH).write_text("[1, 2]", encoding="utf-8")
    result, _code = run_module(rocky_args)
    assert "not a JSON object" in result["msg"]

    result, code = run_module({**rocky_args, "force": True}, check_mode=True)
    assert (code, result["changed"], result["diff"]["before"]) == (0, True, {})


# --- refusals --------------------------------------------------------------------------------

def test_non_empty_directory_without_record_is_refused(run_module, ran, rocky_args):
    root = Path(rocky_args["path"])
    (root / "etc").mkdir(parents=True)
    (root / "stray.txt").write_text("keep me\n", encoding="utf-8")
    (root / "lost+found").mkdir()
    result, code = run_module(rocky_args)
    assert code == 1
    assert result["msg"].startswith(f"refusing to bootstrap into {root}: it is not empty and holds no bootstrap "
                                    f"record ({RECORD_RELPATH}); found: etc, stray.txt. ")
    assert ran == []
    assert (root / "stray.txt").read_text(encoding="utf-8") == "keep me\n"


def test_non_empty_directory_with_force_in_check_mode(run_module, rocky_args):
    root = Path(rocky_args["path"])
    root.mkdir()
    (root / "stray.txt").write_text("x", encoding="utf-8")
    result, code = run_module({**rocky_args, "force": True}, check_mode=True)
    assert (code, result["changed"]) == (0, True)
    assert (root / "stray.txt").exists()


@pytest.mark.parametrize("path", ["/", "//", "/usr/.."])
def test_path_root_is_refused(run_module, ran, rocky_args, path):
    result, code = run_module({**rocky_args, "path": path})
    assert code == 1
    assert result["msg"] == "path must not be / : the rootfs module never bootstraps over the build host"
    assert ran == []


def test_symlink_to_root_is_refused(run_module, rocky_args, tmp_path):
    (tmp_path / "alias").symlink_to("/")
    result, code = run_module({**rocky_args, "path": str(tmp_path / "alias")})
    assert code == 1
    assert result["msg"].startswith("path must not be /")


@pytest.mark.parametrize(("distro", "binary"), [("rocky", "dnf"), ("opensuse-leap", "zypper")])
def test_missing_tool_names_debian_package(run_module, ran, rocky_args, monkeypatch, tmp_path, distro, binary):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # the tools live in /usr/bin; /usr/sbin etc. stay searched
    result, code = run_module({**rocky_args, "distro": distro}, check_mode=True)
    assert code == 1
    assert result["msg"] == (f"{binary} is not installed on the build host (needed for distro {distro}); "
                             f"install the Debian package '{binary}', e.g. apt-get install {binary}.")
    assert ran == []
    assert not Path(rocky_args["path"]).exists()


def test_missing_mirror_for_rpm_distro(run_module, rocky_args):
    result, code = run_module({key: value for key, value in rocky_args.items() if key != "mirror"})
    assert code == 1
    assert result["msg"].startswith("mirror is required for distro 'rocky'")


def test_a_foreign_arch_with_zypper_fails_cleanly(run_module, rocky_args):
    result, code = run_module({**rocky_args, "distro": "opensuse-leap", "arch": "aarch64"}, check_mode=True)
    assert code == 1
    assert result["msg"].startswith("arch aarch64 is not supported for zypper-family distros")


def test_unknown_distro_is_rejected_by_argument_spec(run_module, rocky_args):
    result, code = run_module({**rocky_args, "distro": "gentoo"})
    assert code == 1
    assert "value of distro must be one of: almalinux, centos, debian, fedora, ol, opensuse-leap" in result["msg"]


def test_argument_spec_choices_follow_the_distro_table():
    from ansible_collections.hpc.stateless.plugins.module_utils._layers.graph import SUPPORTED_DISTROS
    assert rootfs.argument_spec()["distro"]["choices"] == sorted(SUPPORTED_DISTROS)


# --- the bootstrap option: the layer's whole bootstrap mapping ------------------------------------

def test_the_plans_bootstrap_mapping_runs_as_the_options_it_holds(run_module, ran, tmp_path):
    """What playbooks/tasks/build_layer.yml passes: the layer's bootstrap as the plan normalised it."""
    from ansible_collections.hpc.stateless.plugins.module_utils._layers.graph import LayerGraph
    layers = {"base": {"bootstrap": {"distro": "debian", "release": "bookworm", "variant": "minbase",
                                     "packages": ["python3"], "extra_args": "--aptopt='Acquire::Retries \"3\"'"}}}
    planned = LayerGraph.from_spec(layers).spec("base")["bootstrap"]
    common = {"path": str(tmp_path / "deb"), "cache_dir": str(tmp_path / "c")}
    by_mapping, code = run_module({**common, "bootstrap": planned}, check_mode=True)
    assert code == 0, by_mapping
    by_options, code = run_module({**common, **planned}, check_mode=True)
    assert code == 0, by_options
    assert {**by_mapping, "invocation": None} == {**by_options, "invocation": None}
    # python3 listed: the plan adds apt's binding (ANSIBLE_BINDINGS)
    assert by_mapping["cmd"][:4] == [host_binary("mmdebstrap"), "--mode=root", "--variant=minbase",
                                     "--include=python3,python3-apt"]
    assert '--aptopt=Acquire::Retries "3"' in by_mapping["cmd"]
    assert ran == []


def test_the_bootstrap_mapping_takes_the_options_defaults(run_module, ran, rocky_args):
    mapping = {key: rocky_args[key] for key in ("mirror", "gpg_check", "packages")}
    by_mapping, code = run_module({"path": rocky_args["path"], "cache_dir": rocky_args["cache_dir"],
                                   "bootstrap": {"distro": "rocky", "release": "9", "variant": None, **mapping}},
                                  check_mode=True)
    assert code == 0, by_mapping
    assert {**by_mapping, "invocation": None} == {**run_module(rocky_args, check_mode=True)[0], "invocation": None}
    assert by_mapping["record"] == bootstrap_record(rocky_spec(rocky_args))
    assert ran == []


@pytest.mark.parametrize("args, message", [
    ({"bootstrap": {"distro": "rocky", "release": "9"}, "release": "9"},
     "parameters are mutually exclusive: bootstrap|release"),
    ({"bootstrap": {"distro": "rocky", "release": "9"}, "packages": []},
     "parameters are mutually exclusive: bootstrap|packages"),
    ({"bootstrap": {"distro": "rocky", "release": "9", "pakages": ["bash"]}}, "bootstrap.pakages"),
    ({"bootstrap": {"distro": "rocky"}}, "missing required arguments: release found in bootstrap"),
    ({"bootstrap": {"distro": "gentoo", "release": "1"}}, "value of distro must be one of: almalinux"),
    ({"bootstrap": {"distro": "rocky", "release": "9", "gpg_check": "maybe"}}, "gpg_check"),
    ({}, "one of the following is required: bootstrap, distro"),
    ({"distro": "rocky"}, "parameters are required together: distro, release"),
])
def test_bad_bootstrap_input_is_refused_before_anything_runs(run_module, ran, tmp_path, args, message):
    result, code = run_module({"path": str(tmp_path / "root"), **args}, check_mode=True)
    assert code == 1
    assert message in result["msg"]
    assert ran == []


def test_the_bootstrap_options_follow_the_inventory_schema():
    """One table (_contract/inventory.py) gives the layer's bootstrap keys and the module's options."""
    from ansible_collections.hpc.stateless.plugins.module_utils._contract.inventory import (
        BOOTSTRAP_KEYS, BOOTSTRAP_REQUIRED)
    spec = rootfs.argument_spec()
    assert set(spec["bootstrap"]["options"]) == set(BOOTSTRAP_KEYS) < set(spec)
    for key in BOOTSTRAP_KEYS:
        top, sub = dict(spec[key]), dict(spec["bootstrap"]["options"][key])
        assert sub.pop("required", False) is (key in BOOTSTRAP_REQUIRED)
        assert top.pop("required", False) is False
        assert top == sub
    assert spec["keyring"]["type"] == "path" and spec["extra_args"] == {"type": "list", "elements": "str", "default": []}


def _documented(options: dict) -> dict:
    """DOCUMENTATION's options in argument_spec terms (type, elements, default, choices, required, suboptions)."""
    spec = {}
    for name, doc in options.items():
        entry = {key: doc[key] for key in ("type", "elements", "default", "choices") if key in doc}
        entry["required"] = doc.get("required", False)
        if "suboptions" in doc:
            entry["options"] = _documented(doc["suboptions"])
        spec[name] = entry
    return spec


def _declared(spec: dict) -> dict:
    return {name: {**{key: value for key, value in entry.items() if key not in ("no_log", "options")},
                   "required": entry.get("required", False),
                   **({"options": _declared(entry["options"])} if "options" in entry else {})}
            for name, entry in spec.items()}


def test_documentation_states_the_argument_spec():
    """The bootstrap options are derived from the inventory schema; DOCUMENTATION must still say the same."""
    import yaml
    assert _documented(yaml.safe_load(rootfs.DOCUMENTATION)["options"]) == _declared(rootfs.argument_spec())


# --- the package cache lock ------------------------------------------------------------------

def test_cache_lock_holds_the_cache_for_one_bootstrap_at_a_time(tmp_path):
    """A second bootstrap on the same cache (another process: flock locks are per open file) waits."""
    probe = [sys.executable, "-c", "import fcntl, sys; h = open(sys.argv[1], 'a'); "
             "fcntl.flock(h.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)", str(tmp_path / bootstrap.CACHE_LOCK_NAME)]
    with bootstrap.cache_lock(str(tmp_path)):
        held = subprocess.run(probe, capture_output=True, text=True, check=False, timeout=30)
    assert held.returncode != 0 and "BlockingIOError" in held.stderr
    assert subprocess.run(probe, check=False, timeout=30).returncode == 0


# --- as a script -----------------------------------------------------------------------------

def test_module_runs_as_a_script(rocky_args, tmp_path):
    """The module file itself, run the way Ansible's ``-m`` debugging does, in check mode."""
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {**rocky_args, "_ansible_check_mode": True}}))
    env = {**os.environ, "PYTHONPATH": str(REPO / ".collections")}
    proc = subprocess.run([sys.executable, "-m", "ansible_collections.hpc.stateless.plugins.modules.rootfs",
                           str(args_file)], capture_output=True, text=True, env=env, check=False, timeout=60)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["changed"] is True
    assert result["cmd"][-3:] == ["-y", "install", "hpc-test-release"]
    assert not Path(rocky_args["path"]).exists()
