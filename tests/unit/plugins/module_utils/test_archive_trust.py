"""What the archive view trusts: the signing key's state, the Release file's suite and date, the sizes it signs,
a deadline, and what a security suite's version means for the pending updates.

Everything is real: GnuPG keys made here (one expired, one revoked, one good signature made to expire), Release
files written by apt-ftparchive and signed with them, gpgv, and apt itself as the judge of each verdict: where the
view's check is its own code, the same files go through ``apt-get update`` in a private state directory
(tests/integration/apt_repo_support.py ``apt_policy``) and apt must refuse (or warn about) what the view refuses.
"""

from __future__ import annotations

import http.server
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils._archive import index as archive
from ansible_collections.hpc.stateless.plugins.module_utils._archive.index import (
    ArchiveError,
    ArchiveView,
    FetchFailed,
    Update,
    pending_updates,
)
from ansible_collections.hpc.stateless.plugins.module_utils._contract.sources import Source
from ansible_collections.hpc.stateless.plugins.module_utils._verify import freshness as verify_freshness

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "integration"))
from apt_repo_support import AptRepo, apt_policy  # noqa: E402  pylint: disable=wrong-import-position

ARCH = "amd64"
PAST = "20200101T000000"  # gpg's --faked-system-time: when the short-lived key and signature were made


class Gpg:
    """A GnuPG home of its own under /tmp (short: gpg-agent's socket path is limited)."""

    def __init__(self, name: str) -> None:
        self.home = tempfile.mkdtemp(prefix=f"gpg-{name[:8]}-")
        self.name = name

    def __call__(self, *args: str) -> bytes:
        return subprocess.run(["gpg", "--homedir", self.home, "--batch", "--yes", *args], check=True,
                              capture_output=True).stdout

    def make_key(self, expire: str = "never", faked: str | None = None) -> str:
        fake = ["--faked-system-time", faked] if faked else []
        self(*fake, "--passphrase", "", "--quick-gen-key", f"{self.name} <{self.name}@example.invalid>", "ed25519",
             "sign", expire)
        colons = self("--with-colons", "--list-secret-keys").decode()
        return next(line.split(":")[9] for line in colons.splitlines() if line.startswith("fpr:"))

    def revoke(self, fingerprint: str) -> None:
        """Import the revocation certificate gpg made with the key (its first ':' stops an accidental import)."""
        certificate = Path(self.home, "openpgp-revocs.d", f"{fingerprint}.rev").read_text(encoding="utf-8")
        cert = Path(self.home, "rev.asc")
        cert.write_text(certificate.replace(":-----BEGIN", "-----BEGIN", 1), encoding="utf-8")
        self("--import", str(cert))

    def export(self, path: Path) -> Path:
        path.write_bytes(self("--export"))
        return path

    def clearsign(self, release: Path, *options: str) -> None:
        self(*options, "--digest-algo", "SHA256", "--clearsign", "--output", str(release.parent / "InRelease"),
             str(release))

    def close(self) -> None:
        subprocess.run(["gpgconf", "--homedir", self.home, "--kill", "gpg-agent"], check=False, capture_output=True)
        shutil.rmtree(self.home, ignore_errors=True)


def _resign(repo: AptRepo, suite: str, edit=lambda text: text, signer: Gpg | None = None, *options: str) -> None:
    """Rewrite ``dists/<suite>/Release`` with ``edit`` and clearsign it again (the repository's key by default)."""
    dists = repo.root / "dists" / suite
    release = dists / "Release"
    release.write_text(edit(release.read_text(encoding="utf-8")), encoding="utf-8")
    for name in ("InRelease", "Release.gpg"):
        (dists / name).unlink(missing_ok=True)
    if signer is None:
        repo.key.gpg("--yes", "--local-user", repo.key.fingerprint, "--digest-algo", "SHA256", "--clearsign",
                     "--output", str(dists / "InRelease"), str(release))
    else:
        signer.clearsign(release, *options)


def _date(text: str, when: str) -> str:
    return re.sub(r"^Date: .*$", f"Date: {when}", text, count=1, flags=re.MULTILINE)


def _apt_update(root: Path, line: str, *options: str) -> subprocess.CompletedProcess:
    """apt's verdict on the same repository: ``apt-get update`` (+ ``apt-cache policy``) in a private state dir."""
    return apt_policy(root, line, "openssl", *options)


#: apt's default, stated: a host's apt configuration may turn the date checks off (a snapshot mirror's set-up does).
APT_CHECKS_DATES = ("-o", "Acquire::Check-Date=true")


# -- finding 4: the signing key's state ----------------------------------------------------------------------

@pytest.mark.parametrize("state", ["expired key", "revoked key", "expired signature"])
def test_a_signature_by_an_expired_or_revoked_key_is_refused_as_apt_does(tmp_path, state):
    repo = AptRepo(tmp_path / "repo", suites=("bookworm",))
    signer = Gpg(state.split()[0])
    try:
        repo.add_package("openssl", "3.0.22-1")
        repo.publish()
        fingerprint = ""
        if state == "expired key":  # made in the past with one day to live
            signer.make_key("1d", faked=PAST)
            options: tuple[str, ...] = ("--faked-system-time", PAST)
        elif state == "revoked key":  # signed while good, revoked since
            fingerprint = signer.make_key()
            options = ()
        else:  # a key without expiry, a signature made in the past that lived one day
            signer.make_key(faked=PAST)
            options = ("--faked-system-time", PAST, "--default-sig-expire", "1d")
        _resign(repo, "bookworm", lambda text: text, signer, *options)
        if state == "revoked key":
            signer.revoke(fingerprint)
        keyring = signer.export(tmp_path / "signer.gpg")
        source = [Source("security", f"file://{repo.root}", "bookworm", ("main",), str(keyring), "base")]
        word = {"expired key": r"the signing key [0-9A-F]{16} \(.*\) has expired",
                "revoked key": r"the signing key [0-9A-F]{16} \(.*\) was revoked",
                "expired signature": r"the signature by key [0-9A-F]{16} \(.*\) has expired"}[state]
        with pytest.raises(ArchiveError, match=rf"^base: apt source file://{repo.root} bookworm: its Release file is not "
                                               rf"signed by a key of {keyring} \({word}\)"):
            ArchiveView.load(source, arch=ARCH, cache_dir=str(tmp_path / "cache"))
        assert not os.listdir(tmp_path / "cache" / "releases")  # nothing recorded as verified
        with repo.serve():
            apt = _apt_update(tmp_path / "apt", repo.source_line(str(keyring)))
        status = {"expired key": "EXPKEYSIG", "revoked key": "REVKEYSIG", "expired signature": "EXPSIG"}[state]
        assert apt.returncode != 0 or "W: " in apt.stderr, apt.stdout
        assert status in apt.stderr and "is not signed" in apt.stderr, apt.stderr  # apt refuses it too
    finally:
        signer.close()
        repo.close()


def test_signature_verdicts_from_gpgv_status_lines():
    valid = " ".join(["F00"] * 10)
    good = f"[GNUPG:] NEWSIG\n[GNUPG:] GOODSIG 0123456789ABCDEF a\n[GNUPG:] VALIDSIG {valid}\n"
    assert archive.signature_problem(good) is None
    # Debian signs with several keys: one the keyring lacks does not spoil a good one; a bad one does.
    missing = "[GNUPG:] NEWSIG\n[GNUPG:] ERRSIG AAAA 22 8 01 1 9 -\n[GNUPG:] NO_PUBKEY AAAA\n"
    assert archive.signature_problem(missing + good) is None
    assert archive.signature_problem(missing).startswith("signed by key AAAA, which ")
    bad = "[GNUPG:] NEWSIG\n[GNUPG:] BADSIG BBBB b\n"
    assert archive.signature_problem(good + bad) == ("BAD signature by key BBBB (b): the Release file was changed after "
                                                     "it was signed, or the signature was damaged")
    expired = f"[GNUPG:] NEWSIG\n[GNUPG:] EXPKEYSIG CCCC c\n[GNUPG:] VALIDSIG {valid}\n"
    assert archive.signature_problem(expired) == "the signing key CCCC (c) has expired"
    assert archive.signature_problem(expired + good) is None  # a good signature beside it (a key rotation)
    assert archive.signature_problem("[GNUPG:] NEWSIG\n[GNUPG:] GOODSIG AAAA a\n") == "no good signature"  # no VALIDSIG
    assert archive.signature_problem("") == "no good signature"


# -- finding 3: the Release file's suite and date --------------------------------------------------------------

def test_a_release_file_of_another_suite_is_refused_naming_mirror_suite_and_reason(tmp_path):
    """Debian's signed ``bookworm`` InRelease served as ``bookworm-security`` hides every security fix."""
    repo = AptRepo(tmp_path / "repo", suites=("bookworm", "bookworm-security"))
    try:
        repo.add_package("openssl", "3.0.20-1", suite="bookworm")
        repo.add_package("openssl", "3.0.22-1", suite="bookworm-security")
        repo.publish()
        shutil.rmtree(repo.root / "dists/bookworm-security")
        shutil.copytree(repo.root / "dists/bookworm", repo.root / "dists/bookworm-security")  # the mislabelling
        with repo.serve() as uri:
            source = [Source("security", uri, "bookworm-security", ("main",), str(repo.keyring), "base")]
            with pytest.raises(ArchiveError, match=rf"^base: apt source {uri} bookworm-security: its Release file is for "
                                                   r"suite bookworm \(codename bookworm\), not bookworm-security: a "
                                                   r"mislabelled Release file - the mirror serves another suite"):
                ArchiveView.load(source, arch=ARCH, cache_dir=str(tmp_path / "cache"))
            apt = _apt_update(tmp_path / "apt", repo.source_line(str(repo.keyring), "bookworm-security"))
        # apt only warns here (and uses the file): the view is stricter than apt, never laxer.
        assert "Conflicting distribution" in apt.stderr and "expected bookworm-security but got bookworm" in apt.stderr
    finally:
        repo.close()


def test_suite_matches_suite_or_codename_as_apt_checks():
    fields = {"Suite": "stable-security", "Codename": "bookworm-security", "Date": "Sat, 01 Jan 2026 00:00:00 UTC"}
    assert archive.release_problem("bookworm-security", fields) is None
    assert archive.release_problem("stable-security", fields) is None
    assert archive.release_problem("bookworm", fields).startswith("its Release file is for suite stable-security")
    old = {"Suite": "oldoldstable", "Codename": "buster", "Date": "Sat, 01 Jan 2022 00:00:00 UTC"}
    assert archive.release_problem("buster/updates", old) is None  # Debian's old security suite name
    assert archive.release_problem("./", {"Date": fields["Date"]}) is None  # a flat repository names no suite
    assert "no valid Date" in archive.release_problem("bookworm", {"Codename": "bookworm"})
    assert archive.release_problem("bookworm", {"Codename": "bookworm"}, require_date=False) is None


def test_an_older_signed_release_file_does_not_replace_a_newer_one(tmp_path):
    """A replay: the mirror (or a man in the middle) serves last week's validly signed InRelease again."""
    repo = AptRepo(tmp_path / "repo", suites=("bookworm-security",))
    try:
        repo.add_package("openssl", "3.0.20-1")
        repo.publish()
        _resign(repo, "bookworm-security", lambda t: _date(t, "Tue, 24 Nov 2026 00:00:00 UTC"))
        old = tmp_path / "old-dists"
        shutil.copytree(repo.root / "dists", old)
        repo.add_package("openssl", "3.0.22-1")
        repo.publish()
        _resign(repo, "bookworm-security", lambda t: _date(t, "Tue, 01 Dec 2026 00:00:00 UTC"))
        cache = str(tmp_path / "cache")
        with repo.serve() as uri:
            source = [Source("security", uri, "bookworm-security", ("main",), str(repo.keyring), "base")]
            line = repo.source_line(str(repo.keyring))
            view = ArchiveView.load(source, arch=ARCH, cache_dir=cache, max_age=0, check_valid_until=False)
            assert pending_updates(view, {"openssl": "3.0.20-1"})[0].candidate == "3.0.22-1"
            assert _apt_update(tmp_path / "apt", line).returncode == 0
            shutil.rmtree(repo.root / "dists")
            shutil.copytree(old, repo.root / "dists")  # the replay, served as new (no 304 to the validators held)
            for path in (repo.root / "dists").rglob("*"):
                os.utime(path, (time.time() + 60, time.time() + 60))
            with pytest.raises(ArchiveError, match=rf"^base: apt source {uri} bookworm-security: its Release file is "
                                                   r"dated 2026-11-24T00:00:00Z, older than the one already checked "
                                                   r"\(2026-12-01T00:00:00Z\): a replayed or rolled-back Release file"):
                ArchiveView.load(source, arch=ARCH, cache_dir=cache, max_age=0, check_valid_until=False)
            apt = _apt_update(tmp_path / "apt", line)
        # apt does not let the older file replace its newer one either (it keeps the newer, silently; the view says so).
        assert apt.returncode == 0 and "Candidate: 3.0.22-1" in apt.stdout, apt.stdout + apt.stderr
    finally:
        repo.close()


def _http_date(epoch: float) -> str:
    return time.strftime("%a, %d %b %Y %H:%M:%S UTC", time.gmtime(epoch))


def test_a_release_file_dated_in_the_future_is_not_valid_yet_as_apt_says(tmp_path):
    """Signed ahead of time (or by a mirror whose clock runs fast), a Release file would outrank every one published
    until its Date: refused beyond apt's 10 s of clock skew, as apt refuses it; a few seconds ahead pass, as in apt."""
    repo = AptRepo(tmp_path / "repo", suites=("bookworm-security",))
    try:
        repo.add_package("openssl", "3.0.22-1")
        repo.publish()
        with repo.serve() as uri:
            line = repo.source_line(str(repo.keyring))
            source = [Source("security", uri, "bookworm-security", ("main",), str(repo.keyring), "base")]
            ahead = time.time() + 3600
            _resign(repo, "bookworm-security", lambda t: _date(t, _http_date(ahead)))
            with pytest.raises(ArchiveError, match=rf"^base: apt source {uri} bookworm-security: its Release file is "
                                                   r"dated \S+, 3[56]\d\d s ahead of this host's clock \(.*\): not "
                                                   r"valid yet - check this host's clock"):
                ArchiveView.load(source, arch=ARCH, cache_dir=str(tmp_path / "cache"), max_age=0)
            refused = _apt_update(tmp_path / "apt-ahead", line, *APT_CHECKS_DATES)
            _resign(repo, "bookworm-security", lambda t: _date(t, _http_date(time.time() + 3)))
            view = ArchiveView.load(source, arch=ARCH, cache_dir=str(tmp_path / "cache"), max_age=0)
            assert view.candidate("openssl")[0] == "3.0.22-1"
            skewed = _apt_update(tmp_path / "apt-skew", line, *APT_CHECKS_DATES)
        assert "not valid yet" in refused.stderr, refused.stdout + refused.stderr
        assert skewed.returncode == 0 and "Candidate: 3.0.22-1" in skewed.stdout, skewed.stdout + skewed.stderr
        assert archive.release_problem("bookworm", {"Codename": "bookworm", "Date": _http_date(1000.0 + 10)},
                                       now=1000.0) is None  # the skew allowed, to the second
    finally:
        repo.close()


# -- finding 5: a security suite's version is never hidden ---------------------------------------------------

@pytest.fixture(scope="module", name="three")
def fixture_three(tmp_path_factory):
    """The release (openssl 3.0.20), its security suite (3.0.22) and backports (3.1.0~bpo12+1)."""
    base = tmp_path_factory.mktemp("three")
    repo = AptRepo(base / "repo", suites=("bookworm", "bookworm-security", "bookworm-backports"))
    repo.add_package("openssl", "3.0.20-1", suite="bookworm")
    repo.add_package("openssl", "3.0.22-1", suite="bookworm-security")
    repo.add_package("openssl", "3.1.0-1~bpo12+1", suite="bookworm-backports")
    repo.add_package("curl", "7.88.1-10", suite="bookworm")
    repo.add_package("curl", "8.5.0-1~bpo12+1", suite="bookworm-backports")
    repo.publish()
    uri = f"file://{repo.root}"
    sources = [Source("release", uri, "bookworm", ("main",), str(repo.keyring), "base"),
               Source("security", uri, "bookworm-security", ("main",), str(repo.keyring), "base"),
               Source("extra", uri, "bookworm-backports", ("main",), str(repo.keyring), "base")]
    yield repo, sources
    repo.close()


def test_a_newer_version_elsewhere_does_not_hide_a_pending_security_update(three, tmp_path):
    _repo, sources = three
    view = ArchiveView.load(sources, arch=ARCH, cache_dir=str(tmp_path / "cache"))
    assert view.candidate("openssl")[0] == "3.1.0-1~bpo12+1"  # the newest anywhere: not the point
    fix = Update("openssl", "3.0.20-1", "3.0.22-1", "bookworm-security", True)
    installed = {"openssl": "3.0.20-1", "curl": "7.88.1-10"}
    assert pending_updates(view, installed, "security") == [fix]
    assert pending_updates(view, installed, "any") == [
        fix, Update("curl", "7.88.1-10", "8.5.0-1~bpo12+1", "bookworm-backports", False)]
    # Installed from backports above the security suite: no security update pending (the fix is in it).
    assert pending_updates(view, {"openssl": "3.1.0-1~bpo12+1"}, "any") == []
    # pack's gate: an image holding 3.0.20 has a pending security update, whatever backports carries.
    freshness = verify_freshness.check(view, {"openssl": "3.0.20-1"})
    with pytest.raises(verify_freshness.StaleImageError, match=r"openssl 3.0.20-1 -> 3.0.22-1"):
        verify_freshness.gate(freshness, "refuse", "compute:1")


# -- finding 7: sizes and a deadline ----------------------------------------------------------------------------

class _Mirror(http.server.BaseHTTPRequestHandler):
    """A hostile or failing mirror on loopback; the class attributes choose how."""

    drip = False  # send an InRelease byte by byte, forever
    endless = False  # send an InRelease without end
    failures = 0  # answer 503 to this many requests first
    requests: list[str] = []

    def do_GET(self):  # noqa: N802  pylint: disable=invalid-name
        type(self).requests.append(self.path)
        if type(self).failures > 0:
            type(self).failures -= 1
            self.send_error(503)
            return
        self.send_response(200)
        self.end_headers()
        try:
            while type(self).drip or type(self).endless:
                self.wfile.write(b"x" if type(self).drip else b"x" * 65536)
                self.wfile.flush()
                if type(self).drip:
                    time.sleep(0.2)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, format, *args):  # noqa: A002  pylint: disable=redefined-builtin
        """Quiet."""


@pytest.fixture(name="mirror")
def fixture_mirror():
    handler = type("Mirror", (_Mirror,), {"requests": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield handler, f"http://127.0.0.1:{server.server_address[1]}/"
    handler.drip = handler.endless = False
    server.shutdown()
    server.server_close()


def test_a_release_file_without_end_is_cut_at_apts_limit(mirror, tmp_path):
    handler, uri = mirror
    handler.endless = True
    source = [Source("security", uri, "bookworm-security", ("main",), None, "base")]
    with pytest.raises(ArchiveError, match=rf"dists/bookworm-security/InRelease is larger than the "
                                           rf"{archive.MAX_RELEASE_BYTES} bytes it may have"):
        ArchiveView.load(source, arch=ARCH, cache_dir=str(tmp_path / "cache"), retry_delays=())


def test_a_dripping_mirror_meets_the_deadline(mirror, tmp_path):
    handler, uri = mirror
    handler.drip = True
    source = [Source("security", uri, "bookworm-security", ("main",), None, "base")]
    started = time.monotonic()
    with pytest.raises(ArchiveError, match=r"InRelease was still downloading when the time allowed for the archive "
                                           r"check ran out"):
        ArchiveView.load(source, arch=ARCH, cache_dir=str(tmp_path / "cache"), deadline=2, retry_delays=())
    assert time.monotonic() - started < 6  # each read returns within the timeout: the deadline ends the drip
    lock = archive.Flock(str(tmp_path / "cache" / "lock"), "test")
    lock.acquire(timeout=1)
    lock.release()


# -- retries -------------------------------------------------------------------------------------------------

def test_a_failing_mirror_is_tried_again_then_named_with_what_was_tried(mirror, tmp_path, monkeypatch):
    handler, uri = mirror
    handler.failures = 2
    # 503 twice, then the answer (a 200 with an empty body: no valid Release file, which is the next check).
    source = [Source("security", uri, "bookworm-security", ("main",), None, "base")]
    with pytest.raises(ArchiveError, match="is not signed by a key of"):
        ArchiveView.load(source, arch=ARCH, cache_dir=str(tmp_path / "cache"), retry_delays=(0.05, 0.05, 0.05))
    assert handler.requests == ["/dists/bookworm-security/InRelease"] * 3
    handler.failures = 10
    handler.requests.clear()
    with pytest.raises(ArchiveError, match=rf"^base: apt source {uri} bookworm-security: HTTP 503 .* for "
                                           rf"{uri}dists/bookworm-security/InRelease \(3 tries over \d+ s\) - check the "
                                           r"mirror URI"):
        ArchiveView.load(source, arch=ARCH, cache_dir=str(tmp_path / "cache"), retry_delays=(0.05, 0.05))
    assert len(handler.requests) == 3


def test_retries_only_transient_faults_and_stop_at_the_deadline():
    calls = []

    def fetch(url, **options):
        calls.append(options)
        raise FetchFailed("cannot reach x: [Errno -3] Temporary failure in name resolution", transient=True)

    slept: list[float] = []
    tries = len(archive.RETRY_DELAYS) + 1
    with pytest.raises(FetchFailed, match=rf"Temporary failure in name resolution \({tries} tries over"):
        archive.fetch_with_retries(fetch, "http://x/", sleep=slept.append)
    # About a minute in all: the build hosts' resolver outages last about 10 s, some over 15 s.
    assert slept == list(archive.RETRY_DELAYS) and len(calls) == tries and sum(slept) >= 60
    calls.clear()
    with pytest.raises(FetchFailed, match=r"\(2 tries over 0 s, out of time\)$"):
        archive.fetch_with_retries(fetch, "http://x/", deadline=time.monotonic() + 1.5, sleep=lambda s: None)

    def refused(url, **options):
        raise FetchFailed("unsupported URI scheme 'ftp'")
    with pytest.raises(FetchFailed, match=r"^unsupported URI scheme 'ftp'$"):
        archive.fetch_with_retries(refused, "ftp://x/", sleep=slept.append)
