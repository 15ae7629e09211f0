"""Pure logic of the nspawn connection: command lines, parsing, root checks, session identity.

Nothing here starts systemd-nspawn; the real boots are in tests/integration/test_nspawn*.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
import yaml
from ansible import constants as C
from ansible.playbook.play_context import PlayContext

from ansible_collections.hpc.stateless.plugins.connection import nspawn as nspawn_plugin
from ansible_collections.hpc.stateless.plugins.module_utils._process import Result, set_executor
from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.cgroups import (
    cgroup_dirs,
    cgroup_dirs_of,
    cgroup_pids,
    in_cgroups_argv,
    remove_cgroups,
    session_cgroups,
)
from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.commands import (
    NspawnError,
    console_tail,
    machine_name,
    network_args,
    nsenter_argv,
    nspawn_boot_argv,
    nspawn_command_argv,
    parse_job_list,
    parse_notify,
    parse_unit_list,
    strip_noise,
)
from ansible_collections.hpc.stateless.plugins.module_utils._nspawn import overlay
from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.container import (
    container_name,
    container_stem,
    mount_image,
    remove_container,
    userns_range,
)
from ansible_collections.hpc.stateless.plugins.module_utils._build import idshift
from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.overlay import (
    mount_overlay,
    overlay_options,
    unmount_overlay,
)
from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.process import (
    owner_process,
    process_alive,
    process_start,
)
from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.root import (
    check_root,
    find_systemd,
    lookup_user,
    resolve_in_root,
)
from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.spec import SessionSpec
from ansible_collections.hpc.stateless.plugins.module_utils._paths import runtime_path
from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.supervisor import COLLECTIONS_ROOT, launch_command

# ---------------------------------------------------------------- command lines (table driven)
COMMAND_LINES = [
    pytest.param(
        lambda: nspawn_command_argv("/usr/bin/systemd-nspawn", "/r", "m-1", ["/bin/sh", "-c", "true"]),
        ["/usr/bin/systemd-nspawn", "--quiet", "--pipe", "--as-pid2", "--register=no", "--keep-unit",
         "--directory=/r", "--machine=m-1", "--", "/bin/sh", "-c", "true"],
        id="directory-mode-minimal"),
    pytest.param(
        lambda: nspawn_command_argv("nspawn", "/r", "m", ["id"], hostname="c1", network="private",
                                    extra_args=["--bind-ro=/a:/b"], user="tester"),
        ["nspawn", "--quiet", "--pipe", "--as-pid2", "--register=no", "--keep-unit", "--directory=/r",
         "--machine=m", "--hostname=c1", "--private-network", "--bind-ro=/a:/b", "--user=tester", "--", "id"],
        id="directory-mode-user-network-extra"),
    pytest.param(
        lambda: nspawn_command_argv("nspawn", "/r", "m", ["id"], user="root"),
        ["nspawn", "--quiet", "--pipe", "--as-pid2", "--register=no", "--keep-unit", "--directory=/r",
         "--machine=m", "--", "id"],
        id="directory-mode-root-needs-no-user-flag"),
    pytest.param(
        lambda: nspawn_boot_argv("nspawn", "/r", "m", hostname="ctl", network="/run/netns/x",
                                 extra_args=["--load-credential=munge.key:/k"],
                                 binds_ro=[("/s/hostname", "/etc/hostname")]),
        ["nspawn", "--quiet", "--boot", "--register=no", "--keep-unit", "--notify-ready=yes",
         "--console=read-only", "--directory=/r", "--machine=m", "--hostname=ctl",
         "--bind-ro=/s/hostname:/etc/hostname", "--network-namespace-path=/run/netns/x",
         "--load-credential=munge.key:/k"],
        id="booted-mode"),
    pytest.param(
        lambda: nspawn_boot_argv("nspawn", "/r", "m"),
        ["nspawn", "--quiet", "--boot", "--register=no", "--keep-unit", "--notify-ready=yes",
         "--console=read-only", "--directory=/r", "--machine=m", "--private-network"],
        id="booted-mode-private-network-by-default"),
    pytest.param(
        lambda: nsenter_argv("/usr/bin/nsenter", 4242, ["/bin/sh", "-c", "id"]),
        ["/usr/bin/nsenter", "--target=4242", "--mount", "--uts", "--ipc", "--net", "--pid", "--cgroup",
         "--root", "--wd", "--", "/bin/sh", "-c", "id"],
        id="nsenter-root"),
    pytest.param(
        lambda: nsenter_argv("nsenter", 7, ["id"], uid=1000, gid=100),
        ["nsenter", "--target=7", "--mount", "--uts", "--ipc", "--net", "--pid", "--cgroup", "--root", "--wd",
         "--setuid=1000", "--setgid=100", "--", "id"],
        id="nsenter-user"),
    pytest.param(
        lambda: nsenter_argv("nsenter", 7, ["id"], user_ns=True),
        ["nsenter", "--target=7", "--user", "--mount", "--uts", "--ipc", "--net", "--pid", "--cgroup", "--root",
         "--wd", "--", "id"],
        id="nsenter-joins-the-user-namespace"),
    pytest.param(
        lambda: nspawn_boot_argv("nspawn", "/r", "m", extra_args=["--bind=/s/k:/etc/k", "--bind-ro=/l",
                                                                  "--bind-ro=/o:/p:norbind", "--tmpfs=/x"],
                                 binds_ro=[("/s/hostname", "/etc/hostname")], private_users=(165536, 65536)),
        ["nspawn", "--quiet", "--boot", "--register=no", "--keep-unit", "--notify-ready=yes",
         "--console=read-only", "--directory=/r", "--machine=m", "--bind-ro=/s/hostname:/etc/hostname:idmap",
         "--private-network", "--private-users=165536:65536", "--private-users-ownership=off",
         "--bind=/s/k:/etc/k:idmap", "--bind-ro=/l:/l:idmap", "--bind-ro=/o:/p:norbind", "--tmpfs=/x"],
        id="booted-mode-in-a-user-namespace-binds-idmapped"),
    pytest.param(
        lambda: nspawn_command_argv("nspawn", "/r", "m", ["id"], extra_args=["--bind-ro=/a\\:b:/c"],
                                    private_users=(165536, 65536)),
        ["nspawn", "--quiet", "--pipe", "--as-pid2", "--register=no", "--keep-unit", "--directory=/r",
         "--machine=m", "--private-users=165536:65536", "--private-users-ownership=off",
         "--bind-ro=/a\\:b:/c:idmap", "--", "id"],
        id="directory-mode-in-a-user-namespace"),
]


@pytest.mark.parametrize(("build", "expected"), COMMAND_LINES)
def test_command_lines(build, expected):
    assert build() == expected


@pytest.mark.parametrize(("network", "expected"), [
    ("host", []),
    ("private", ["--private-network"]),
    ("/run/netns/hpc-slurm", ["--network-namespace-path=/run/netns/hpc-slurm"]),
])
def test_network_args(network, expected):
    assert network_args(network) == expected


def test_network_rejects_other_values():
    with pytest.raises(NspawnError, match="network must be 'host', 'private' or the path"):
        network_args("bridge")


def test_overlay_options_escape_separators():
    assert overlay_options("/a,b:c", "/u", "/w\\x") == "lowerdir=/a\\,b\\:c,upperdir=/u,workdir=/w\\\\x"


# ---------------------------------------------------------------- names and identity
@pytest.mark.parametrize(("host", "salt", "expected"), [
    ("compute", "", "compute"),
    ("Slurm_Ctl.example", "", "slurm-ctl-example"),
    ("___", "", "host"),
    ("c1", "0123456789abcdef", "c1-01234567"),
])
def test_machine_name(host, salt, expected):
    assert machine_name(host, salt) == expected


def test_container_names_depend_on_the_runtime_dir():
    stem = container_stem("/var/tmp/hpc-nspawn")
    assert stem.startswith("hpc-stateless-nspawn-") and stem.endswith("-")
    assert len(stem) == len("hpc-stateless-nspawn-") + 7
    assert container_stem("/var/tmp/hpc-nspawn/") == stem
    assert container_stem("/var/tmp/other") != stem


def test_machine_name_is_at_most_64_characters():
    name = machine_name("x" * 100, "f" * 16)
    assert len(name) == 64
    assert name.endswith("-ffffffff")


def spec(**kwargs) -> SessionSpec:
    defaults = dict(host="c1", image="localhost/p/slurm:latest", owner_pid=1234, owner_start="99")
    defaults.update(kwargs)
    return SessionSpec(**defaults)


def test_an_image_session_s_container_is_named_by_runtime_dir_and_session():
    session = spec(runtime_dir="/var/tmp/hpc-nspawn")
    name = container_name(session)
    assert name == container_stem("/var/tmp/hpc-nspawn") + session.id
    assert container_name(spec(runtime_dir="/var/tmp/hpc-nspawn", host="c2")) != name


@pytest.fixture()
def executor(monkeypatch):
    """Commands are recorded, not run: ``calls`` holds (argv, env, timeout), ``answers`` the
    (rc, stdout, stderr) of each call in turn (default: success). Sleeps between retries are skipped."""
    calls = []
    answers = []

    def fake(argv, *, env, timeout, input, cwd, text):  # noqa: A002 - the executor's signature
        calls.append((argv, env, timeout))
        rc, out, err = answers.pop(0) if answers else (0, "", "")
        return Result(argv, rc, out, err)

    old = set_executor(fake)
    monkeypatch.setattr("time.sleep", lambda _seconds: None)
    yield calls, answers
    set_executor(old)


def buildah_args(calls) -> list:
    """The buildah arguments of recorded calls (the stand-in executable dropped)."""
    return [argv[1:] for argv, _env, _timeout in calls]


def test_an_image_session_mounts_a_fresh_working_container(executor):
    calls, answers = executor
    answers.extend([(125, "", "no container with name or ID x found"), (0, "w\n", ""), (0, "/mnt/w\n", "")])
    assert mount_image(spec(buildah="/bin/true"), "w") == "/mnt/w"
    assert buildah_args(calls) == [["rm", "w"], ["from", "--pull=never", "--quiet", "--name", "w",
                                                 "localhost/p/slurm:latest"], ["mount", "w"]]


def test_an_image_in_a_user_namespace_is_mounted_with_the_mapping_and_its_root_given_to_mapped_root(
        executor, monkeypatch):
    calls, answers = executor
    answers.extend([(0, "", ""), (0, "w\n", ""), (0, "/mnt/w\n", "")])
    chowned = []
    monkeypatch.setattr(os, "chown", lambda path, uid, gid, follow_symlinks=True: chowned.append(
        (path, uid, gid, follow_symlinks)))
    assert mount_image(spec(buildah="/bin/true"), "w", (165536, 65536)) == "/mnt/w"
    assert buildah_args(calls)[1] == ["from", "--pull=never", "--quiet", "--userns-uid-map", "0:165536:65536",
                                      "--userns-gid-map", "0:165536:65536", "--name", "w", "localhost/p/slurm:latest"]
    assert chowned == [("/mnt/w", 165536, 165536, False)]


def test_userns_range_is_roots_subordinate_range_and_refuses_a_mismatch(monkeypatch):
    ranges = {"uid": idshift.IdRange(165536, 65536), "gid": idshift.IdRange(165536, 65536)}
    monkeypatch.setattr(idshift, "root_ranges", lambda: (ranges["uid"], ranges["gid"]))
    assert userns_range() == (165536, 65536)
    ranges["gid"] = idshift.IdRange(231072, 65536)
    with pytest.raises(NspawnError, match=r"root's subordinate uids \(165536, 65536 ids\) and gids \(231072"):
        userns_range()

    def missing():
        raise idshift.IdShiftError("root has no range of 65536: add the line 'root:165536:65536' to /etc/subuid")
    monkeypatch.setattr(idshift, "root_ranges", missing)
    with pytest.raises(NspawnError, match=r"add the line 'root:165536:65536' to /etc/subuid; or boot unmapped with "
                                          r"ansible_nspawn_userns: false"):
        userns_range()


def test_a_directory_root_cannot_be_mapped():
    with pytest.raises(NspawnError, match=r"ansible_nspawn_userns .* needs ansible_nspawn_image; the directory tree "
                                          r"/srv/tree cannot be mapped"):
        spec(image=None, root="/srv/tree", userns=True)


def test_a_missing_image_says_build_it_first(executor):
    _calls, answers = executor
    answers.extend([(0, "", ""), (125, "", "localhost/p/slurm:latest: image not known")])
    with pytest.raises(NspawnError, match=r"image localhost/p/slurm:latest is not in local containers-storage: build"):
        mount_image(spec(buildah="/bin/true"), "w")
    with pytest.raises(NspawnError, match=r"^/nonexistent/buildah is not installed on this host; install it"):
        mount_image(spec(buildah="/nonexistent/buildah"), "w")


def test_removing_a_working_container(executor):
    calls, answers = executor
    session = spec(buildah="/bin/true")
    answers.append((125, "", "container not known"))
    assert remove_container(session, "w") is None  # gone already
    answers.extend([(1, "", "busy")] * 2)
    assert remove_container(session, "w") is None  # removed on the third attempt
    answers.extend([(1, "", "device or resource busy")] * 5)
    assert remove_container(session, "w") == "buildah working container w could not be removed: device or resource busy"
    assert buildah_args(calls) == [["rm", "w"]] * 9
    assert remove_container(spec(buildah="/nonexistent/buildah"), "w").startswith(
        "buildah working container w: /nonexistent/buildah is not installed")


def test_session_id_is_stable_and_depends_on_identity():
    assert spec().id == spec().id
    assert len(spec().id) == 16
    others = {spec(host="c2").id, spec(boot=True).id, spec(owner_pid=1235).id, spec(owner_start="100").id,
              spec(hostname="other").id, spec(extra_args=["--bind-ro=/a:/b"]).id,
              spec(image="localhost/p/slurm:abc").id, spec(userns=True).id}
    assert spec().id not in others
    assert len(others) == 8


def test_session_id_ignores_timeouts_and_executables():
    assert spec(boot_timeout=5, stop_timeout=1, nspawn="/opt/nspawn").id == spec().id


def test_spec_round_trips_through_json_dict():
    original = spec(boot=True, extra_args=["--bind-ro=/k:/etc/munge/munge.key"], network="/run/netns/t", userns=True)
    copy = SessionSpec.from_dict(original.to_dict())
    assert copy.to_dict() == original.to_dict()
    assert copy.id == original.id


@pytest.mark.parametrize(("kwargs", "network", "supervised"), [
    (dict(boot=True), "private", True),
    (dict(boot=False), "host", True),  # an image needs its working container kept
    (dict(image=None, root="/srv/tree", ephemeral=True), "host", True),  # the overlay must outlive a task
    (dict(image=None, root="/srv/tree", ephemeral=False), "host", False),
    (dict(boot=True, network="host"), "host", True),
])
def test_spec_defaults(kwargs, network, supervised):
    made = spec(**kwargs)
    assert made.network == network
    assert made.needs_supervisor is supervised
    assert made.hostname == "c1"
    assert made.machine.startswith("c1-")


@pytest.mark.parametrize("kwargs", [dict(image=None), dict(root="/srv/tree")])
def test_spec_needs_exactly_one_of_root_and_image(kwargs):
    with pytest.raises(NspawnError, match="set exactly one of ansible_nspawn_root"):
        spec(**kwargs)


# ---------------------------------------------------------------- parsing tool output
def test_parse_notify():
    fields = parse_notify(b"STATUS=Container running.\nX_NSPAWN_LEADER_PID=29061")
    assert fields == {"STATUS": "Container running.", "X_NSPAWN_LEADER_PID": "29061"}
    assert parse_notify(b"READY=1\n") == {"READY": "1"}
    assert parse_notify(b"garbage\n") == {}


def test_parse_unit_list_with_and_without_markers():
    text = ("broken.service loaded failed failed Always fails\n"
            "● munge.service loaded failed failed MUNGE authentication service\n"
            "\n")
    assert parse_unit_list(text) == ["broken.service", "munge.service"]


def test_parse_job_list():
    text = ("131 systemd-update-utmp-runlevel.service start waiting\n"
            "118 hang.service                         start running\n")
    assert parse_job_list(text) == ["systemd-update-utmp-runlevel.service (start, waiting)",
                                    "hang.service (start, running)"]


def test_strip_noise_removes_only_the_propagation_warning():
    err = (b'real error\nAttempted to remove disk file system under "/run/systemd/nspawn/propagate/c1-ab", '
           b"and we can't allow that.\nlast line\n")
    assert strip_noise(err) == b"real error\nlast line\n"


def test_console_tail_drops_colours_and_keeps_the_end():
    text = "".join(f"\x1b[0;32m  OK  \x1b[0m] line {i}\r\n" for i in range(30))
    tail = console_tail(text, lines=3)
    assert tail == "  OK  ] line 27\n  OK  ] line 28\n  OK  ] line 29"


PASSWD = "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n" \
         "slurm:x:64030:64030::/nonexistent:/bin/false\nbroken-line\n"


@pytest.mark.parametrize(("user", "expected"), [
    ("slurm", (64030, 64030, "/nonexistent")),
    ("65534", (65534, 65534, "/nonexistent")),
    ("absent", None),
])
def test_lookup_user(user, expected):
    assert lookup_user(PASSWD, user) == expected


# ---------------------------------------------------------------- root checks on small trees
def make_tree(root, files=(), links=()):
    for path in files:
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("#!/bin/sh\n")
        target.chmod(0o755)
    for path, dest in links:
        link = root / path.lstrip("/")
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(dest, link)
    return root


def test_resolve_in_root_keeps_absolute_links_inside(tmp_path):
    root = make_tree(tmp_path / "r", files=["/usr/bin/dash", "/usr/lib/systemd/systemd"],
                     links=[("/bin", "usr/bin"), ("/usr/bin/sh", "/bin/dash"), ("/sbin/init", "/lib/systemd/systemd"),
                            ("/lib", "usr/lib"), ("/etc/escape", "/../../../../etc/passwd")])
    assert resolve_in_root(str(root), "/bin/sh") == str(root / "usr/bin/dash")
    assert resolve_in_root(str(root), "/sbin/init") == str(root / "usr/lib/systemd/systemd")
    # '..' stops at the container's root, so a link cannot reach the host's /etc/passwd
    assert resolve_in_root(str(root), "/etc/escape") is None
    assert resolve_in_root(str(root), "/missing/file") is None


def test_resolve_in_root_gives_up_on_link_loops(tmp_path):
    root = make_tree(tmp_path / "r", links=[("/a", "/b"), ("/b", "/a")])
    assert resolve_in_root(str(root), "/a") is None


def test_check_root_accepts_a_bootable_tree(tmp_path):
    root = make_tree(tmp_path / "r", files=["/bin/sh", "/lib/systemd/systemd"])
    check_root(str(root), boot=True)
    assert find_systemd(str(root)) == "/lib/systemd/systemd"


@pytest.mark.parametrize(("files", "links", "boot", "message"), [
    (None, [], False, r"root .*/r does not exist: build the layer first"),
    ([], [], False, r"has no /bin/sh: it is not an OS tree"),
    (["/bin/sh"], [], True, r"has no systemd \(/usr/lib/systemd/systemd and /lib/systemd/systemd are missing, "
                            r"/sbin/init is missing\): it cannot be booted"),
    (["/bin/sh", "/bin/busybox"], [("/sbin/init", "/bin/busybox")], True, r"/sbin/init is /bin/busybox\)"),
    (["/bin/sh"], [], False, None),
])
def test_check_root_errors(tmp_path, files, links, boot, message):
    root = tmp_path / "r"
    if files is not None:
        root.mkdir()
        make_tree(root, files=files, links=links)
    if message is None:
        check_root(str(root), boot=boot)
        return
    with pytest.raises(NspawnError, match=message):
        check_root(str(root), boot=boot)


def test_check_root_rejects_a_file(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(NspawnError, match="is not a directory"):
        check_root(str(tmp_path / "f"), boot=False, label="image x (mounted at /m)")


# ---------------------------------------------------------------- processes
def test_process_alive_checks_the_start_time():
    start = process_start(os.getpid())
    assert start is not None
    assert process_alive(os.getpid(), start)
    assert not process_alive(os.getpid(), "1")  # a recycled pid has another start time
    assert not process_alive(None)


def test_a_zombie_is_not_alive():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    # Wait for the exit without reaping it: the child stays a zombie until child.wait().
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
    with open(f"/proc/{child.pid}/stat", encoding="utf-8") as handle:
        assert handle.read().rsplit(")", 1)[1].split()[0] == "Z"
    try:
        assert not process_alive(child.pid)
        assert process_start(child.pid) is None
    finally:
        child.wait()


def test_owner_process_is_the_caller_outside_a_worker():
    assert owner_process() == os.getpid()


# ---------------------------------------------------------------- the supervisor and the overlay
def test_the_supervisor_starts_by_module_name_from_the_collections_root(monkeypatch):
    monkeypatch.delenv("PYTHONPATH", raising=False)
    argv, env = launch_command("/run/session", {"nspawn": "/n", "nsenter": "/e", "buildah": "/b"})
    assert argv[1:] == ["-m", "ansible_collections.hpc.stateless.plugins.module_utils._nspawn.supervisor",
                        "supervise", "/run/session", "/n", "/e", "/b"]
    assert env["PYTHONPATH"] == COLLECTIONS_ROOT and env["LANG"] == "C.UTF-8"
    # Importable by that name from that root alone (not from the current directory): without
    # arguments the module prints its usage instead of supervising.
    proc = subprocess.run(argv[:3], env=env, cwd="/", capture_output=True, text=True, check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == f"usage: python -m {argv[2]} supervise SESSION_DIR NSPAWN NSENTER BUILDAH\n"


def test_mount_overlay_runs_mount_with_escaped_options_and_the_host_env(executor):
    calls, answers = executor
    answers.append((32, "", "mount: wrong fs type"))
    rc, _out, err = mount_overlay("/images/a,b", "/s/upper", "/s/work", "/s/root")
    assert (rc, err) == (32, "mount: wrong fs type")
    argv, env, timeout = calls[0]
    assert argv == ["mount", "-t", "overlay", "overlay", "-o",
                    "lowerdir=/images/a\\,b,upperdir=/s/upper,workdir=/s/work", "/s/root"]
    assert set(env) == {"PATH", "LANG", "LC_ALL"} and env["LC_ALL"] == "C.UTF-8"
    assert timeout == 30.0


def test_a_busy_overlay_is_retried_then_detached_lazily(executor, monkeypatch):
    calls, answers = executor
    monkeypatch.setattr(overlay, "is_mounted", lambda _path: True)
    answers.extend([(32, "", "umount: /s/root: target is busy.")] * 20)
    problem = unmount_overlay("/s/root")
    assert [c[0] for c in calls] == [["umount", "/s/root"]] * 20 + [["umount", "--lazy", "/s/root"]]
    assert problem == "overlay /s/root was busy and was detached lazily: umount: /s/root: target is busy."


def test_an_overlay_unmounted_on_a_later_attempt_is_no_problem(executor, monkeypatch):
    calls, answers = executor
    monkeypatch.setattr(overlay, "is_mounted", lambda _path: True)
    answers.extend([(32, "", "busy"), (0, "", "")])
    assert unmount_overlay("/s/root") is None
    assert len(calls) == 2


# ---------------------------------------------------------------- the plugin's options
PLUGIN = "hpc.stateless.nspawn"


def new_connection():
    """The plugin with its option definitions registered, as Ansible's plugin loader does.

    (The loader itself cannot be used here: pytest already imported ansible_collections as a
    plain namespace package, which Ansible's collection finder refuses to take over.)
    """
    C.config.initialize_plugin_configuration_definitions(
        "connection", PLUGIN, yaml.safe_load(nspawn_plugin.DOCUMENTATION)["options"])
    conn = nspawn_plugin.Connection(PlayContext(), None)
    conn._load_name = PLUGIN
    return conn


def load_connection(**var_options):
    conn = new_connection()
    conn.set_options(var_options=var_options)
    return conn


def test_plugin_options_come_from_variables():
    conn = load_connection(inventory_hostname="c1", ansible_nspawn_image="localhost/p/slurm:latest",
                           ansible_nspawn_boot=True, ansible_nspawn_extra_args=["--bind-ro=/k:/k"],
                           ansible_nspawn_boot_timeout="12.5")
    assert conn.get_option("remote_addr") == "c1"
    assert conn.get_option("image") == "localhost/p/slurm:latest"
    assert conn.get_option("boot") is True
    assert conn.get_option("extra_args") == ["--bind-ro=/k:/k"]
    assert conn.get_option("boot_timeout") == 12.5


def test_plugin_defaults():
    conn = load_connection(inventory_hostname="c1", ansible_nspawn_root="/srv/tree")
    assert conn.get_option("boot") is False
    assert conn.get_option("ephemeral") is True
    assert conn.get_option("stop_on_close") is False
    assert conn.get_option("runtime_dir") is None  # the session's default: a directory only root can write
    assert SessionSpec("c1", root="/srv/tree").runtime_dir == runtime_path("nspawn")
    assert conn.get_option("executable") == "/bin/sh"
    assert conn.transport == "hpc.stateless.nspawn"


def test_plugin_reports_a_missing_executable():
    from ansible.errors import AnsibleConnectionFailure

    conn = load_connection(inventory_hostname="c1", ansible_nspawn_root="/srv/tree",
                           ansible_nspawn_exe="/nonexistent/systemd-nspawn")
    expected = r"/nonexistent/systemd-nspawn is not installed on the controller .*install the package systemd-container"
    with pytest.raises(AnsibleConnectionFailure, match=expected):
        conn._spec()


@pytest.mark.parametrize(("path", "expected"), [("tmp/x", "/tmp/x"), ("/a/../b", "/b"), ("/etc/hosts", "/etc/hosts")])
def test_relative_paths_start_at_the_container_root(path, expected):
    assert nspawn_plugin.Connection._container_path(path) == expected


# ---------------------------------------------------------------- cgroups of a session
PROC_CGROUP_HYBRID = """9:name=systemd:/
8:pids:/
4:memory:/process_api/beafd145
1:cpu:/
0::/
"""
MOUNTINFO_HYBRID = """\
30 25 0:26 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
31 30 0:27 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 30 0:35 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 30 0:36 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""


def test_cgroup_dirs_on_a_hybrid_host_without_systemd():
    assert cgroup_dirs(PROC_CGROUP_HYBRID, MOUNTINFO_HYBRID, "hpc-nspawn-abc") == [
        "/sys/fs/cgroup/systemd/hpc-nspawn-abc", "/sys/fs/cgroup/unified/hpc-nspawn-abc"]


def test_cgroup_dirs_on_a_unified_host_below_the_callers_unit():
    mountinfo = "35 24 0:30 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
    own = "0::/system.slice/ci-runner.service\n"
    assert cgroup_dirs(own, mountinfo, "hpc-nspawn-abc") == [
        "/sys/fs/cgroup/system.slice/ci-runner.service/hpc-nspawn-abc"]


def test_cgroup_dirs_inside_a_cgroup_namespace_mounted_from_a_subtree():
    mountinfo = "35 24 0:30 /machine/c1 /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
    assert cgroup_dirs("0::/machine/c1/payload\n", mountinfo, "x") == ["/sys/fs/cgroup/payload/x"]


def test_in_cgroups_argv_moves_a_shell_then_execs():
    argv = in_cgroups_argv(["/cg/a", "/cg/b c"], ["nspawn", "--quiet"])
    assert argv[:2] == ["/bin/sh", "-c"]
    assert argv[3:] == ["hpc-nspawn-cgroup", "/cg/a", "/cg/b c", "--", "nspawn", "--quiet"]
    assert in_cgroups_argv([], ["nspawn"]) == ["nspawn"]


def test_in_cgroups_argv_runs_for_real_without_cgroups(tmp_path):
    """The shell part, with plain files standing in for cgroup.procs (no cgroup is touched)."""
    (tmp_path / "a").mkdir()
    argv = in_cgroups_argv([str(tmp_path / "a")], ["sh", "-c", "echo $$"])
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    assert (tmp_path / "a/cgroup.procs").read_text() == out  # the same process, after exec


def test_a_session_that_waits_for_the_runtime_directory_says_so_once(tmp_path):
    """Another run holds the runtime directory's lock (here: this test, for 0.3 s); the stop that waits for it
    tells on_wait once, naming the host and the directory, and goes on when the lock is free."""
    import threading

    from ansible_collections.hpc.stateless.plugins.module_utils._fs import Flock
    from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.session import Session

    runtime = tmp_path / "run"
    runtime.mkdir()
    held = Flock(str(runtime), directory=True)
    held.acquire()
    timer = threading.Timer(0.3, held.release)
    timer.start()
    said = []
    try:
        assert Session(spec(runtime_dir=str(runtime)), on_wait=said.append).stop() == []
    finally:
        timer.join()
    assert len(said) == 1
    assert said[0].startswith(f"host c1: waiting for the nspawn runtime directory {runtime}, locked by another run")
    # free: no word
    assert Session(spec(runtime_dir=str(runtime)), on_wait=said.append).stop() == [] and len(said) == 1


# ---------------------------------------------------------------- the runtime directory is root's alone
def _plant_dead_session(runtime, marker):
    """A session as another user would plant it: its owner and supervisor gone, its spec naming a program (a
    script that leaves ``marker``) as buildah, and its state naming a working container for the teardown."""
    program = runtime.parent / "planted-buildah"
    program.write_text(f"#!/bin/sh\necho ran >> {marker}\n")
    program.chmod(0o755)
    session = runtime / "0123456789abcdef"
    session.mkdir(parents=True)
    data = spec(runtime_dir=str(runtime), owner_pid=2 ** 22 + 1, owner_start="1").to_dict()
    (session / "spec.json").write_text(json.dumps({**data, "buildah": str(program), "nspawn": str(program),
                                                   "nsenter": str(program)}))
    (session / "state.json").write_text(json.dumps({"status": "stopped", "container": "planted"}))
    return session


def test_no_file_of_a_session_names_a_program_that_runs(tmp_path):
    """The clean-up of a dead session runs the caller's buildah, whatever its spec.json says."""
    from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.session import collect_garbage

    runtime, marker = tmp_path / "run", tmp_path / "marker"
    _plant_dead_session(runtime, marker)
    assert "buildah" not in spec().to_dict() and "nspawn" not in spec().to_dict()
    collect_garbage(str(runtime), programs={"nspawn": "false", "nsenter": "false", "buildah": "true"})
    assert not marker.exists()
    assert SessionSpec.from_dict({**spec().to_dict(), "buildah": "/tmp/evil"}).buildah == "buildah"


@pytest.mark.parametrize("make", [
    pytest.param(lambda path: path.chmod(0o777), id="world-writable"),
    pytest.param(lambda path: path.chmod(0o770), id="group-writable"),
    pytest.param(lambda path: os.chown(path, 65534, 65534), id="another-users"),
])
def test_a_runtime_directory_another_user_can_write_is_refused_and_nothing_in_it_runs(tmp_path, make):
    from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.session import Session, stop_sessions

    runtime, marker = tmp_path / "run", tmp_path / "marker"
    _plant_dead_session(runtime, marker)
    make(runtime)
    for act in (lambda: Session(spec(runtime_dir=str(runtime))).ensure(),
                lambda: Session(spec(runtime_dir=str(runtime))).stop(),
                lambda: stop_sessions(str(runtime))):
        with pytest.raises(NspawnError, match=f"the nspawn runtime directory \\(ansible_nspawn_runtime_dir\\): "
                                              f"{runtime} (is writable by other users|belongs to uid 65534)"):
            act()
    assert not marker.exists()


def test_a_runtime_directory_that_is_a_link_is_refused(tmp_path):
    from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.session import Session

    (tmp_path / "elsewhere").mkdir(mode=0o700)
    (tmp_path / "run").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(NspawnError, match=f"{tmp_path / 'run'} is a symbolic link, not a directory of this user"):
        Session(spec(runtime_dir=str(tmp_path / "run"))).ensure()


@pytest.mark.skipif(os.geteuid() != 0 or not cgroup_dirs_of("probe"), reason="needs root and a writable cgroup tree")
def test_remove_cgroups_kills_what_the_session_left_in_them():
    """A container's init still shutting down when its nspawn is gone (an emulated boot is slow to stop) is the
    session's own: its processes get SIGKILL and the cgroups go, instead of 'cgroups still in use'."""
    dirs = session_cgroups(f"unit-{os.getpid()}")
    sleeper = subprocess.Popen(["sleep", "300"])
    try:
        for path in dirs:
            with open(os.path.join(path, "cgroup.procs"), "w", encoding="ascii") as handle:
                handle.write(str(sleeper.pid))
        assert sleeper.pid in cgroup_pids(dirs[0])
        assert remove_cgroups(dirs) == []
        assert sleeper.wait(timeout=5) == -signal.SIGKILL
        assert not any(os.path.isdir(path) for path in dirs)
    finally:
        sleeper.kill()
        sleeper.wait()
        remove_cgroups(dirs)
