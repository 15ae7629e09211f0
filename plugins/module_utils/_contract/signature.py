# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Signed releases: a GnuPG detached, armored signature of a version directory's SHA256SUMS.

* :func:`sign` (pack side, module hpc.stateless.sign) signs ``<version_dir>/SHA256SUMS`` with the
  site's key from the site's GnuPG home and writes ``SHA256SUMS.asc`` atomically. A signature
  that already verifies with that key is kept (no change).
* :func:`verify` (deploy side, module hpc.stateless.bootlink) checks the exact bytes deploy is
  about to publish with ``gpgv`` against a plain keyring file: no trust database, no user
  keyring, nothing of the deploying user's GnuPG home is read or written. ``gpgv``'s machine
  readable status lines (``--status-fd``) say what was wrong, and the error names the file, the key
  that signed (when known) and the key(s) expected.

The keyring is a binary keyring (``gpg --export KEY > site.gpg``, a ``.kbx``) or an armored export
(``gpg --export --armor KEY > site.asc``); ``gpgv`` reads only binary ones, so armored blocks are
decoded here. Keys never live in the repository or in an image.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from ansible_collections.hpc.stateless.plugins.module_utils._paths import replacing
from ansible_collections.hpc.stateless.plugins.module_utils._process import ProcessError, run, which
from ansible_collections.hpc.stateless.plugins.module_utils._contract.names import SIGNATURE_FILE, SUMS_FILE

GPG_HINT = "install GnuPG (Debian: apt-get install gpg; RHEL: dnf install gnupg2)"
GPGV_HINT = "install gpgv (Debian: apt-get install gpgv; RHEL: dnf install gnupg2)"
STATUS_PREFIX = "[GNUPG:] "
ARMOR = re.compile(r"-----BEGIN PGP PUBLIC KEY BLOCK-----\r?\n(.*?)-----END PGP PUBLIC KEY BLOCK-----", re.S)
# ERRSIG return codes (GnuPG doc/DETAILS): 4 unknown algorithm, 9 missing public key.
ERRSIG_REASONS = {"4": "uses an algorithm this gpgv does not support", "9": "is not in the keyring"}
NODATA_REASONS = {"1": "no armored data", "2": "no OpenPGP packet where one was expected",
                  "3": "an invalid OpenPGP packet", "4": "no signature"}


class SignatureError(Exception):
    """A release whose signature is missing, does not verify or is by a key not expected; or signing failed."""


@dataclass(frozen=True)
class Signer:
    """Who made a good signature: the primary key's fingerprint, the (sub)key that signed, its user id."""

    fingerprint: str
    signing_key: str
    uid: str

    def as_dict(self) -> dict[str, str]:
        return {"fingerprint": self.fingerprint, "signing_key": self.signing_key, "uid": self.uid}


# --------------------------------------------------------------------------- gpgv status


@dataclass
class _Sig:
    """What gpgv said about one signature (one NEWSIG block)."""

    uid: str = ""
    valid: list[str] = field(default_factory=list)  # VALIDSIG fields
    problems: list[str] = field(default_factory=list)
    bad: bool = False  # BADSIG: the signed data or the signature was changed

    @property
    def good(self) -> bool:
        """A GOODSIG with its VALIDSIG and nothing against it (gpgv gives a signature by an expired or revoked
        key, or an expired signature, a VALIDSIG and exit status 0 too: those carry a problem)."""
        return len(self.valid) >= 10 and not self.problems


def parse_status(text: str, signed: str = SUMS_FILE, signature: str = SIGNATURE_FILE) -> tuple[list[_Sig], list[str]]:
    """(signatures, problems outside any signature) from gpgv's ``--status-fd`` lines; ``signed`` and
    ``signature`` name the checked files in the problems."""
    sigs: list[_Sig] = []
    general: list[str] = []
    for line in text.splitlines():
        if not line.startswith(STATUS_PREFIX):
            continue
        keyword, rest = (line[len(STATUS_PREFIX):].split(" ", 1) + [""])[:2]
        args = rest.split(" ")
        if keyword == "NEWSIG":
            sigs.append(_Sig())
            continue
        current = sigs[-1] if sigs else None
        problem = _problem(keyword, args, rest, signed, signature)
        if current is None:
            if problem:
                general.append(problem)
            continue
        if keyword in ("GOODSIG", "BADSIG", "EXPSIG", "EXPKEYSIG", "REVKEYSIG"):
            current.uid = rest.partition(" ")[2]
        if keyword == "VALIDSIG":
            current.valid = args
        current.bad = current.bad or keyword == "BADSIG"
        if problem:
            current.problems.append(problem)
    return sigs, general


def _problem(keyword: str, args: list[str], rest: str, signed: str = SUMS_FILE,
             signature: str = SIGNATURE_FILE) -> str:
    who = f"key {args[0]}" + (f" ({rest.partition(' ')[2]})" if rest.partition(" ")[2] else "")
    if keyword == "BADSIG":
        return (f"BAD signature by {who}: {signed} was changed after it was signed, or the signature was "
                "damaged")
    if keyword == "ERRSIG":
        # the issuer fingerprint, when the signature carries it; else the long key id
        issuer = args[6] if len(args) >= 7 and args[6] not in ("", "-") else args[0]
        reason = ERRSIG_REASONS.get(args[5] if len(args) >= 6 else "", f"cannot be checked (gpgv: ERRSIG {rest})")
        return f"signed by key {issuer}, which {reason}"
    if keyword == "EXPKEYSIG":
        return f"the signing {who} has expired"
    if keyword == "EXPSIG":
        return f"the signature by {who} has expired"
    if keyword == "REVKEYSIG":
        return f"the signing {who} was revoked"
    if keyword == "NODATA":
        return f"{signature} holds {NODATA_REASONS.get(args[0], 'no signature')} (damaged or not a signature)"
    if keyword == "BADARMOR":
        return f"{signature} has damaged ASCII armor"
    return ""


# --------------------------------------------------------------------------- keyring


def _armored_blocks(data: bytes) -> list[bytes] | None:
    """The binary packets of every armored public-key block in ``data``; None when ``data`` is not armored."""
    text = data.decode("ascii", "replace")
    blocks = ARMOR.findall(text)
    if not blocks:
        return None
    packets = []
    for block in blocks:
        # Armor headers ("Comment: ...") end at the first empty line; "=XXXX" is the CRC24 line.
        body = block.split("\n\n", 1)[1] if re.match(r"[A-Za-z-]+: ", block) else block
        lines = [line.strip() for line in body.splitlines() if line.strip() and not line.startswith("=")]
        packets.append(base64.b64decode("".join(lines), validate=True))
    return packets


def _keyring_file(keyring: str, workdir: str) -> str:
    """A path gpgv can read for ``keyring``: the file itself, or the decoded packets of an armored export."""
    try:
        with open(keyring, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        raise SignatureError(f"keyring {keyring}: missing; export the site's public signing key to it "
                             f"(gpg --export --armor <key> > {keyring})") from None
    except OSError as exc:
        raise SignatureError(f"keyring {keyring}: unreadable ({exc.strerror}); make it readable for the "
                             "deploying user") from None
    if not data.strip():
        raise SignatureError(f"keyring {keyring}: empty; export the site's public signing key to it "
                             f"(gpg --export --armor <key> > {keyring})")
    try:
        packets = _armored_blocks(data)
    except (binascii.Error, ValueError):
        raise SignatureError(f"keyring {keyring}: damaged ASCII armor; export the public key again") from None
    if packets is None:
        return os.path.abspath(keyring)
    path = os.path.join(workdir, "keyring.gpg")
    with open(path, "wb") as handle:
        handle.write(b"".join(packets))
    return path


def keyring_keys(keyring: str) -> list[str]:
    """``FINGERPRINT (user id)`` of each primary key in ``keyring`` (gpg --show-keys); [] when gpg cannot tell."""
    try:
        gpg = which("gpg", GPG_HINT)
    except ProcessError:
        return []
    with _workdir() as workdir:
        result = run([gpg, "--homedir", os.path.join(workdir, "home"), "--batch", "--with-colons", "--show-keys",
                      os.path.abspath(keyring)], check=False, timeout=60)
    keys: list[str] = []
    fingerprint, want_fpr = "", False
    for line in result.stdout.splitlines():
        fields = line.split(":")
        if fields[0] == "pub":
            want_fpr, fingerprint = True, ""
        elif fields[0] == "fpr" and want_fpr and len(fields) > 9:
            fingerprint, want_fpr = fields[9], False
            keys.append(fingerprint)
        elif fields[0] == "uid" and fingerprint and keys and keys[-1] == fingerprint and len(fields) > 9:
            keys[-1] = f"{fingerprint} ({_unescape(fields[9])})"
    return keys


def _unescape(value: str) -> str:
    return re.sub(r"\\x([0-9a-fA-F]{2})", lambda m: chr(int(m.group(1), 16)), value)


def normalize_fingerprint(value: str) -> str:
    """Upper-case hex without spaces; SignatureError unless it is a 40 (v4) or 64 (v5) digit fingerprint."""
    compact = re.sub(r"\s+", "", str(value)).upper().removeprefix("0X")
    if not re.fullmatch(r"[0-9A-F]{40}|[0-9A-F]{64}", compact):
        raise SignatureError(f"signer {value!r} is not a key fingerprint (40 hex digits, as "
                             "'gpg --fingerprint <key>' prints it); key ids and user ids are too easy to collide")
    return compact


# --------------------------------------------------------------------------- verify


@contextlib.contextmanager
def _workdir() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="hpc-stateless-gpg-")
    try:
        os.mkdir(os.path.join(path, "home"), 0o700)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def verify(data: bytes, signature: bytes | None, keyring: str, signers: Sequence[str] = (),
           where: str = SUMS_FILE) -> Signer:
    """Check ``signature`` (armored, detached) over ``data`` with the keys of ``keyring``.

    ``where`` names the signed file in errors. With ``signers`` (fingerprints), the signature must
    also be by one of them (a primary key fingerprint, or the signing subkey's). Returns the signer;
    raises SignatureError naming ``where``, the problem and the key(s) expected.
    """
    wanted = [normalize_fingerprint(fpr) for fpr in signers]
    if signature is None:
        raise SignatureError(_refusal(where, f"{signature_name(where)} is missing: the release is not signed",
                                      keyring, wanted,
                                      "sign it with the site's key (hpc.stateless.sign, or pack with "
                                      "hpc_stateless_sign_key)"))
    gpgv = which("gpgv", GPGV_HINT)
    with _workdir() as workdir:
        ring = _keyring_file(keyring, workdir)
        sig_path, data_path = os.path.join(workdir, SIGNATURE_FILE), os.path.join(workdir, SUMS_FILE)
        with open(sig_path, "wb") as handle:
            handle.write(signature)
        with open(data_path, "wb") as handle:
            handle.write(data)
        result = run([gpgv, "--homedir", os.path.join(workdir, "home"), "--keyring", ring, "--status-fd", "1",
                      sig_path, data_path], check=False, timeout=120)
    sigs, general = parse_status(result.stdout)
    problems = general + [problem for sig in sigs for problem in sig.problems]
    if not sigs and not problems:
        problems.append(f"{SIGNATURE_FILE} holds no OpenPGP signature gpgv can read (gpgv: "
                        f"{result.stderr.strip()[-300:] or 'rc ' + str(result.rc)})")
    if not problems and (result.rc != 0 or any(len(sig.valid) < 10 for sig in sigs)):
        problems.append(f"gpgv did not confirm the signature (rc {result.rc}: {result.stderr.strip()[-300:]})")
    if problems:
        raise SignatureError(_refusal(where, "; ".join(dict.fromkeys(problems)), keyring, wanted,
                                      _next_step(problems)))
    good = [Signer(fingerprint=sig.valid[9].upper(), signing_key=sig.valid[0].upper(), uid=sig.uid) for sig in sigs]
    if wanted:
        accepted = [signer for signer in good if {signer.fingerprint, signer.signing_key} & set(wanted)]
        if not accepted:
            made = ", ".join(f"{signer.fingerprint} ({signer.uid})" for signer in good)
            raise SignatureError(_refusal(where, f"signed by {made}, which is in the keyring but not a required "
                                          "signer", keyring, wanted,
                                          "sign it with a required key, or add the key to the signers"))
        return accepted[0]
    return good[0]


def _next_step(problems: list[str]) -> str:
    if any("not in the keyring" in problem for problem in problems):
        return ("sign it with the site's key, or add the signer's public key to the keyring if it is trusted")
    if any("BAD signature" in problem for problem in problems):
        return f"find out who changed {SUMS_FILE}; if the change is intended, sign it again (hpc.stateless.sign)"
    return "sign it again with the site's key (hpc.stateless.sign)"


def _refusal(where: str, problem: str, keyring: str, wanted: list[str], step: str) -> str:
    if wanted:
        expected = "a signature by " + " or ".join(wanted) + f" (keyring {keyring})"
    else:
        keys = keyring_keys(keyring) if os.path.isfile(keyring) else []
        expected = "a signature by " + (" or ".join(keys) if keys else "a key") + f" from keyring {keyring}"
    return f"signature check of {where} failed: {problem}; expected {expected}: {step}"


def verify_files(sums_path: str, keyring: str, signers: Sequence[str] = ()) -> Signer:
    """:func:`verify` of ``sums_path`` and the ``.asc`` next to it, as they are on disk."""
    data = read_optional(sums_path)
    if data is None:
        raise SignatureError(f"{sums_path}: missing; the pack step writes {SUMS_FILE} next to the artifacts")
    return verify(data, read_optional(signature_name(sums_path)), keyring, signers, sums_path)


def signature_name(sums_path: str) -> str:
    """The signature file next to ``sums_path`` (``.../SHA256SUMS`` -> ``.../SHA256SUMS.asc``)."""
    return os.path.join(os.path.dirname(sums_path), SIGNATURE_FILE)


def read_optional(path: str) -> bytes | None:
    """The content of ``path``; None when it does not exist (other OSErrors propagate)."""
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


# --------------------------------------------------------------------------- sign


@dataclass(frozen=True)
class SignResult:
    changed: bool
    signature: str
    fingerprint: str
    uid: str


class Gpg:
    """The signing side: ``gpg`` against the site's GnuPG home (``gnupghome``, else $GNUPGHOME or ~/.gnupg)."""

    def __init__(self, gnupghome: str | None = None, passphrase_file: str | None = None) -> None:
        self.gnupghome = gnupghome
        self.passphrase_file = passphrase_file

    def _argv(self, *args: str) -> list[str]:
        home = ["--homedir", self.gnupghome] if self.gnupghome else []
        return [which("gpg", GPG_HINT), *home, "--batch", "--no-tty", *args]

    @property
    def home_name(self) -> str:
        return self.gnupghome or os.environ.get("GNUPGHOME") or "~/.gnupg"

    def secret_key(self, key: str) -> tuple[str, str]:
        """(primary fingerprint, first user id) of the one secret key ``key`` names; SignatureError otherwise."""
        if self.gnupghome and not os.path.isdir(self.gnupghome):
            raise SignatureError(f"GnuPG home {self.gnupghome}: does not exist; set hpc_stateless_sign_gnupghome "
                                 "(gnupghome) to the directory that holds the site's release key")
        result = run(self._argv("--with-colons", "--list-secret-keys", "--", key), check=False, timeout=60)
        found: list[list[str]] = []
        for line in result.stdout.splitlines():
            fields = line.split(":")
            if fields[0] == "sec":
                found.append([])
            elif found and fields[0] == "fpr" and len(found[-1]) == 0 and len(fields) > 9:
                found[-1].append(fields[9])
            elif found and fields[0] == "uid" and len(found[-1]) == 1 and len(fields) > 9:
                found[-1].append(_unescape(fields[9]))
        if not found:
            raise SignatureError(f"signing key {key!r}: no secret key in GnuPG home {self.home_name}; list the keys "
                                 "there with 'gpg --list-secret-keys' and set hpc_stateless_sign_key (key) to the "
                                 "fingerprint of the site's release key, hpc_stateless_sign_gnupghome (gnupghome) to "
                                 "its GnuPG home")
        if len(found) > 1:
            raise SignatureError(f"signing key {key!r} names {len(found)} secret keys in {self.home_name} "
                                 f"({', '.join(entry[0] for entry in found if entry)}); give the fingerprint")
        entry = found[0] + ["", ""]
        return entry[0].upper(), entry[1]

    def export(self, fingerprint: str) -> bytes:
        return run(self._argv("--export", "--", fingerprint), text=False, timeout=60,
                   hint=f"export of the public key from {self.home_name} failed").stdout

    def detach_sign(self, fingerprint: str, source: str, output: str) -> None:
        secret = (["--pinentry-mode", "loopback", "--passphrase-file", self.passphrase_file]
                  if self.passphrase_file else [])
        try:
            run(self._argv(*secret, "--yes", "--local-user", fingerprint, "--armor", "--detach-sign",
                           "--output", output, "--", source), timeout=300)
        except ProcessError as exc:
            raise SignatureError(f"signing {source} with key {fingerprint} from {self.home_name} failed: "
                                 f"{exc.stderr[-500:]}; if the key has a passphrase, give passphrase_file "
                                 "(hpc_stateless_sign_passphrase_file) or unlock it in gpg-agent first") from None


def sign(version_dir: str, key: str, gnupghome: str | None = None, passphrase_file: str | None = None,
         check_mode: bool = False) -> SignResult:
    """Sign ``<version_dir>/SHA256SUMS`` with ``key``; keep a SHA256SUMS.asc that already verifies with it."""
    gpg = Gpg(gnupghome, passphrase_file)
    fingerprint, uid = gpg.secret_key(key)
    sums_path = os.path.join(version_dir, SUMS_FILE)
    target = os.path.join(version_dir, SIGNATURE_FILE)
    data = read_optional(sums_path)
    if data is None:
        if check_mode and not os.path.isdir(version_dir):
            return SignResult(True, target, fingerprint, uid)  # the pack before this step would create it
        raise SignatureError(f"{sums_path}: missing; point version_dir at a pack version directory "
                             "(<output_dir>/<image>/<version>) and pack first")
    with _workdir() as workdir:
        ring = os.path.join(workdir, "signer.gpg")
        with open(ring, "wb") as handle:
            handle.write(gpg.export(fingerprint))
        existing = read_optional(target)
        if existing is not None:
            with contextlib.suppress(SignatureError):
                verify(data, existing, ring, [fingerprint], sums_path)
                return SignResult(False, target, fingerprint, uid)
        if check_mode:
            return SignResult(True, target, fingerprint, uid)
        _write_signature(gpg, fingerprint, sums_path, target, ring, data)
    return SignResult(True, target, fingerprint, uid)


def _write_signature(gpg: Gpg, fingerprint: str, sums_path: str, target: str, ring: str, data: bytes) -> None:
    """Sign into a temp file next to ``target``, check it, sync it, rename it over ``target``."""
    try:
        with replacing(target) as temp:
            gpg.detach_sign(fingerprint, sums_path, temp)
            with open(temp, "rb") as handle:
                made = handle.read()
                os.fsync(handle.fileno())
            if read_optional(sums_path) != data:
                raise SignatureError(f"{sums_path} changed while it was being signed; is a pack still running? "
                                     "Sign again when it is done")
            verify(data, made, ring, [fingerprint], sums_path)
    except OSError as exc:
        raise SignatureError(f"writing {target} failed ({exc.strerror}); check that {os.path.dirname(target)} "
                             "is writable") from None
