"""Throw-away GnuPG release keys for the signing tests (unit, integration and faults).

Each key is an ed25519 key made with ``gpg --quick-gen-key`` in a temporary GnuPG home of its
own; the user's keyring is never read or written. :meth:`SigningKey.close` stops the gpg-agent
that signing started for that home.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator

SIGNATURE = "SHA256SUMS.asc"
SUMS = "SHA256SUMS"


class SigningKey:
    """A site release key: its GnuPG home, fingerprint and exported public key (armored and binary)."""

    def __init__(self, base: Path, name: str) -> None:
        self.name = name
        # A short home under /tmp, not under ``base``: gpg-agent's sockets live in the home when /run/user/<uid> is
        # missing, and a socket path has at most 107 bytes (pytest-xdist's per-worker tmp_path, popen-gwN/, went over).
        self.home = Path(tempfile.mkdtemp(prefix=f"gpg-{name[:12]}-"))
        try:
            base.mkdir(parents=True, exist_ok=True)  # where the public keys go
            self.gpg("--passphrase", "", "--quick-gen-key", f"{name} release <{name}@example.invalid>", "ed25519",
                     "sign", "never")
            colons = self.gpg("--with-colons", "--list-secret-keys").decode()
            self.fingerprint = next(line.split(":")[9] for line in colons.splitlines() if line.startswith("fpr:"))
            self.armored = base / f"{name}.asc"
            self.armored.write_bytes(self.gpg("--armor", "--export", self.fingerprint))
            self.binary = base / f"{name}.gpg"
            self.binary.write_bytes(self.gpg("--export", self.fingerprint))
        except BaseException:
            self.close()  # the home under /tmp is no test's directory: nothing else would remove it
            raise

    def gpg(self, *args: str) -> bytes:
        return subprocess.run(["gpg", "--homedir", str(self.home), "--batch", *args], check=True,
                              capture_output=True).stdout

    def sign_file(self, path: Path) -> None:
        """Sign ``path`` into ``path.asc`` with plain gpg (what an attacker with this key would do)."""
        self.gpg("--yes", "--local-user", self.fingerprint, "--armor", "--detach-sign", "--output",
                 str(path) + ".asc", str(path))

    def close(self) -> None:
        subprocess.run(["gpgconf", "--homedir", str(self.home), "--kill", "gpg-agent"], check=False,
                       capture_output=True)
        shutil.rmtree(self.home, ignore_errors=True)


@contextlib.contextmanager
def throwaway_key(base: Path, name: str) -> Iterator[SigningKey]:
    """A :class:`SigningKey` for the block (a module's fixture: ``with throwaway_key(...) as key: yield key``),
    its gpg-agent stopped and its home removed after."""
    key = SigningKey(base, name)
    try:
        yield key
    finally:
        key.close()


def gpgv(keyring: Path, directory: Path) -> subprocess.CompletedProcess:
    """The real gpgv on ``directory``'s SHA256SUMS.asc, as an admin runs it (with an empty GnuPG home)."""
    with tempfile.TemporaryDirectory() as home:
        return subprocess.run(["gpgv", "--homedir", home, "--keyring", str(keyring), SIGNATURE, SUMS], cwd=directory,
                              capture_output=True, text=True, check=False)


def sha256sum_check(directory: Path) -> subprocess.CompletedProcess:
    """``sha256sum -c --strict --ignore-missing`` in ``directory``: the published files of the signed list."""
    return subprocess.run(["sha256sum", "-c", "--strict", "--ignore-missing", SUMS], cwd=directory,
                          capture_output=True, text=True, check=False)
