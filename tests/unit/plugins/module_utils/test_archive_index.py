"""The archive view (module_utils/_archive/index.py) against real signed repositories built in the test.

The repositories are tests/integration/apt_repo_support.py's: packages made with dpkg-deb, indexes and
Release files written by apt-ftparchive, signed by a throw-away key with gpg, served over HTTP on 127.0.0.1
by Python's handler (which answers If-Modified-Since with 304, as a mirror does) or read as file:// URIs.
gpgv checks the signatures for real; apt itself is asked, as the judge, which candidate it sees.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils._archive import index as archive
from ansible_collections.hpc.stateless.plugins.module_utils._archive.index import (
    ArchiveError,
    ArchiveView,
    Update,
    describe_updates,
    pending_updates,
)
from ansible_collections.hpc.stateless.plugins.module_utils._contract.sources import Source

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "integration"))
from apt_repo_support import AptRepo, apt_policy  # noqa: E402  pylint: disable=wrong-import-position

ARCH = "amd64"


class CountingFetch:
    """The real fetch (archive.fetch_url), counting the requests per URL and the answers: what a run costs."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, int]] = []

    def __call__(self, url, **options):
        reply = archive.fetch_url(url, **options)
        self.requests.append((url, reply.status))
        return reply


@pytest.fixture(scope="module", name="repos")
def fixture_repos(tmp_path_factory):
    """A release suite (openssl 3.0.20, bash 5.2) and a security suite (openssl 3.0.22), each with its own key."""
    base = tmp_path_factory.mktemp("archive")
    release = AptRepo(base / "release", suites=("bookworm",))
    release.add_package("openssl", "3.0.20-1~deb12u1")
    release.add_package("bash", "5.2.15-2+b2")
    release.add_package("zlib1g", "1:1.2.13.dfsg-1")
    release.publish()
    security = AptRepo(base / "security", suites=("bookworm-security",))
    security.add_package("openssl", "3.0.22-1~deb12u1")
    security.add_package("openssl", "3.0.21-1~deb12u1")  # an index may list several versions: the newest counts
    security.publish()
    yield release, security
    release.close()
    security.close()


def _sources(release: AptRepo, security: AptRepo, layer: str = "base") -> list[Source]:
    return [Source("release", release.uri or f"file://{release.root}", "bookworm", ("main",), str(release.keyring), layer),
            Source("security", security.uri or f"file://{security.root}", "bookworm-security", ("main",),
                   str(security.keyring), layer)]


def test_view_of_file_sources_candidates_origins_and_states(repos, tmp_path):
    release, security = repos
    view = ArchiveView.load(_sources(release, security), arch=ARCH, cache_dir=str(tmp_path / "cache"))
    version, source = view.candidate("openssl")
    assert (version, source.kind, source.suite) == ("3.0.22-1~deb12u1", "security", "bookworm-security")
    assert view.candidate("bash")[0] == "5.2.15-2+b2"
    assert view.candidate("bash:amd64")[0] == "5.2.15-2+b2"  # dpkg's name:arch form
    assert view.candidate("no-such-package") is None
    assert view.origin("openssl", "3.0.20-1~deb12u1").suite == "bookworm"
    assert view.origin("openssl", "3.0.21-1~deb12u1").suite == "bookworm-security"
    assert view.origin("openssl", "3.0.19-1") is None
    states = view.states
    assert [s["suite"] for s in states] == ["bookworm", "bookworm-security"]
    in_release = (release.root / "dists/bookworm/InRelease").read_bytes()
    assert states[0]["sha256"] == archive.hashlib.sha256(in_release).hexdigest()
    # The same record as a layer image's hpc.stateless.repositories label (the Date field as written).
    date = re.search(r"^Date: (.+)$", in_release.decode(), re.MULTILINE).group(1)
    assert states[0] == {"uri": f"file://{release.root}", "suite": "bookworm", "date": date,
                         "sha256": archive.hashlib.sha256(in_release).hexdigest()}


def test_candidate_matches_what_apt_sees(repos, tmp_path):
    """apt is the judge: its candidate for a package the release suite and (twice, newer) the security suite
    offer is the view's. (One package: each apt_policy is a whole apt-get update.)"""
    release, security = repos
    with release.serve(), security.serve():
        view = ArchiveView.load(_sources(release, security), arch=ARCH, cache_dir=str(tmp_path / "cache"))
        lines = release.source_line(str(release.keyring)) + security.source_line(str(security.keyring))
        policy = apt_policy(tmp_path / "apt", lines, "openssl")
    assert policy.returncode == 0, policy.stderr
    apt_candidate = re.search(r"Candidate: (\S+)", policy.stdout).group(1)
    assert view.candidate("openssl")[0] == apt_candidate == "3.0.22-1~deb12u1"


def test_pending_updates_under_each_policy(repos, tmp_path):
    release, security = repos
    view = ArchiveView.load(_sources(release, security), arch=ARCH, cache_dir=str(tmp_path / "cache"))
    installed = {"openssl": "3.0.20-1~deb12u1", "bash": "5.2.15-2+b1", "zlib1g": "1:1.2.13.dfsg-1",
                 "local-only": "1.0", "libfoo": "9.9"}
    every = pending_updates(view, installed, "any")
    assert every == [Update("openssl", "3.0.20-1~deb12u1", "3.0.22-1~deb12u1", "bookworm-security", True),
                     Update("bash", "5.2.15-2+b1", "5.2.15-2+b2", "bookworm", False)]
    assert str(every[0]) == "openssl 3.0.20-1~deb12u1 -> 3.0.22-1~deb12u1"
    assert pending_updates(view, installed, "security") == every[:1]
    assert pending_updates(view, installed, "never") == every  # the lag, for the warning
    assert pending_updates(view, {"openssl": "3.0.22-1~deb12u1", "bash": "5.3-1"}, "any") == []
    assert describe_updates(every) == ("2 updates, 1 of them security (openssl 3.0.20-1~deb12u1 -> 3.0.22-1~deb12u1, "
                                       "bash 5.2.15-2+b1 -> 5.2.15-2+b2)")
    assert describe_updates(every[:1]) == "1 security update (openssl 3.0.20-1~deb12u1 -> 3.0.22-1~deb12u1)"
    assert describe_updates(every * 2, limit=1) == "4 updates, 2 of them security (openssl 3.0.20-1~deb12u1 -> 3.0.22-1~deb12u1, ...)"
    assert describe_updates([]) == "no updates"
    with pytest.raises(ValueError, match="unknown freshness policy 'sometimes' .*any, security, never"):
        pending_updates(view, installed, "sometimes")
    with pytest.raises(ValueError, match=r"installed package bash: not a Debian version: 'x:1' \(the epoch 'x' is not a number\)"):
        pending_updates(view, {"bash": "x:1"})


def test_restricted_view_sees_only_a_layers_sources(repos, tmp_path):
    release, security = repos
    both = _sources(release, security)
    view = ArchiveView.load(both, arch=ARCH, cache_dir=str(tmp_path / "cache"))
    only_release = view.restricted(both[:1])
    assert only_release.candidate("openssl")[0] == "3.0.20-1~deb12u1"
    assert pending_updates(only_release, {"openssl": "3.0.20-1~deb12u1"}) == []
    stranger = Source("extra", "http://example.invalid/x", "site", ("main",), None, "compute")
    with pytest.raises(ValueError, match="not in this archive view"):
        view.restricted([stranger])


def test_repeated_declarations_are_read_once(repos, tmp_path):
    """Every layer lists its root's sources: the view reads each URI+suite once and keeps the first layer's name."""
    release, security = repos
    fetch = CountingFetch()
    sources = _sources(release, security, "base") + _sources(release, security, "compute")
    view = ArchiveView.load(sources, arch=ARCH, cache_dir=str(tmp_path / "cache"), fetch=fetch)
    assert len(view.sources) == 2 and {s.layer for s in view.sources} == {"base"}
    assert len([url for url, _status in fetch.requests if url.endswith("/InRelease")]) == 2


def test_cache_max_age_conditional_get_and_a_new_publish(tmp_path):
    """Cold: InRelease + Packages per source. Within max_age: no request. After it: one conditional GET,
    answered 304. A publish: the new InRelease and the changed index are fetched, the candidate moves."""
    repo = AptRepo(tmp_path / "repo", suites=("bookworm",))
    try:
        repo.add_package("openssl", "3.0.20-1")
        repo.publish()
        cache = str(tmp_path / "cache")
        with repo.serve():
            source = [Source("release", repo.uri, "bookworm", ("main",), str(repo.keyring), "base")]
            cold = CountingFetch()
            view = ArchiveView.load(source, arch=ARCH, cache_dir=cache, fetch=cold, max_age=300)
            assert view.network == {f"{repo.uri.rstrip('/')} bookworm": "fetched"}
            assert [status for _url, status in cold.requests] == [200, 200]
            assert cold.requests[1][0].endswith("main/binary-amd64/Packages.xz")
            cached = sorted(os.listdir(os.path.join(cache, "packages")))
            assert len(cached) == 1

            within = CountingFetch()
            view = ArchiveView.load(source, arch=ARCH, cache_dir=cache, fetch=within, max_age=300)
            assert within.requests == [] and view.candidate("openssl")[0] == "3.0.20-1"

            after = CountingFetch()
            view = ArchiveView.load(source, arch=ARCH, cache_dir=cache, fetch=after, max_age=0)
            assert [status for _url, status in after.requests] == [304]
            assert view.network == {f"{repo.uri.rstrip('/')} bookworm": "304"}

            repo.add_package("openssl", "3.0.22-1")
            repo.publish()
            moved = CountingFetch()
            view = ArchiveView.load(source, arch=ARCH, cache_dir=cache, fetch=moved, max_age=0)
            assert [status for _url, status in moved.requests] == [200, 200]
            assert view.candidate("openssl")[0] == "3.0.22-1"
            assert pending_updates(view, {"openssl": "3.0.20-1"}) == [Update("openssl", "3.0.20-1", "3.0.22-1", "bookworm", False)]
            assert len(os.listdir(os.path.join(cache, "packages"))) == 2
        # No temporary file is left under the cache's final names.
        leftovers = [name for _dir, _subdirs, files in os.walk(cache) for name in files if name.startswith(".")]
        assert leftovers == []
    finally:
        repo.close()


def test_a_mirror_without_validators_costs_one_get_and_no_reverification(repos, tmp_path, monkeypatch):
    """deb.debian.org behind some proxies sends neither ETag nor Last-Modified: the same bytes come back,
    their hash matches the cached one, and gpgv is not run again."""
    release, security = repos
    cache = str(tmp_path / "cache")
    sources = _sources(release, security)
    ArchiveView.load(sources, arch=ARCH, cache_dir=cache)
    calls = []
    monkeypatch.setattr(archive, "verify_signature", lambda *a, **k: calls.append(a))
    view = ArchiveView.load(sources, arch=ARCH, cache_dir=cache, max_age=0)  # file:// has no validators
    assert set(view.network.values()) == {"same"} and calls == []


def test_wrong_key_is_refused_naming_layer_uri_and_suite(repos, tmp_path):
    release, security = repos
    wrong = [Source("release", f"file://{release.root}", "bookworm", ("main",), str(security.keyring), "base")]
    with pytest.raises(ArchiveError) as error:
        ArchiveView.load(wrong, arch=ARCH, cache_dir=str(tmp_path / "cache"))
    message = str(error.value)
    assert message.startswith(f"base: apt source file://{release.root} bookworm: its Release file is not signed by a key of "
                              f"{security.keyring}")
    assert "give the source the repository's keyring" in message
    assert not os.listdir(tmp_path / "cache" / "releases")  # nothing recorded for a source that failed


def test_missing_keyring_file_is_named(repos, tmp_path):
    release = repos[0]
    source = [Source("release", f"file://{release.root}", "bookworm", ("main",), str(tmp_path / "site.gpg"), "slurm")]
    with pytest.raises(ArchiveError, match=rf"slurm: apt source .* bookworm: its keyring {tmp_path}/site.gpg is not a file"):
        ArchiveView.load(source, arch=ARCH, cache_dir=str(tmp_path / "cache"))


def test_armoured_keyring_is_accepted(repos, tmp_path):
    release = repos[0]
    source = [Source("release", f"file://{release.root}", "bookworm", ("main",), str(release.key.armored), "base")]
    assert ArchiveView.load(source, arch=ARCH, cache_dir=str(tmp_path / "cache")).candidate("bash")


def test_release_with_detached_signature_and_unsigned_repositories(tmp_path):
    repo = AptRepo(tmp_path / "repo", suites=("site",))
    try:
        repo.add_package("slurm-wlm", "23.11.4-1")
        repo.publish()
        dists = repo.root / "dists" / "site"
        (dists / "InRelease").unlink()  # an older repository tool: Release + Release.gpg only
        source = [Source("extra", f"file://{repo.root}", "site", ("main",), str(repo.keyring), "slurm")]
        view = ArchiveView.load(source, arch=ARCH, cache_dir=str(tmp_path / "c1"))
        assert view.candidate("slurm-wlm")[0] == "23.11.4-1"
        (dists / "Release.gpg").unlink()
        with pytest.raises(ArchiveError, match=r"slurm: apt source .* site: the repository is not signed \(no InRelease, "
                                               r"no Release.gpg\) - sign its Release file, or declare the source trusted"):
            ArchiveView.load(source, arch=ARCH, cache_dir=str(tmp_path / "c2"))
        trusted = ArchiveView.load(source, arch=ARCH, cache_dir=str(tmp_path / "c3"), trusted=True)
        assert trusted.candidate("slurm-wlm")[0] == "23.11.4-1"
        # A view that checks signatures does not take the trusted run's record, even within max_age.
        with pytest.raises(ArchiveError, match="not signed"):
            ArchiveView.load(source, arch=ARCH, cache_dir=str(tmp_path / "c3"))
    finally:
        repo.close()


def test_tampered_packages_index_is_refused(tmp_path):
    repo = AptRepo(tmp_path / "repo", suites=("bookworm",))
    try:
        repo.add_package("openssl", "3.0.20-1")
        repo.publish()
        xz = repo.root / "dists/bookworm/main/binary-amd64/Packages.xz"
        genuine = xz.read_bytes()
        xz.write_bytes(genuine[:-1] + bytes([genuine[-1] ^ 1]))  # the size the Release file says, other bytes
        source = [Source("release", f"file://{repo.root}", "bookworm", ("main",), str(repo.keyring), "base")]
        with pytest.raises(ArchiveError, match=r"base: apt source .* bookworm: main/binary-amd64/Packages.xz has sha256 "
                                               r"[0-9a-f]{64}, its Release file says [0-9a-f]{64} - the mirror is mid-sync"):
            ArchiveView.load(source, arch=ARCH, cache_dir=str(tmp_path / "cache"))
        assert os.listdir(tmp_path / "cache" / "packages") == []
        # One byte more than the signed size: refused while reading, before it is hashed or decompressed.
        xz.write_bytes(genuine + b"\0")
        with pytest.raises(ArchiveError, match=rf"Packages.xz is larger than the {len(genuine)} bytes it may have .* - "
                                               r"the mirror is mid-sync, corrupt or hostile"):
            ArchiveView.load(source, arch=ARCH, cache_dir=str(tmp_path / "cache"))
        assert os.listdir(tmp_path / "cache" / "packages") == []
    finally:
        repo.close()


def test_unknown_suite_component_and_unreachable_mirror(repos, tmp_path):
    release = repos[0]
    typo = [Source("security", f"file://{release.root}", "bookworm-securty", ("main",), None, "base")]
    with pytest.raises(ArchiveError) as error:
        ArchiveView.load(typo, arch=ARCH, cache_dir=str(tmp_path / "cache"))
    assert f"base: apt source file://{release.root} bookworm-securty: suite bookworm-securty not found at " \
           f"file://{release.root}" in str(error.value)
    assert "snapshot URL" in str(error.value)

    component = [Source("release", f"file://{release.root}", "bookworm", ("main", "contrib"), str(release.keyring), "base")]
    with pytest.raises(ArchiveError, match=r"component 'contrib' has no Packages index for amd64 \(its Release file has "
                                           r"amd64 indexes for: main\)"):
        ArchiveView.load(component, arch=ARCH, cache_dir=str(tmp_path / "cache"))

    with release.serve() as uri:
        port = uri.rsplit(":", 1)[1].rstrip("/")
    gone = [Source("release", f"http://127.0.0.1:{port}/", "bookworm", ("main",), None, "base")]
    with pytest.raises(ArchiveError, match=rf"base: apt source http://127.0.0.1:{port}/ bookworm: cannot reach "
                                           rf"127.0.0.1:{port}: .*refused.* \(2 tries over \d+ s\) - check the mirror URI"):
        ArchiveView.load(gone, arch=ARCH, cache_dir=str(tmp_path / "cache"), timeout=5, retry_delays=(0.1,))


def test_expired_valid_until_is_refused_unless_snapshots_are_allowed(tmp_path):
    repo = AptRepo(tmp_path / "repo", suites=("stale",))  # short: gpg-agent socket paths are limited
    try:
        repo.add_package("openssl", "3.0.22-1")
        repo.publish()
        dists = repo.root / "dists/stale"
        text = (dists / "Release").read_text(encoding="utf-8")
        text = text.replace("Date:", "Valid-Until: Sat, 01 Jan 2022 00:00:00 UTC\nDate:", 1)
        (dists / "Release").write_text(text, encoding="utf-8")
        (dists / "InRelease").unlink()
        repo.key.gpg("--yes", "--local-user", repo.key.fingerprint, "--clearsign", "--output", str(dists / "InRelease"),
                     str(dists / "Release"))
        source = [Source("security", f"file://{repo.root}", "stale", ("main",), str(repo.keyring), "base")]
        with pytest.raises(ArchiveError, match=r"its Release file expired on 2022-01-01T00:00:00Z \(Valid-Until is in the "
                                               r"past\) - .*hpc_stateless_freshness_policy: never .*check_valid_until=False"):
            ArchiveView.load(source, arch=ARCH, cache_dir=str(tmp_path / "cache"))
        view = ArchiveView.load(source, arch=ARCH, cache_dir=str(tmp_path / "cache"), check_valid_until=False)
        assert view.candidate("openssl")[0] == "3.0.22-1"
    finally:
        repo.close()


def test_flat_repository(tmp_path):
    """``deb [signed-by=...] <uri> ./``: Release and Packages next to the packages, no components."""
    repo = AptRepo(tmp_path / "repo", suites=("flat",))
    try:
        repo.add_package("vendor-ofed", "24.04-1")
        flat = repo.root / "pool" / repo.suite
        archive_tools = __import__("apt_repo_support")
        (flat / "Packages").write_bytes(archive_tools._run("apt-ftparchive", "packages", ".", cwd=flat))  # pylint: disable=protected-access
        (flat / "Release").write_bytes(archive_tools._run("apt-ftparchive", "release", ".", cwd=flat))  # pylint: disable=protected-access
        repo.key.gpg("--yes", "--local-user", repo.key.fingerprint, "--clearsign", "--output", str(flat / "InRelease"),
                     str(flat / "Release"))
        source = [Source("extra", f"file://{flat}", "./", (), str(repo.keyring), "compute")]
        view = ArchiveView.load(source, arch=ARCH, cache_dir=str(tmp_path / "cache"))
        assert view.candidate("vendor-ofed")[0] == "24.04-1"
    finally:
        repo.close()


def test_busy_cache_names_its_holder(repos, tmp_path, monkeypatch):
    release, security = repos
    cache = tmp_path / "cache"
    cache.mkdir()
    holder = archive.Flock(str(cache / "lock"), "another plan")
    holder.acquire()
    monkeypatch.setattr(archive, "LOCK_TIMEOUT", 0.2)
    told = []
    try:
        with pytest.raises(ArchiveError, match=rf"the archive cache {cache} is busy: .*pid {os.getpid()} another plan"):
            ArchiveView.load(_sources(release, security), arch=ARCH, cache_dir=str(cache), on_wait=told.append)
    finally:
        holder.release()
    # The run that waits said so once, when its wait began, naming the holder.
    assert len(told) == 1
    assert told[0].startswith(f"waiting for the apt archive index cache {cache}, held by pid {os.getpid()} another plan since ")
    view = ArchiveView.load(_sources(release, security), arch=ARCH, cache_dir=str(cache), on_wait=told.append)
    assert view.sources and len(told) == 1  # free: nobody waited for
    assert (cache / "lock").read_text().startswith(f"pid {os.getpid()} reading apt archive indexes for the plan of "
                                                   f"ansible-playbook pid {os.getpid()} since ")


def test_default_cache_dir(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(archive._process, "in_user_namespace", lambda: False)
    assert archive.default_cache_dir() == "/var/cache/hpc.stateless/archive"
    # Inside `buildah unshare` of a rootless build uid 0 is the user, who cannot write root's cache (issue 27).
    monkeypatch.setattr(archive._process, "in_user_namespace", lambda: True)
    monkeypatch.setenv("XDG_CACHE_HOME", "/home/u/.xdg")
    assert archive.default_cache_dir() == "/home/u/.xdg/hpc.stateless/archive"
    monkeypatch.setattr(archive._process, "in_user_namespace", lambda: False)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setenv("XDG_CACHE_HOME", "/home/u/.xdg")
    assert archive.default_cache_dir() == "/home/u/.xdg/hpc.stateless/archive"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", "/home/u")
    assert archive.default_cache_dir() == "/home/u/.cache/hpc.stateless/archive"
    # The rule is the controller's for every cache of its own (_paths.controller_cache_dir).
    assert archive._paths.controller_cache_dir("role-variables") == "/home/u/.cache/hpc.stateless/role-variables"


def test_parse_packages_keeps_every_version_newest_first():
    text = ("Package: a\nVersion: 1.0\nArchitecture: all\n\nPackage: b\nSource: x (2)\nVersion: 2:0.1\n\n"
            "Package: a\nVersion: 1.0~rc1\n\nPackage: a\nVersion: 1.0+b1\n")
    assert archive.parse_packages(text) == {"a": ["1.0+b1", "1.0", "1.0~rc1"], "b": ["2:0.1"]}


def test_missing_gpgv_is_an_archive_error_naming_the_source(repos, tmp_path, monkeypatch):
    """The controller needs gpgv: without it the check fails like any unreadable source, saying what to install."""
    release, security = repos
    monkeypatch.setenv("PATH", str(tmp_path))  # no gpgv on this PATH (nor in the sbin directories)
    with pytest.raises(ArchiveError, match=r"^base: apt source file://.* bookworm: gpgv is not installed on this host; "
                                           r"install gpgv"):
        ArchiveView.load(_sources(release, security), arch=ARCH, cache_dir=str(tmp_path / "cache"))


def test_a_replaced_keyring_is_checked_again_even_within_max_age(repos, tmp_path):
    """The cache remembers which keys verified a source: another key file under the same name reads it afresh."""
    release, security = repos
    keyring = tmp_path / "site.gpg"
    keyring.write_bytes(release.keyring.read_bytes())
    source = [Source("release", f"file://{release.root}", "bookworm", ("main",), str(keyring), "base")]
    cache = str(tmp_path / "cache")
    ArchiveView.load(source, arch=ARCH, cache_dir=cache, max_age=300)
    keyring.write_bytes(security.keyring.read_bytes())
    with pytest.raises(ArchiveError, match="its Release file is not signed by a key of"):
        ArchiveView.load(source, arch=ARCH, cache_dir=cache, max_age=300)


UNPRIVILEGED_CHECK = """
import json, sys
sys.path.insert(0, sys.argv[1])
from ansible_collections.hpc.stateless.plugins.module_utils._archive.index import ArchiveView, default_cache_dir, pending_updates
from ansible_collections.hpc.stateless.plugins.module_utils._contract.sources import Source
source = Source("security", sys.argv[2], "bookworm-security", ("main",), sys.argv[3], "base")
view = ArchiveView.load([source], arch="amd64")
print(json.dumps({"cache": default_cache_dir(), "updates": [str(u) for u in pending_updates(view, {"openssl": "3.0.20-1"})]}))
"""


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="run as root to switch to an unprivileged user (as an ordinary user every test here is one)")
def test_an_unprivileged_user_checks_into_its_own_cache(repos):
    """The controller may run as an ordinary user: gpgv and the cache need no root; the cache is under $HOME."""
    security = repos[1]
    home = Path(tempfile.mkdtemp(prefix="hpc-archive-home-"))  # pytest's tmp_path is root's alone (0700)
    try:
        keyring = home / "security.gpg"
        keyring.write_bytes(security.keyring.read_bytes())
        for path in (home, keyring):
            os.chown(path, 65534, 65534)
        collections = str(Path(archive.__file__).parents[6])  # the directory that holds ansible_collections/
        with security.serve() as uri:
            proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "env", f"HOME={home}",
                                   sys.executable, "-c", UNPRIVILEGED_CHECK, collections, uri, str(keyring)],
                                  capture_output=True, text=True, check=False, cwd=str(home))
        packages_owner = os.stat(home / ".cache/hpc.stateless/archive/packages").st_uid if proc.returncode == 0 else None
    finally:
        shutil.rmtree(home, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result == {"cache": f"{home}/.cache/hpc.stateless/archive", "updates": ["openssl 3.0.20-1 -> 3.0.22-1~deb12u1"]}
    assert packages_owner == 65534


def test_by_hash_when_offered_else_the_plain_path(tmp_path):
    """A Release file with ``Acquire-By-Hash: yes`` (Debian's): the index is fetched by its hash, which a mirror
    mid-sync cannot swap under the reader; a mirror without the by-hash file still serves the plain path."""
    repo = AptRepo(tmp_path / "repo", suites=("hashed",))
    try:
        repo.add_package("openssl", "3.0.22-1")
        repo.publish()
        dists = repo.root / "dists/hashed"
        text = (dists / "Release").read_text(encoding="utf-8").replace("Date:", "Acquire-By-Hash: yes\nDate:", 1)
        (dists / "Release").write_text(text, encoding="utf-8")
        (dists / "InRelease").unlink()
        repo.key.gpg("--yes", "--local-user", repo.key.fingerprint, "--clearsign", "--output", str(dists / "InRelease"),
                     str(dists / "Release"))
        source = [Source("release", f"file://{repo.root}", "hashed", ("main",), str(repo.keyring), "base")]
        plain = CountingFetch()
        ArchiveView.load(source, arch=ARCH, cache_dir=str(tmp_path / "c1"), fetch=plain)
        digest = archive.hashlib.sha256((dists / "main/binary-amd64/Packages.xz").read_bytes()).hexdigest()
        assert [(url.split("/hashed/")[1], status) for url, status in plain.requests] == [
            ("InRelease", 200), (f"main/binary-amd64/by-hash/SHA256/{digest}", 404), ("main/binary-amd64/Packages.xz", 200)]
        by_hash = dists / "main/binary-amd64/by-hash/SHA256"
        by_hash.mkdir(parents=True)
        (by_hash / digest).write_bytes((dists / "main/binary-amd64/Packages.xz").read_bytes())
        hashed = CountingFetch()
        view = ArchiveView.load(source, arch=ARCH, cache_dir=str(tmp_path / "c2"), fetch=hashed)
        assert [status for _url, status in hashed.requests] == [200, 200]
        assert hashed.requests[1][0].endswith(f"/by-hash/SHA256/{digest}")
        assert view.candidate("openssl")[0] == "3.0.22-1"
    finally:
        repo.close()
