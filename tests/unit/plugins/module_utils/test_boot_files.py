"""One verify boot's files on the build host (_verify/boot_files.py): private, random secrets, the binds in order,
refusals that name the option, and a removal that touches nothing but such a directory."""

from __future__ import annotations

import os
import stat

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils._verify import boot_files


def test_secrets_and_files_are_private_and_bound_in_the_order_given(tmp_path):
    made = boot_files.make(["/etc/munge/munge.key", "/etc/site/token"],
                           [{"path": "/run/hpc-stateless-lynis.prf", "content": "skip-test=KRNL-6000\n"}], str(tmp_path))
    directory = made.path
    assert directory.endswith(boot_files.SUFFIX) and os.path.dirname(directory) == str(tmp_path)
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
    assert made.binds == [f"--bind={directory}/secret-1:/etc/munge/munge.key",
                          f"--bind={directory}/secret-2:/etc/site/token",
                          f"--bind-ro={directory}/file-1:/run/hpc-stateless-lynis.prf"]
    one, two = (open(os.path.join(directory, f"secret-{i}"), "rb").read() for i in (1, 2))
    assert len(one) == len(two) == boot_files.SECRET_BYTES and one != two
    assert open(os.path.join(directory, "file-1"), encoding="utf-8").read() == "skip-test=KRNL-6000\n"
    assert {stat.S_IMODE(os.stat(os.path.join(directory, n)).st_mode) for n in os.listdir(directory)} == {0o600}
    assert boot_files.remove(directory) is True and not os.path.exists(directory)
    assert boot_files.remove(directory) is False


@pytest.mark.parametrize("secrets, files, message", [
    (["etc/munge.key"], [], r"secrets\[0\]: 'etc/munge.key' is not an absolute path"),
    (["/etc/a:b"], [], r"secrets\[0\]: '/etc/a:b' cannot be bound"),
    (["/etc/../x"], [], r"cannot be bound"),
    (["/etc/key", "/etc//key"], [], r"secrets\[1\]: /etc/key is named twice"),
    ([], [{"path": "/run/p"}], r"files\[0\]: expects a mapping of path and content"),
    (["/run/p"], [{"path": "/run/p", "content": ""}], r"files\[0\].path: /run/p is named twice"),
])
def test_bad_paths_are_refused_naming_the_option_and_nothing_is_made(tmp_path, secrets, files, message):
    with pytest.raises(boot_files.BootFilesError, match=message):
        boot_files.make(secrets, files, str(tmp_path))
    assert os.listdir(tmp_path) == []


def test_remove_refuses_anything_but_a_directory_of_boot_files(tmp_path):
    victim = tmp_path / "data"
    victim.mkdir()
    (victim / "keep").write_text("x")
    with pytest.raises(boot_files.BootFilesError, match="not a directory of verify boot files"):
        boot_files.remove(str(victim))
    link = tmp_path / "x.verify-boot"
    link.symlink_to(victim)
    with pytest.raises(boot_files.BootFilesError, match="not a directory \\(a link or a file\\)"):
        boot_files.remove(str(link))
    with pytest.raises(boot_files.BootFilesError, match="absolute path"):
        boot_files.remove("x.verify-boot")
    assert (victim / "keep").read_text() == "x"
