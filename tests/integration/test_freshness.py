"""The release says how fresh it is (issue 27), end to end with a local signed apt repository.

The repository (apt_repo_support.py) is built in the test with dpkg-deb and apt-ftparchive, signed with a
throw-away key and served on 127.0.0.1: apt, gpgv and the collection's archive reader read it as they read
deb.debian.org.
"""

from __future__ import annotations

import pytest

from apt_repo_support import AptRepo, apt_policy

PACKAGE = "hpc-fresh-probe"


@pytest.fixture(name="repo")
def fixture_repo(tmp_path):
    repo = AptRepo(tmp_path / "repo")
    yield repo
    repo.close()


def test_apt_reads_the_local_repository_with_signed_by(repo, tmp_path):
    """The fixture is a real signed repository: apt accepts it with its key as Signed-By, sees a newer version
    published a moment later, and refuses it signed by another key."""
    repo.add_package(PACKAGE, "1.0")
    repo.publish()
    with repo.serve():
        first = apt_policy(tmp_path / "apt", repo.source_line(str(repo.keyring)), PACKAGE)
        assert first.returncode == 0, first.stderr
        assert "Candidate: 1.0" in first.stdout
        repo.add_package(PACKAGE, "1.1")
        repo.publish()
        second = apt_policy(tmp_path / "apt", repo.source_line(str(repo.keyring)), PACKAGE)
        assert second.returncode == 0, second.stderr
        assert "Candidate: 1.1" in second.stdout
        stranger = AptRepo(tmp_path / "stranger", suite="other")
        try:
            refused = apt_policy(tmp_path / "apt-stranger", repo.source_line(str(stranger.keyring)), PACKAGE)
        finally:
            stranger.close()
        assert refused.returncode != 0
        assert "NO_PUBKEY" in refused.stderr and "is not signed" in refused.stderr
