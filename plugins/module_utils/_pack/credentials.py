# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Cloud and service credentials by content, in the forms the tools that use them write.

:func:`credential` looks at a text window (what :mod:`.secrets` read of a file) and says which
credential it holds and where, or None. Each form is looked for only when a literal that every
instance of it contains is in the window (``AKIA``, ``AccountKey=``, ...), so that text without
one costs a few substring searches. What each form must be, beyond its shape, so that
documentation, templates and prose stay quiet:

* AWS: an access key id (``AKIA``/``ASIA`` and 16 upper-case letters and digits) with a secret
  access key (40 characters of base64's alphabet, upper and lower case) within 512 bytes of it. An
  id alone names a key, it is not one; ids and secrets that contain ``EXAMPLE`` are AWS's
  documentation examples (``AKIAIOSFODNN7EXAMPLE``).
* A PEM private key as a JSON string (``"-----BEGIN PRIVATE KEY-----\\n..."``: a GCP
  service-account key file's ``private_key``, a Terraform state): the string, unescaped, must
  hold a private-key block as :mod:`.secrets` defines it (a template's ``...`` body does not).
* A PEM private key in base64 (a kubeconfig's ``client-key-data``, a Kubernetes Secret's
  ``tls.key``): ``LS0tLS1CRUdJTi`` is ``-----BEGIN `` in base64; decoded, the same test.
* Azure connection strings: ``AccountKey=`` (a storage account key, 64 bytes) or
  ``SharedAccessKey=`` (32 or 64 bytes) in base64, varied bytes (not a run of ``A``), not the
  storage emulator's published key.
* HashiCorp Vault tokens: ``hvs.``/``hvb.``/``hvr.`` and at least 24 characters of mixed case;
  the legacy ``s.`` + 24 characters only in a file that says ``vault`` or holds the token alone
  (``~/.vault-token``).
* ``.pgpass``: every line that is not blank or a comment is ``host:port:database:user:password``
  (port a number or ``*``) and a password is not a placeholder; ``.netrc``: the file is netrc
  tokens from its first word on (``machine``/``default``, ``login``, ``password``, ...) and a
  ``password`` is given. Prose that shows one line of either is not the file.
* Container registry auths (docker's ``config.json``, podman's ``auth.json``): an ``"auths"``
  object with an ``"auth"`` that is base64 of ``user:password``, or an ``"identitytoken"``.

* Account databases: ``/etc/shadow`` (and its backup ``shadow-``), ``/etc/passwd`` and ``/etc/gshadow``
  by their format (every line one entry of nine, seven or four fields, the numeric ones numbers): an
  account whose password field holds a crypt hash (``$6$...``, ``$y$...``, DES), or an empty one in
  shadow or passwd (the account logs in without a password). A field that starts with ``!`` or ``*``
  is locked (``!$6$...`` too), ``x`` in passwd is shadowed: neither is reported.
* ``.htpasswd`` files: every line ``user:hash`` with an Apache hash (``$apr1$``, ``{SHA}``, bcrypt,
  crypt).
* LDAP bind passwords: sssd's ``ldap_default_authtok`` (an ``obfuscated_password`` is reversible, so
  it counts), ``bindpw``/``rootbindpw`` of nslcd.conf, pam_ldap.conf and libnss-ldap.conf (the
  ``ldap.secret`` files that hold the password alone are named by :mod:`.tree`'s name rules).
* Slurm's database password: ``StoragePass`` (slurmdbd.conf) and ``AccountingStoragePass``
  (slurm.conf), as written or in lower case (Slurm reads keys in any case).
* Passwords in URLs (``https://user:password@host``) on the lines of package sources and proxies
  (apt's ``deb``/``URIs:``/``Acquire::...::Proxy``, yum's ``baseurl``/``mirrorlist``/``metalink``,
  pip's ``index-url``, npm's ``registry``, ``proxy``) and in git's credential store
  (``.git-credentials``: every line such a URL); apt's ``auth.conf`` is netrc, above.
* npm's ``.npmrc`` ``_authToken``/``_password``/``_auth``.
* Service tokens by their prefix (:mod:`.tokens`: GitHub, GitLab, Slack, Stripe, npm, PyPI, JWTs, ...).

Placeholders (``<password>``, ``${PASSWORD}``, ``xxxx``, ``changeme``, the word ``password``) are
not passwords.
"""

from __future__ import annotations

import binascii
import json
import re
from collections.abc import Iterator
from typing import Callable

from ansible_collections.hpc.stateless.plugins.module_utils._pack import tokens

# A private-key test on text: the form found ("PEM RSA private key block at byte 0"), or None.
KeyTest = Callable[[bytes], "str | None"]

_WINDOW = 512
_MAX_MATCHES = 64

_AWS_ID = re.compile(rb"(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])")
_AWS_SECRET = re.compile(rb"(?<![A-Za-z0-9/+])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")
_EXAMPLE = b"EXAMPLE"

_JSON_PEM = re.compile(rb'"(-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----\\n(?:[^"\\\r\n]|\\.){0,65536})"')
_SERVICE_ACCOUNT = re.compile(rb'"type"\s*:\s*"service_account"')
_BASE64_PEM = re.compile(rb"LS0tLS1CRUdJTi[A-Za-z0-9+/]{20,}={0,2}")
_KUBE_KEY = re.compile(rb"client-key-data\"?\s*:\s*\"?$")

_AZURE = re.compile(rb"(AccountKey|SharedAccessKey)=([A-Za-z0-9+/]{40,}={0,2})")
_AZURE_SIZES = {b"AccountKey": (64,), b"SharedAccessKey": (32, 64)}
# The storage emulator's (Azurite's) account key, published in Microsoft's documentation.
AZURE_EMULATOR_KEY = b"Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="

_VAULT = re.compile(rb"hv[sbr]\.[A-Za-z0-9_-]{24,}(?![A-Za-z0-9_.-])")
_VAULT_LEGACY = re.compile(rb"s\.[A-Za-z0-9]{24}(?![A-Za-z0-9_.-])")
_VAULT_CONTEXT = re.compile(rb"vault", re.I)
_LONE_TOKEN = 64  # a file this short may be a token alone (~/.vault-token)
_TOKEN_CHAR = re.compile(rb"[A-Za-z0-9_.-]")

_PGPASS_FIELD = rb"(?:[^:\s\\]|\\.)+"
_PGPASS = re.compile(rb"(?:%s):(?:[0-9]{1,5}|\*):(?:%s):(?:%s):(?P<password>(?:[^:\r\n\\]|\\.)+)"
                     % (_PGPASS_FIELD, _PGPASS_FIELD, _PGPASS_FIELD))
_PGPASS_LINES = 4096
_WORD = re.compile(rb"\S")
_NETRC_PAIRS = {b"machine", b"login", b"password", b"account", b"port"}

_PRINTABLE = re.compile(rb"[\x20-\x7e]+")
_REGISTRY_AUTH = re.compile(rb'"(auth|identitytoken)"\s*:\s*"([^"\\]{1,4096})"')
_REGISTRY_NAME = re.compile(rb'"([^"\\]{1,255})"\s*:\s*\{[^{}]*$')

_PLACEHOLDER = re.compile(rb"(?:<[^>]*>|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|%[A-Za-z_]+%|\{\{.*\}\}|[xX*.]+|"
                          rb"@[A-Za-z_]+@|__[A-Za-z_]+__|"
                          rb"(?i:password|passwd|pass|pwd|secret|token|changeme|change_me|your[-_a-z]*|my[-_]?password|"
                          rb"redacted|none|null|example|placeholder))")

# Account databases: shadow (9 fields), passwd (7), gshadow/group (4); the numeric fields numbers or empty.
_NAME = rb"[A-Za-z0-9._][A-Za-z0-9._-]*\$?"
_SHADOW = re.compile(rb"(?P<name>%s):(?P<field>[^:\r\n]*):[0-9]*:[0-9]*:[0-9]*:[0-9]*:[0-9]*:[0-9]*:[^:\r\n]*" % _NAME)
_PASSWD = re.compile(rb"(?P<name>%s):(?P<field>[^:\r\n]*):[0-9]+:[0-9]+:[^:\r\n]*:[^:\r\n]*:[^:\r\n]*" % _NAME)
_GROUP = re.compile(rb"(?P<name>%s):(?P<field>[^:\r\n]*):[^:\r\n]*:[^:\r\n]*" % _NAME)
_HTPASSWD = re.compile(rb"(?P<name>[^:\s#]+):(?P<field>\$apr1\$\S+|\{SHA\}\S+|\$2[aby]\$\S+|\$[156]\$\S+|[./0-9A-Za-z]{13})")
_CRYPT = re.compile(rb"\$(?P<id>[0-9a-z]{1,4})\$[./0-9A-Za-z$=,+-]{8,}")
_DES = re.compile(rb"[./0-9A-Za-z]{13}")
_SHA = re.compile(rb"\{SHA\}[A-Za-z0-9+/]{27}=")
_CRYPT_NAMES = {b"1": "md5crypt", b"2a": "bcrypt", b"2b": "bcrypt", b"2y": "bcrypt", b"5": "sha256crypt",
                b"6": "sha512crypt", b"7": "scrypt", b"y": "yescrypt", b"gy": "gost-yescrypt", b"apr1": "apr1"}
_ACCOUNT_LINES = 4096
_ACCOUNT_FORMS = (("shadow", _SHADOW), ("passwd", _PASSWD), ("group", _GROUP), ("htpasswd", _HTPASSWD))

_SSSD = re.compile(rb"^[ \t]*ldap_default_authtok[ \t]*=[ \t]*(?P<value>[^\r\n]*?)[ \t]*\r?$", re.M)
_BINDPW = re.compile(rb"^[ \t]*(?P<key>(?:root)?bindpw)[ \t]+(?P<value>[^\r\n]*?)[ \t]*\r?$", re.M)
_STORAGE_PASS = re.compile(rb"^[ \t]*(?P<key>(?:accounting)?storagepass)[ \t]*=[ \t]*(?P<value>[^\r\n#]*?)[ \t]*\r?$",
                           re.M | re.I)
_NPMRC = re.compile(rb"^[ \t]*(?:[^\s=]*:)?(?P<key>_authToken|_password|_auth)[ \t]*=[ \t]*(?P<value>[^\r\n]*?)[ \t]*\r?$",
                    re.M)
_URL_CREDENTIALS = re.compile(rb"://(?P<user>[^\s/:@'\"<>]+):(?P<password>[^\s/@'\"<>]+)@(?P<host>[A-Za-z0-9.\[\]:-]+)")
_GIT_CREDENTIAL = re.compile(rb"[a-z][a-z0-9+.-]*" + _URL_CREDENTIALS.pattern + rb"/?")
_SOURCE_LINE = re.compile(rb"[ \t]*(?:deb|deb-src|URIs:|baseurl|mirrorlist|metalink|index-url|extra-index-url|"
                          rb"registry|proxy|https?_proxy|Acquire::[A-Za-z]+::Proxy)\b", re.I)


def credential(data: bytes, private_key: KeyTest) -> str | None:
    """Which credential the text ``data`` holds and where, or None; ``private_key`` tells a PEM
    private-key block (for the forms that wrap one)."""
    found = tokens.token(data)
    if found:
        return found
    for literal, finder in _FINDERS:
        if literal in data:
            found = finder(data, private_key)
            if found:
                return found
    if len(data) <= _LONE_TOKEN:
        found = _vault_legacy(data, private_key)
        if found:
            return found
    start = _content_start(data)
    if data.startswith((b"machine", b"default"), start):
        return _netrc(data, start)
    if b":" in data[start:start + 256]:
        return _accounts(data, start) or _git_credentials(data, start) or _pgpass(data, start)
    return None


def _aws(data: bytes, _private_key: KeyTest) -> str | None:
    for number, match in enumerate(_AWS_ID.finditer(data)):
        if number >= _MAX_MATCHES:
            break
        start = match.start()
        if start and data[start - 1:start].isalnum() or _EXAMPLE in match.group():
            continue
        window_start = max(0, start - _WINDOW)
        window = data[window_start:match.end() + _WINDOW]
        for secret in _AWS_SECRET.finditer(window):
            value = secret.group()
            if _EXAMPLE not in value and _mixed_case(value):
                temporary = " (temporary, ASIA)" if match.group().startswith(b"ASIA") else ""
                return f"AWS access key id and secret access key{temporary} at byte {start}"
    return None


def _json_pem(data: bytes, private_key: KeyTest) -> str | None:
    for number, match in enumerate(_JSON_PEM.finditer(data)):
        if number >= _MAX_MATCHES:
            break
        try:
            text = json.loads(b'"' + match.group(1) + b'"')
        except ValueError:
            continue
        form = private_key(text.encode("utf-8", "replace"))
        if form:
            form = _without_offset(form)
            if _SERVICE_ACCOUNT.search(data):
                return f"GCP service-account key (private_key: {form}) at byte {match.start()}"
            return f"{form} in a JSON string at byte {match.start()}"
    return None


def _base64_pem(data: bytes, private_key: KeyTest) -> str | None:
    for number, match in enumerate(_BASE64_PEM.finditer(data)):
        if number >= _MAX_MATCHES:
            break
        decoded = _b64(match.group())
        form = private_key(decoded) if decoded else None
        if form:
            form = _without_offset(form)
            if _KUBE_KEY.search(data[max(0, match.start() - 64):match.start()].rstrip(b" \t")):
                return f"kubeconfig client-key-data (base64 of a {form}) at byte {match.start()}"
            return f"base64 of a {form} at byte {match.start()}"
    return None


def _azure(data: bytes, _private_key: KeyTest) -> str | None:
    for number, match in enumerate(_AZURE.finditer(data)):
        if number >= _MAX_MATCHES:
            break
        name, value = match.group(1), match.group(2)
        decoded = _b64(value)
        if decoded and len(decoded) in _AZURE_SIZES[name] and value != AZURE_EMULATOR_KEY \
                and len(set(decoded)) >= len(decoded) // 2:
            what = "storage account key" if name == b"AccountKey" else "shared access key"
            return f"Azure {what} (connection string {name.decode()}) at byte {match.start()}"
    return None


def _vault(data: bytes, _private_key: KeyTest) -> str | None:
    for number, match in enumerate(_VAULT.finditer(data)):
        if number >= _MAX_MATCHES:
            break
        start = match.start()
        body = match.group()[4:]
        if (start == 0 or not _TOKEN_CHAR.match(data, start - 1)) and _mixed_case(body):
            return f"HashiCorp Vault token ({match.group()[:4].decode()}) at byte {start}"
    return None


def _vault_legacy(data: bytes, _private_key: KeyTest) -> str | None:
    for number, match in enumerate(_VAULT_LEGACY.finditer(data)):
        if number >= _MAX_MATCHES:
            break
        start = match.start()
        body = match.group()[2:]
        if start and _TOKEN_CHAR.match(data, start - 1) or not _mixed_case(body):
            continue
        if data.strip() == match.group() or _VAULT_CONTEXT.search(data):
            return f"HashiCorp Vault token (legacy s.) at byte {start}"
    return None


def _pgpass(data: bytes, at: int) -> str | None:
    first = None
    for offset, line in _lines(data, at, _PGPASS_LINES):
        match = _PGPASS.fullmatch(line)
        if match is None:
            return None
        if first is None and not _placeholder(match.group("password")):
            first = offset
    return None if first is None else f"PostgreSQL password file (.pgpass) entry with a password at byte {first}"


def _netrc(data: bytes, _start: int) -> str | None:
    text = b"\n".join(b" " * len(line) if line.lstrip().startswith(b"#") else line for line in data.split(b"\n"))
    tokens = [(m.start(), m.group()) for m in re.finditer(rb"\S+", text)]
    machine, index = b"", 0
    while index < len(tokens):
        word = tokens[index][1]
        if word == b"default":
            machine, index = b"default", index + 1
        elif word == b"macdef":
            return None  # a macro body follows: not looked into
        elif word in _NETRC_PAIRS and index + 1 < len(tokens):
            value = tokens[index + 1][1]
            if word == b"machine":
                machine = value
            elif word == b"password" and not _placeholder(value):
                host = machine.decode("utf-8", "replace")
                return f"netrc password (machine {host}) at byte {tokens[index][0]}"
            index += 2
        else:
            return None
    return None


def _registry(data: bytes, _private_key: KeyTest) -> str | None:
    start = data.find(b'"auths"')
    for number, match in enumerate(_REGISTRY_AUTH.finditer(data, start)):
        if number >= _MAX_MATCHES:
            break
        kind, value = match.group(1), match.group(2)
        if kind == b"auth":
            decoded = _b64(value) or b""
            user, _colon, password = decoded.partition(b":")
            if not (user and password and _PRINTABLE.fullmatch(decoded) and not _placeholder(password)):
                continue
        elif _placeholder(value):
            continue
        registry = _REGISTRY_NAME.search(data[max(0, match.start() - 512):match.start()])
        name = registry.group(1).decode("utf-8", "replace") if registry else "?"
        return f"container registry credentials (auths, {name}: {kind.decode()}) at byte {match.start()}"
    return None


def _lines(data: bytes, at: int, limit: int) -> Iterator[tuple[int, bytes]]:
    """``(offset, line)`` of the lines from ``at`` on that are not blank or a ``#`` comment (at most ``limit``)."""
    for _number in range(limit):
        if at >= len(data):
            return
        end = data.find(b"\n", at)
        end = len(data) if end < 0 else end
        line = data[at:end].rstrip(b"\r")
        if line.strip() and not line.lstrip().startswith(b"#"):
            yield at, line
        at = end + 1


def _accounts(data: bytes, start: int) -> str | None:
    """A shadow, passwd, gshadow/group or htpasswd file: every line one entry of the same format; the first
    entry whose password field is a hash, or empty where that means no password."""
    first = next(_lines(data, start, 1), None)
    forms = [(kind, form) for kind, form in _ACCOUNT_FORMS if first and form.fullmatch(first[1])]
    if not forms:
        return None
    entries = list(_lines(data, start, _ACCOUNT_LINES))
    for kind, form in forms:
        matches = [(at, match) for at, match in ((at, form.fullmatch(line)) for at, line in entries) if match]
        if len(matches) != len(entries):
            continue
        for at, match in matches:
            name, field = match.group("name"), match.group("field")
            found = _password_field(kind, field)
            if found:
                account = name.decode("utf-8", "replace")
                what = "user" if kind == "htpasswd" else ("group" if kind == "group" else "account")
                if found == "empty":
                    return (f"{kind} entry of {what} {account!r} with an empty password field (it logs in without a "
                            f"password) at byte {at}")
                return f"{kind} password hash ({found}) of {what} {account!r} at byte {at}"
        return None
    return None


def _password_field(kind: str, field: bytes) -> str | None:
    """What the password field ``field`` of a ``kind`` entry holds that is a secret: the hash scheme, ``empty``
    (no password at all), or None (locked, shadowed, not a hash)."""
    if not field:
        return "empty" if kind in ("shadow", "passwd") else None
    if field[:1] in (b"!", b"*") or (kind == "passwd" and field == b"x"):
        return None
    crypt = _CRYPT.fullmatch(field)
    if crypt:
        return _CRYPT_NAMES.get(crypt.group("id"), f"crypt ${crypt.group('id').decode()}$")
    if _SHA.fullmatch(field) and kind == "htpasswd":
        return "SHA-1"
    if _DES.fullmatch(field):
        return "DES crypt"
    return None


def _git_credentials(data: bytes, start: int) -> str | None:
    """git's credential store: every line a URL with a user and a password."""
    first = next(_lines(data, start, 1), None)
    if first is None or not _GIT_CREDENTIAL.fullmatch(first[1].strip()):
        return None
    entries = list(_lines(data, start, _PGPASS_LINES))
    matches = [(at, match) for at, match in ((at, _GIT_CREDENTIAL.fullmatch(line.strip())) for at, line in entries)
               if match]
    if not entries or len(matches) != len(entries):
        return None
    for at, match in matches:
        if not _placeholder(match.group("password")):
            host = match.group("host").decode("utf-8", "replace")
            return f"git credential store (.git-credentials) password for {host} at byte {at}"
    return None


def _url_credentials(data: bytes, _private_key: KeyTest) -> str | None:
    """A password in the URL of a package source or proxy line."""
    if b"://" not in data:
        return None
    for number, match in enumerate(_URL_CREDENTIALS.finditer(data)):
        if number >= _MAX_MATCHES:
            break
        line_start = data.rfind(b"\n", 0, match.start()) + 1
        if not _SOURCE_LINE.match(data, line_start) or _placeholder(match.group("password")) \
                or _placeholder(match.group("user")) and match.group("password").lower() == match.group("user").lower() \
                or _reserved_host(match.group("host")):
            continue
        host = match.group("host").decode("utf-8", "replace")
        return f"password in a package source or proxy URL (user@{host}) at byte {match.start()}"
    return None


def _keyed(pattern: re.Pattern[bytes], what: str) -> Callable[[bytes, KeyTest], "str | None"]:
    """A finder of ``key = value`` lines of ``pattern`` whose value is no placeholder."""
    def find(data: bytes, _private_key: KeyTest) -> str | None:
        for number, match in enumerate(pattern.finditer(data)):
            if number >= _MAX_MATCHES:
                break
            value = match.group("value").strip(b"\"'")
            if value and not _placeholder(value):
                key = match.group("key").decode() if "key" in pattern.groupindex else ""
                return what.format(key=key) + f" at byte {match.start()}"
        return None
    return find


def _content_start(data: bytes) -> int:
    """The offset of the first word that is not blank space or in a ``#`` comment line."""
    at = 0
    while at < len(data):
        word = _WORD.search(data, at)
        if word is None:
            return len(data)
        if data[word.start()] != 0x23:  # '#'
            return word.start()
        end = data.find(b"\n", word.start())
        at = len(data) if end < 0 else end + 1
    return at


def _b64(value: bytes) -> bytes | None:
    try:
        return binascii.a2b_base64(value + b"=" * (-len(value) % 4), strict_mode=True)
    except (binascii.Error, ValueError):
        return None


def _mixed_case(value: bytes) -> bool:
    """Upper and lower case letters both: random text of 24 characters and more has them, words in capitals
    and hexadecimal digests do not."""
    return value.upper() != value and value.lower() != value


def _reserved_host(host: bytes) -> bool:
    """A host under a top-level name reserved for documentation and tests (RFC 6761: ``example``, ``invalid``),
    as apt's own manual writes ``https://apt:debian@example.org`` (roff cuts the name at ``example``)."""
    top = host.lower().rstrip(b".").rsplit(b".", 1)[-1]
    return top in (b"example", b"invalid")


def _placeholder(value: bytes) -> bool:
    return _PLACEHOLDER.fullmatch(value) is not None


def _without_offset(form: str) -> str:
    return form.rsplit(" at byte ", 1)[0]


# (a literal that every instance of the form contains, finder): in this order. ``.pgpass`` and ``.netrc`` are
# files of their own format from their first line on, looked at last.
_FINDERS: tuple[tuple[bytes, Callable[[bytes, KeyTest], str | None]], ...] = (
    (b"PRIVATE KEY-----\\n", _json_pem),
    (b"LS0tLS1CRUdJTi", _base64_pem),
    (b"AKIA", _aws),
    (b"ASIA", _aws),
    (b"Key=", _azure),
    (b"hv", _vault),
    (b"ault", _vault_legacy),
    (b"AULT", _vault_legacy),
    (b'"auths"', _registry),
    (b"ldap_default_authtok", _keyed(_SSSD, "sssd LDAP bind password (ldap_default_authtok)")),
    (b"bindpw", _keyed(_BINDPW, "LDAP bind password ({key}, as nslcd.conf or pam_ldap.conf hold it)")),
    (b"oragePass", _keyed(_STORAGE_PASS, "Slurm database password ({key})")),
    (b"oragepass", _keyed(_STORAGE_PASS, "Slurm database password ({key})")),
    (b"_password", _keyed(_NPMRC, "npm registry credential ({key}, .npmrc)")),
    (b"_auth", _keyed(_NPMRC, "npm registry credential ({key}, .npmrc)")),
    (b"@", _url_credentials),
)
