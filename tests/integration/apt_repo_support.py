"""A local Debian-style apt repository for the freshness tests (issue 27), built for real in the test.

* packages: tiny ``Architecture: all`` binary packages made with ``dpkg-deb`` (one file each,
  ``/usr/share/<name>/version``), kept in ``pool/``;
* indexes: ``apt-ftparchive packages`` (Packages, .gz, .xz) and ``apt-ftparchive release``;
* signature: ``InRelease`` (clear-signed) and ``Release.gpg`` (detached) by a throw-away ed25519 key
  (tests/unit/plugins/module_utils/signing_keys.py), whose public key is :attr:`AptRepo.keyring`
  for ``Signed-By``;
* served over HTTP on 127.0.0.1 by a thread of the test process (:meth:`AptRepo.serve`), so a build's
  working container (chroot isolation: the host's network) and the controller see the same URI.
  Python's handler answers ``If-Modified-Since`` with 304, as a mirror does.

Nothing here is a double: apt, gpgv and the collection's archive reader read these files as they
read deb.debian.org.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterator

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "unit" / "plugins" / "module_utils"))
from signing_keys import SigningKey  # noqa: E402  pylint: disable=wrong-import-position

ARCH = "amd64"


def _run(*argv: str, cwd: Path | None = None) -> bytes:
    proc = subprocess.run(list(argv), cwd=cwd, capture_output=True, check=False)
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} failed (rc={proc.returncode}): "
                             f"{proc.stderr.decode('utf-8', 'replace')}")
    return proc.stdout


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002  pylint: disable=redefined-builtin
        """No access log on the test's stderr."""


class AptRepo:
    """A signed repository under ``root`` with one component and one or more suites (``deb <uri> <suite> <component>``),
    each with its own pool ``pool/<suite>/``, all signed by one key (as a distribution's suites are)."""

    def __init__(self, root: Path, suites: tuple[str, ...] = ("site",), component: str = "main",
                 origin: str = "hpc-test") -> None:
        self.root = root
        self.suites = suites
        self.suite = suites[0]
        self.component = component
        self.origin = origin
        for suite in suites:
            (self.root / "pool" / suite).mkdir(parents=True, exist_ok=True)
        self.key = SigningKey(self.root.parent, f"apt-{root.name}")
        #: The public key, binary (what /etc/apt/keyrings/<name>.gpg holds and gpgv --keyring reads).
        self.keyring = self.key.binary
        self.uri = ""
        self._stamp = 0

    # -- content -----------------------------------------------------------------------------
    def add_package(self, name: str, version: str, suite: str | None = None,
                    description: str = "freshness test package") -> Path:
        """Build ``<name>_<version>_all.deb`` into the pool of ``suite`` (default the first; not yet in the
        indexes: :meth:`publish`)."""
        with tempfile.TemporaryDirectory(dir=self.root.parent) as work:
            tree = Path(work, "tree")
            (tree / "DEBIAN").mkdir(parents=True)
            (tree / "usr/share" / name).mkdir(parents=True)
            (tree / "usr/share" / name / "version").write_text(version + "\n", encoding="utf-8")
            (tree / "DEBIAN/control").write_text(
                f"Package: {name}\nVersion: {version}\nArchitecture: all\nMaintainer: hpc.stateless tests "
                f"<tests@example.invalid>\nSection: misc\nPriority: optional\nDescription: {description}\n",
                encoding="utf-8")
            deb = self.root / "pool" / (suite or self.suite) / f"{name}_{version}_all.deb"
            _run("dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(tree), str(deb))
        return deb

    def publish(self) -> None:
        """Write the indexes of every suite's pool and sign them: what a mirror does on an update."""
        # HTTP's Last-Modified counts seconds: a second publish within the same second must still look newer
        # to a client's If-Modified-Since, as it would on a mirror.
        self._stamp = max(int(time.time()), self._stamp + 1)
        for suite in self.suites:
            self._publish_suite(suite)

    def _publish_suite(self, suite: str) -> None:
        dists = self.root / "dists" / suite
        binary = dists / self.component / f"binary-{ARCH}"
        binary.mkdir(parents=True, exist_ok=True)
        packages = _run("apt-ftparchive", "packages", f"pool/{suite}", cwd=self.root)
        (binary / "Packages").write_bytes(packages)
        _run("sh", "-c", "gzip -9nc Packages > Packages.gz && xz -c Packages > Packages.xz", cwd=binary)
        for name in ("Release", "InRelease", "Release.gpg"):
            (dists / name).unlink(missing_ok=True)
        release = _run("apt-ftparchive",
                       "-o", f"APT::FTPArchive::Release::Origin={self.origin}",
                       "-o", f"APT::FTPArchive::Release::Label={self.origin}",
                       "-o", f"APT::FTPArchive::Release::Suite={suite}",
                       "-o", f"APT::FTPArchive::Release::Codename={suite}",
                       "-o", f"APT::FTPArchive::Release::Architectures={ARCH}",
                       "-o", f"APT::FTPArchive::Release::Components={self.component}",
                       "release", ".", cwd=dists)
        (dists / "Release").write_bytes(release)
        fpr = self.key.fingerprint
        self.key.gpg("--yes", "--local-user", fpr, "--digest-algo", "SHA256", "--clearsign",
                     "--output", str(dists / "InRelease"), str(dists / "Release"))
        self.key.gpg("--yes", "--local-user", fpr, "--digest-algo", "SHA256", "--armor", "--detach-sign",
                     "--output", str(dists / "Release.gpg"), str(dists / "Release"))
        for path in dists.rglob("*"):
            os.utime(path, (self._stamp, self._stamp))

    # -- serving -----------------------------------------------------------------------------
    @contextlib.contextmanager
    def serve(self) -> Iterator[str]:
        """Serve the repository on 127.0.0.1 (a free port) while the block runs; yields its URI."""
        handler = functools.partial(_QuietHandler, directory=str(self.root))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        thread = threading.Thread(target=server.serve_forever, name="apt-repo", daemon=True)
        thread.start()
        self.uri = f"http://127.0.0.1:{server.server_address[1]}/"
        try:
            yield self.uri
        finally:
            server.shutdown()
            server.server_close()
            thread.join(10)
            self.uri = ""

    def source_line(self, keyring: str, suite: str | None = None) -> str:
        """The one-line apt source of ``suite`` (default the first), signed by ``keyring`` (a path as apt sees it)."""
        return f"deb [signed-by={keyring}] {self.uri} {suite or self.suite} {self.component}\n"

    def close(self) -> None:
        self.key.close()


def apt_policy(root: Path, source_line: str, package: str, *options: str) -> subprocess.CompletedProcess:
    """``apt-get update`` then ``apt-cache policy <package>`` with only ``source_line`` as source, in a private
    apt state directory under ``root`` (the host's apt configuration and lists are not touched; its settings apply,
    ``options`` - ``-o`` pairs - after them)."""
    for sub in ("etc/apt/sources.list.d", "etc/apt/preferences.d", "etc/apt/apt.conf.d", "etc/apt/trusted.gpg.d",
                "var/lib/apt/lists/partial", "var/cache/apt/archives/partial", "var/lib/dpkg"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (root / "var/lib/dpkg/status").touch()
    (root / "etc/apt/sources.list").write_text(source_line, encoding="utf-8")
    options = ["-o", f"Dir={root}", "-o", f"Dir::State::status={root}/var/lib/dpkg/status",
               "-o", "Dir::Etc::trusted=/dev/null", "-o", f"Dir::Etc::TrustedParts={root}/etc/apt/trusted.gpg.d",
               "-o", "APT::Sandbox::User=root", "-o", "Debug::NoLocking=1", *options]
    update = subprocess.run(["apt-get", *options, "update"], capture_output=True, text=True, check=False)
    if update.returncode != 0 or "W: " in update.stderr or "E: " in update.stderr:
        return update
    return subprocess.run(["apt-cache", *options, "policy", package], capture_output=True, text=True, check=False)
