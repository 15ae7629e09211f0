"""Secrets found by content: every detector on a planted file under a name and in a directory no rule
looks at, and the files that must not be reported (public keys, certificates, prose, scripts, other binaries).

Keys come from the real tools where this host has them (ssh-keygen, openssl, gpg). PuTTY, Kerberos
keytab, MUNGE, OpenVPN, age and SSH2 files are written byte for byte by the format's rules here
(puttygen, ktutil, mungekey, openvpn and age-keygen are not installed on the build host).
"""

from __future__ import annotations

import base64
import gzip
import os
import shutil
import struct
import subprocess
import time

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils._pack import secrets
from ansible_collections.hpc.stateless.plugins.module_utils._pack.run import PackError, Packer, PackRequest
from ansible_collections.hpc.stateless.plugins.module_utils._pack.tree import ExcludeRules, SecretRules, scan_tree

INNOCENT = "srv/data/blob.dat"  # no name rule looks at /srv, nor at this name


def run(*argv: str, **kwargs) -> bytes:
    return subprocess.run(list(argv), check=True, capture_output=True, **kwargs).stdout


@pytest.fixture(scope="module")
def keys(tmp_path_factory):  # pylint: disable=too-many-locals
    """Real key material and public material, by name: {name: bytes}."""
    work = tmp_path_factory.mktemp("keys")
    made: dict[str, bytes] = {}

    def ssh(name: str, *options: str) -> None:
        path = work / name
        run("ssh-keygen", "-q", "-N", "", "-C", "planted", "-f", str(path), *options)
        made[name], made[name + ".pub"] = path.read_bytes(), (work / (name + ".pub")).read_bytes()

    ssh("openssh_ed25519", "-t", "ed25519")
    ssh("pem_rsa", "-t", "rsa", "-b", "2048", "-m", "PEM")
    ssh("pem_ecdsa", "-t", "ecdsa", "-m", "PEM")
    made["pkcs8"] = run("openssl", "genpkey", "-algorithm", "ed25519")
    made["pkcs8_rsa"] = run("openssl", "genpkey", "-algorithm", "rsa", "-pkeyopt", "rsa_keygen_bits:2048")
    made["pkcs8_encrypted"] = run("openssl", "pkey", "-aes-128-cbc", "-passout", "pass:x", input=made["pkcs8"])
    made["legacy_encrypted"] = run("openssl", "rsa", "-traditional", "-aes128", "-passout", "pass:x",
                                   input=made["pkcs8_rsa"])
    made["der_pkcs8"] = run("openssl", "pkcs8", "-topk8", "-nocrypt", "-outform", "DER", input=made["pkcs8_rsa"])
    made["der_pkcs1"] = run("openssl", "rsa", "-traditional", "-outform", "DER", input=made["pkcs8_rsa"])
    made["der_sec1"] = run("openssl", "ec", "-outform", "DER", input=made["pem_ecdsa"])
    made["der_encrypted"] = run("openssl", "pkcs8", "-topk8", "-v2", "aes-256-cbc", "-passout", "pass:x",
                                "-outform", "DER", input=made["pkcs8_rsa"])
    made["pem_public"] = run("openssl", "pkey", "-pubout", input=made["pkcs8_rsa"])
    made["der_public"] = run("openssl", "pkey", "-pubout", "-outform", "DER", input=made["pkcs8_rsa"])
    made["certificate"] = run("openssl", "req", "-x509", "-key", "/dev/stdin", "-subj", "/CN=node", "-days", "1",
                              input=made["pkcs8_rsa"])
    made["der_certificate"] = run("openssl", "x509", "-outform", "DER", input=made["certificate"])
    home = work / "gnupg"
    home.mkdir(mode=0o700)
    env = {**os.environ, "GNUPGHOME": str(home)}
    try:
        run("gpg", "--batch", "--pinentry-mode", "loopback", "--passphrase", "", "--quick-gen-key",
            "Planted <planted@example.org>", "ed25519", "sign", "never", env=env)
        made["pgp_armored"] = run("gpg", "--batch", "--pinentry-mode", "loopback", "--passphrase", "", "--armor",
                                  "--export-secret-keys", env=env)
        made["pgp_binary"] = run("gpg", "--batch", "--pinentry-mode", "loopback", "--passphrase", "",
                                 "--export-secret-keys", env=env)
        made["pgp_public_armored"] = run("gpg", "--batch", "--armor", "--export", env=env)
        made["pgp_public_binary"] = run("gpg", "--batch", "--export", env=env)
        made["gnupg_keyfile"] = next((home / "private-keys-v1.d").iterdir()).read_bytes()
    finally:
        subprocess.run(["gpgconf", "--kill", "gpg-agent"], env=env, check=False, capture_output=True)
    return made


def plant(tmp_path, content: bytes, rel: str = INNOCENT):
    root = tmp_path / "root"
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return root


def findings(root, rules: SecretRules | None = None):
    scan = scan_tree(root, ExcludeRules(), rules or SecretRules())
    return [(s.path, s.reason) for s in scan.secrets]


# -- formats written here byte for byte ---------------------------------------------------------
def wrap(data: bytes, width: int = 64) -> bytes:
    text = base64.b64encode(data)
    return b"".join(text[i:i + width] + b"\n" for i in range(0, len(text), width))


def putty_v3() -> bytes:
    public = wrap(b"\x00\x00\x00\x0bssh-ed25519\x00\x00\x00\x20" + os.urandom(32), 64)
    private = wrap(b"\x00\x00\x00\x20" + os.urandom(32), 64)
    return (b"PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nComment: planted\n"
            + b"Public-Lines: %d\n" % len(public.splitlines()) + public
            + b"Private-Lines: %d\n" % len(private.splitlines()) + private
            + b"Private-MAC: " + os.urandom(32).hex().encode() + b"\n")


def keytab(principal: tuple[str, ...] = ("host", "node1.example.org"), realm: str = "EXAMPLE.ORG",
           enctype: int = 18, key: bytes = b"") -> bytes:
    key = key or os.urandom(32)

    def counted(text: str) -> bytes:
        return struct.pack(">H", len(text)) + text.encode()

    entry = (struct.pack(">H", len(principal)) + counted(realm) + b"".join(counted(p) for p in principal)
             + struct.pack(">IIB", 1, int(time.time()), 2) + struct.pack(">HH", enctype, len(key)) + key
             + struct.pack(">I", 2))
    return b"\x05\x02" + struct.pack(">i", len(entry)) + entry


def openvpn_static() -> bytes:
    lines = b"".join(os.urandom(16).hex().encode() + b"\n" for _line in range(16))
    return (b"#\n# 2048 bit OpenVPN static key\n#\n-----BEGIN OpenVPN Static key V1-----\n" + lines
            + b"-----END OpenVPN Static key V1-----\n")


def age_identity() -> bytes:
    charset = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"
    body = "".join(charset[b % 32] for b in os.urandom(58)).upper()
    return (b"# created: 2026-01-01T00:00:00Z\n# public key: age1" + b"q" * 58 + b"\n"
            + f"AGE-SECRET-KEY-1{body}\n".encode())


def ssh2_encrypted() -> bytes:
    return (b"---- BEGIN SSH2 ENCRYPTED PRIVATE KEY ----\nComment: \"planted\"\n" + wrap(os.urandom(600), 70)
            + b"---- END SSH2 ENCRYPTED PRIVATE KEY ----\n")


def openssh_binary(keys) -> bytes:
    body = b"".join(keys["openssh_ed25519"].splitlines()[1:-1])
    return base64.b64decode(body)


# -- every detector, planted under an innocent name ---------------------------------------------------
@pytest.mark.parametrize("name, reason", [
    ("openssh_ed25519", "OpenSSH private key block at byte 0"),
    ("pem_rsa", "PEM RSA private key block at byte 0"),
    ("pem_ecdsa", "PEM EC private key block at byte 0"),
    ("pkcs8", "PEM private key block at byte 0"),
    ("pkcs8_encrypted", "PEM encrypted private key block at byte 0"),
    ("legacy_encrypted", "PEM RSA private key block at byte 0"),
    ("der_pkcs8", "DER private key (PKCS#8) at byte 0"),
    ("der_pkcs1", "DER RSA private key (PKCS#1) at byte 0"),
    ("der_sec1", "DER EC private key (SEC1) at byte 0"),
    ("der_encrypted", "DER encrypted private key (PKCS#8) at byte 0"),
    ("pgp_armored", "PGP private key block at byte 0"),
    ("pgp_binary", "OpenPGP secret key (binary) at byte 0"),
])
def test_real_private_keys_are_found_by_content(tmp_path, keys, name, reason):
    assert findings(plant(tmp_path, keys[name])) == [(INNOCENT, reason)]


def test_gnupg_private_keys_v1_d_key_file_is_found(tmp_path, keys):
    data = keys["gnupg_keyfile"]
    if data.startswith(b"("):  # gpg before 2.2.20 writes the canonical S-expression
        expected = "GnuPG private key (private-keys-v1.d) at byte 0"
    else:
        expected = f"GnuPG private key (private-keys-v1.d, extended format) at byte {data.index(b'Key: (')}"
    assert findings(plant(tmp_path, data)) == [(INNOCENT, expected)]


@pytest.mark.parametrize("make, reason", [
    (putty_v3, "PuTTY private key file at byte 0"),
    (keytab, "Kerberos keytab at byte 0"),
    (lambda: keytab(("nfs", "node7"), "HPC.EXAMPLE", 17, os.urandom(16)), "Kerberos keytab at byte 0"),
    (openvpn_static, "OpenVPN static key block at byte 34"),
    (ssh2_encrypted, "SSH2 encrypted private key block at byte 0"),
    (lambda: os.urandom(128), "128 random bytes with no file format, as in a MUNGE key, at byte 0"),
    (lambda: os.urandom(1024), "1024 random bytes with no file format, as in a MUNGE key, at byte 0"),
    (lambda: os.urandom(32), "32 random bytes with no file format, as in a MUNGE key, at byte 0"),
])
def test_formats_written_here_are_found(tmp_path, make, reason):
    assert findings(plant(tmp_path, make())) == [(INNOCENT, reason)]


def test_age_identity_is_found_at_its_line(tmp_path):
    data = age_identity()
    assert findings(plant(tmp_path, data)) == [(INNOCENT, f"age secret key at byte {data.index(b'AGE-SECRET')}")]


def test_binary_openssh_key_is_found(tmp_path, keys):
    assert findings(plant(tmp_path, openssh_binary(keys))) == [
        (INNOCENT, "OpenSSH private key (binary openssh-key-v1) at byte 0")]


def test_a_key_indented_in_a_yaml_file_is_found_at_its_offset(tmp_path, keys):
    head = b"site:\n  tls_key: |\n"
    indented = b"".join(b"    " + line + b"\n" for line in keys["pkcs8_rsa"].splitlines())
    assert findings(plant(tmp_path, head + indented + b"  other: 1\n")) == [
        (INNOCENT, f"PEM private key block at byte {len(head) + 4}")]


def test_a_key_after_a_long_certificate_chain_is_found_beyond_the_first_window(tmp_path, keys):
    chain = keys["certificate"] * (secrets.HEAD_BYTES // len(keys["certificate"]) + 4)
    assert len(chain) > secrets.HEAD_BYTES
    assert findings(plant(tmp_path, chain + keys["pem_rsa"])) == [
        (INNOCENT, f"PEM RSA private key block at byte {len(chain)}")]


# -- what must not be reported ---------------------------------------------------------------------
PROSE = b"""# Keys

A private key file starts with a line such as `-----BEGIN RSA PRIVATE KEY-----` and ends
with the matching END line. Never commit one. Example:

    -----BEGIN OPENSSH PRIVATE KEY-----
    b3BlbnNzaC1rZXktdjEAAAAA...
    -----END OPENSSH PRIVATE KEY-----

PuTTY-User-Key-File-2: files are converted with puttygen; age keys start with AGE-SECRET-KEY-1.
"""
SCRIPT = b"""#!/bin/sh
# refuse to ship private keys
for f in "$@"; do
    if grep -q -e '-----BEGIN OPENSSH PRIVATE KEY-----' -e '-----BEGIN RSA PRIVATE KEY-----' "$f"; then
        echo "$f holds a private key" >&2; exit 1
    fi
done
"""
PYTHON = b'''"""Detect keys."""
PEM_HEADER = b"-----BEGIN PRIVATE KEY-----"
TEMPLATE = """
-----BEGIN RSA PRIVATE KEY-----
{body}
-----END RSA PRIVATE KEY-----
"""
def is_key(data):
    return data.startswith(b"-----BEGIN OPENSSH PRIVATE KEY-----\\n")
'''


@pytest.mark.parametrize("name", ["openssh_ed25519.pub", "pem_rsa.pub", "pem_public", "der_public", "certificate",
                                  "der_certificate", "pgp_public_armored", "pgp_public_binary"])
def test_public_keys_and_certificates_are_not_reported(tmp_path, keys, name):
    assert findings(plant(tmp_path, keys[name])) == []


@pytest.mark.parametrize("content", [
    PROSE, SCRIPT, PYTHON,
    # a block whose body is not base64 of a key, or whose END does not match its BEGIN
    b"-----BEGIN RSA PRIVATE KEY-----\n" + b"A" * 64 + b"\n-----END RSA PRIVATE KEY-----\n",
    b"-----BEGIN PRIVATE KEY-----\n" + wrap(b"\x30" + os.urandom(100)) + b"-----END RSA PRIVATE KEY-----\n",
    b"-----BEGIN PRIVATE KEY-----\nMC4CAQAw\n-----END PRIVATE KEY-----\n",
    b"-----BEGIN OPENSSH PRIVATE KEY-----\n" + wrap(os.urandom(300)) + b"-----END OPENSSH PRIVATE KEY-----\n",
    b"Private-Lines: 1\nAAAA\nPuTTY-User-Key-File-2: ssh-rsa\n",
    b"\x05\x02",  # an empty keytab
    b"\x05\x02\x00\x00\x00\x40" + b"\x00\x01" * 32,  # keytab magic, an entry that does not parse
    # an entry length that does not fit the entry; a key of no randomness, so that only the keytab parse is judged
    # (with 32 random key bytes the 95-byte file looked like a MUNGE key to the random-bytes check in ~2% of runs)
    b"\x05\x02\x00\x00\x00\x30" + keytab(key=bytes(range(32)))[6:],
])
def test_mentions_and_broken_blocks_are_not_reported(tmp_path, content):
    assert findings(plant(tmp_path, content)) == []


@pytest.mark.parametrize("content", [
    os.urandom(31), os.urandom(1025), os.urandom(4096), os.urandom(64 << 10),
    gzip.compress(os.urandom(600)),
    bytes(range(256)) * 2,  # a table that counts through the byte values
    b"".join(struct.pack("<IHH", i, i * 3, 7) for i in range(64)),  # 512 bytes of structured binary
    "Ünïcödé tëxt, ŝtïll tëxt: ключ 鍵 مفتاح ".encode() * 6,
    b"\x00" * 1024,
])
def test_other_binaries_and_text_are_not_reported(tmp_path, content):
    assert findings(plant(tmp_path, content)) == []


def test_an_elf_is_not_read_past_its_magic(tmp_path):
    elf = (shutil.which("true") or "/bin/true")
    with open(elf, "rb") as handle:
        head = handle.read(1024)
    assert head.startswith(b"\x7fELF")
    assert findings(plant(tmp_path, head)) == []
    assert secrets.sniff(b"\x7fELF" + os.urandom(300)) is None


def test_files_over_the_size_bound_are_not_opened(tmp_path, keys):
    root = plant(tmp_path, keys["pem_rsa"] + b"\n" * secrets.CONTENT_MAX_SIZE)
    assert findings(root) == []  # documented limit: a key in a file over 1 MiB is not found


def test_symlinks_fifos_and_devices_are_never_read(tmp_path, keys):
    outside = tmp_path / "outside.key"
    outside.write_bytes(keys["pem_rsa"])
    root = plant(tmp_path, b"hello\n", "srv/readme")
    (root / "srv" / "link").symlink_to(outside)
    os.mkfifo(root / "srv" / "fifo")
    assert findings(root) == []
    # A file replaced by a FIFO or a symlink after it was listed: opened without blocking or following.
    assert secrets.sniff_file(str(root / "srv" / "fifo"), 100) is None
    assert secrets.sniff_file(str(root / "srv" / "link"), 100) is None
    assert secrets.sniff_file("/dev/zero", 100) is None


def test_random_test_keeps_random_bytes_of_every_key_size():
    for size in range(secrets.RANDOM_MIN_SIZE, secrets.RANDOM_MAX_SIZE + 1, 7):
        assert secrets.looks_random(os.urandom(size)), size


# -- the escape hatches and the refusal ----------------------------------------------------------------
def test_content_findings_are_allowed_and_excluded_by_path_and_named_like_name_findings(tmp_path, keys):
    root = plant(tmp_path, keys["openssh_ed25519"])
    (root / "opt/site").mkdir(parents=True)
    (root / "opt/site/token.bin").write_bytes(os.urandom(128))
    scan = scan_tree(root, ExcludeRules(["opt/site/*"]), SecretRules(allowed=[INNOCENT]))
    assert scan.secrets == [] and [str(s) for s in scan.allowed_secrets] == [
        f"/{INNOCENT} (OpenSSH private key block at byte 0)"]
    assert findings(root, SecretRules(by_content=False)) == []
    assert findings(root) == [("opt/site/token.bin", "128 random bytes with no file format, as in a MUNGE key, "
                               "at byte 0"), (INNOCENT, "OpenSSH private key block at byte 0")]


def test_name_rules_still_come_first(tmp_path, keys):
    root = plant(tmp_path, keys["openssh_ed25519"], "root/.ssh/id_ed25519")
    assert findings(root) == [("root/.ssh/id_ed25519", "SSH private key")]


def _source_tree(tmp_path, content: bytes):
    root = plant(tmp_path, content)
    (root / "boot").mkdir()
    (root / "boot/vmlinuz-6.1.0-test").write_bytes(b"kernel")
    return root


@pytest.mark.parametrize("existing", [None, "empty", "versions"])
def test_a_refused_pack_names_the_file_and_leaves_no_empty_image_directory(tmp_path, keys, existing):
    root = _source_tree(tmp_path, keys["openssh_ed25519"])
    out = tmp_path / "out"
    image_dir = out / "img"
    if existing:
        image_dir.mkdir(parents=True)
    if existing == "versions":
        (image_dir / "v0").mkdir()
        (image_dir / "v0" / "manifest.json").write_text("{}")
    request = PackRequest(image="img", output_dir=str(out), formats=["cpio.zst"], source_path=str(root),
                          version="v1")
    with pytest.raises(PackError) as refused:
        Packer(request).run(check_mode=False)
    assert f"refusing to pack secrets: /{INNOCENT} (OpenSSH private key block at byte 0)" in str(refused.value)
    assert "hpc_stateless_pack_allowed_secrets" in str(refused.value)  # the playbook's variable, not only the option
    if existing == "versions":
        assert sorted(p.name for p in image_dir.iterdir()) == ["v0"]
    else:
        assert not image_dir.exists()
