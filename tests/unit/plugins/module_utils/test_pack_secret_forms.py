"""Secret forms of issue 30 by content: cloud and service credentials, key stores, keys inside archives, each
with the decoys next to it that must stay quiet, and the bounds of the archive walk.

The planted corpus (tests/faults/secret_corpus.py) is scanned whole first, as pack's pass 1 sees it; then each
form's edges. Keys come from the real tools (openssl, ssh-keygen, keytool); tokens are random values in the
providers' formats.
"""

from __future__ import annotations

import base64
import bz2
import gzip
import io
import json
import lzma
import os
import secrets as random_source
import string
import struct
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils._pack import archives, secrets
from ansible_collections.hpc.stateless.plugins.module_utils._pack.tree import ExcludeRules, SecretRules, scan_tree

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "faults"))
import secret_corpus  # noqa: E402  pylint: disable=wrong-import-position,import-error

INNOCENT = "srv/data/blob.dat"
B64 = string.ascii_letters + string.digits + "+/"
UPPER32 = string.ascii_uppercase + "234567"


def run(*argv: str, data: bytes | None = None) -> bytes:
    return subprocess.run(list(argv), input=data, check=True, capture_output=True).stdout


def token(alphabet: str, length: int) -> str:
    return "".join(random_source.choice(alphabet) for _index in range(length))


@pytest.fixture(scope="module", name="key")
def fixture_key() -> dict[str, bytes]:
    """Real key material: an RSA key (PKCS#8 and traditional), an EC key, a certificate."""
    pkcs8 = run("openssl", "genpkey", "-algorithm", "rsa", "-pkeyopt", "rsa_keygen_bits:2048")
    return {"pkcs8": pkcs8, "rsa": run("openssl", "rsa", "-traditional", data=pkcs8),
            "ec": run("openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout"),
            "cert": run("openssl", "req", "-x509", "-key", "/dev/stdin", "-subj", "/CN=n", "-days", "1", data=pkcs8)}


def found(tmp_path: Path, content: bytes, rel: str = INNOCENT) -> list[tuple[str, str]]:
    root = tmp_path / f"root-{random_source.token_hex(3)}"
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_bytes(content)
    return [(s.path, s.reason) for s in scan_tree(root, ExcludeRules(), SecretRules()).secrets]


# -- the corpus --------------------------------------------------------------------------------------
def test_the_planted_corpus_every_secret_named_with_its_form_and_no_decoy(tmp_path):
    corpus = secret_corpus.plant(tmp_path / "corpus", tmp_path)
    named = {s.path: s.reason for s in scan_tree(corpus.root, ExcludeRules(), SecretRules()).secrets}
    assert {rel: named.get(rel) for rel in corpus.secrets} == corpus.secrets
    assert sorted(set(named) & set(corpus.decoys)) == []
    assert len(corpus.secrets) >= 24 and len(corpus.decoys) >= 28


# -- credentials ---------------------------------------------------------------------------------------
def aws_pair(prefix: str = "AKIA") -> tuple[str, str]:
    return prefix + token(UPPER32, 16), token(B64, 40)


def test_aws_key_pair_anywhere_and_what_is_not_one(tmp_path):
    key_id, secret = aws_pair()
    as_json = json.dumps({"AccessKeyId": key_id, "SecretAccessKey": secret}).encode()
    assert found(tmp_path, as_json) == [(INNOCENT, f"AWS access key id and secret access key at byte {as_json.index(b'AKIA')}")]
    quiet = [
        f"aws_access_key_id = {key_id}\n".encode(),  # an id alone names a key
        f"aws_access_key_id = {key_id}\naws_secret_access_key =\n".encode(),
        f"id {key_id}\ncommit {os.urandom(20).hex()}\n".encode(),  # a hex digest next to it is no secret
        f"id AKIAIOSFODNN7EXAMPLE secret {secret}\n".encode(),
        f"id {key_id} secret wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n".encode(),
        f"id {key_id}".encode() + b"\n" * 600 + secret.encode(),  # too far apart
    ]
    for content in quiet:
        assert found(tmp_path, content) == [], content[:80]


def test_a_pem_key_in_a_json_string_and_a_template_that_is_not_one(tmp_path, key):
    state = json.dumps({"resources": [{"instances": [{"attributes": {"private_key_pem": key["rsa"].decode()}}]}]})
    data = state.encode()
    at = data.index(b'"-----')
    assert found(tmp_path, data) == [(INNOCENT, f"PEM RSA private key block in a JSON string at byte {at}")]
    template = json.dumps({"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\nMIIE...\n"
                                                                     "-----END PRIVATE KEY-----\n"}).encode()
    assert found(tmp_path, template) == []


def test_base64_of_a_pem_key_and_of_a_certificate(tmp_path, key):
    secret = (b"apiVersion: v1\nkind: Secret\ntype: kubernetes.io/tls\ndata:\n  tls.crt: " + base64.b64encode(key["cert"])
              + b"\n  tls.key: " + base64.b64encode(key["pkcs8"]) + b"\n")
    at = secret.index(b"tls.key: ") + len(b"tls.key: ")
    assert found(tmp_path, secret) == [(INNOCENT, f"base64 of a PEM private key block at byte {at}")]
    assert found(tmp_path, b"client-certificate-data: " + base64.b64encode(key["cert"]) + b"\nclient-key-data: REDACTED\n") == []


def test_a_kubeconfig_key_past_the_first_window_is_found(tmp_path, key):
    cluster = ("- cluster:\n    certificate-authority-data: " + base64.b64encode(key["cert"]).decode()
               + "\n    server: https://k8s.example.org\n  name: c{n}\n")
    head = "apiVersion: v1\nclusters:\n" + "".join(cluster.format(n=n) for n in range(16))
    data = (head + "users:\n- name: admin\n  user:\n    client-key-data: "
            + base64.b64encode(key["ec"]).decode() + "\n").encode()
    assert len(data) > secrets.HEAD_BYTES
    at = data.index(b"client-key-data: ") + len(b"client-key-data: ")
    assert found(tmp_path, data) == [(INNOCENT, f"kubeconfig client-key-data (base64 of a PEM EC private key block) at byte {at}")]


def test_azure_connection_strings(tmp_path):
    shared = f"Endpoint=sb://hpc.servicebus.windows.net/;SharedAccessKeyName=send;SharedAccessKey={base64.b64encode(os.urandom(32)).decode()}"
    assert found(tmp_path, shared.encode()) == [
        (INNOCENT, f"Azure shared access key (connection string SharedAccessKey) at byte {shared.index('SharedAccessKey=')}")]
    for quiet in (f"AccountKey={secret_corpus.AZURITE_KEY}", "AccountKey=" + base64.b64encode(bytes(64)).decode(),
                  "AccountKey=<storage-account-key>", "AccountKey=" + base64.b64encode(os.urandom(48)).decode()):
        assert found(tmp_path, f"DefaultEndpointsProtocol=https;AccountName=a;{quiet};\n".encode()) == [], quiet


def test_vault_tokens_and_what_looks_like_one(tmp_path):
    hvb = "hvb.AAAAAQ" + token(string.ascii_letters + string.digits + "_-", 120)
    assert found(tmp_path, f"token: {hvb}\n".encode()) == [(INNOCENT, "HashiCorp Vault token (hvb.) at byte 7")]
    legacy = "s." + token(string.ascii_letters + string.digits, 24)
    assert found(tmp_path, legacy.encode() + b"\n") == [(INNOCENT, "HashiCorp Vault token (legacy s.) at byte 0")]
    assert found(tmp_path, f"vault_token = '{legacy}'\n".encode()) == [(INNOCENT, "HashiCorp Vault token (legacy s.) at byte 15")]
    for quiet in (f"x = obj{legacy}\n" + "pad\n" * 20, f"print({legacy})\n" + "# not that tool\n" * 5,
                  "VAULT_TOKEN=hvs.xxxxxxxxxxxxxxxxxxxxxxxxxxxx\n", "VAULT_TOKEN=hvs.<your token>\n"):
        assert found(tmp_path, quiet.encode()) == [], quiet


def test_pgpass_and_the_files_that_share_its_colons(tmp_path):
    data = b"# db\nhpc.example.org:5432:*:alice:pa\\:ss word\n"
    assert found(tmp_path, data) == [(INNOCENT, "PostgreSQL password file (.pgpass) entry with a password at byte 5")]
    for quiet in (b"root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n",
                  b"root:*:19000:0:99999:7:::\n", b"sudo:x:27:alice\n", b"#hostname:port:database:username:password\n",
                  b"localhost:5432:*:postgres:<password>\n", b"localhost:5432:*:postgres:secret\nthen some prose\n"):
        assert found(tmp_path, quiet) == [], quiet


def test_netrc_and_prose_that_shows_a_netrc_line(tmp_path):
    data = b"# ci\nmachine git.example.org\n    login ci\n    password " + token(B64, 20).encode() + b"\n"
    assert found(tmp_path, data) == [(INNOCENT, f"netrc password (machine git.example.org) at byte {data.index(b'password')}")]
    assert found(tmp_path, b"default login anonymous password joe@example.org\n") == [
        (INNOCENT, "netrc password (machine default) at byte 24")]
    for quiet in (b"Use a line like: machine example.com login daniel password qwerty\n",
                  b"machine example.com login anonymous password <password>\n",
                  b"machine example.com login joe\nmacdef init\npassword not-a-token\n\n",
                  b"machine learning is a field of study\n"):
        assert found(tmp_path, quiet) == [], quiet


def test_registry_auths(tmp_path):
    auth = base64.b64encode(b"bot:" + token(B64, 24).encode()).decode()
    data = json.dumps({"auths": {"quay.io": {"auth": auth}}}).encode()
    at = data.index(b'"auth"')
    assert found(tmp_path, data) == [(INNOCENT, f"container registry credentials (auths, quay.io: auth) at byte {at}")]
    token_only = json.dumps({"auths": {"ghcr.io": {"identitytoken": token(B64, 40)}}}).encode()
    assert found(tmp_path, token_only)[0][1].startswith("container registry credentials (auths, ghcr.io: identitytoken)")
    for quiet in ({"auths": {"quay.io": {}}, "credsStore": "pass"}, {"credHelpers": {"gcr.io": "gcloud"}},
                  {"auths": {"quay.io": {"auth": base64.b64encode(b"no colon here").decode()}}},
                  {"auths": {"quay.io": {"auth": base64.b64encode(b"user:<password>").decode()}}}):
        assert found(tmp_path, json.dumps(quiet).encode()) == [], quiet


# -- key stores ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("options, form", [
    ((), "PKCS#12 (PFX) bundle with a private key (pkcs8ShroudedKeyBag) at byte 0"),
    (("-keypbe", "NONE", "-certpbe", "NONE"), "PKCS#12 (PFX) bundle with a private key (keyBag) at byte 0"),
    (("-legacy",), "PKCS#12 (PFX) bundle with a private key (pkcs8ShroudedKeyBag) at byte 0"),
    (("-nokeys",), None),  # certificates, encrypted: a trust store
    (("-nokeys", "-certpbe", "NONE"), None),
])
def test_pkcs12_bundles(tmp_path, key, options, form):
    (tmp_path / "c.pem").write_bytes(key["cert"])
    (tmp_path / "k.pem").write_bytes(key["pkcs8"])
    inkey = () if "-nokeys" in options else ("-inkey", str(tmp_path / "k.pem"))
    run("openssl", "pkcs12", "-export", "-in", str(tmp_path / "c.pem"), *inkey, "-out", str(tmp_path / "b.p12"),
        "-passout", "pass:x", *options)
    assert found(tmp_path, (tmp_path / "b.p12").read_bytes(), "etc/pki/client.bundle") == (
        [("etc/pki/client.bundle", form)] if form else [])


def test_a_pkcs12_bundle_larger_than_the_first_window_is_read_whole(tmp_path, key):
    chain = tmp_path / "chain.pem"
    chain.write_bytes(key["cert"] * 20)
    (tmp_path / "k.pem").write_bytes(key["pkcs8"])
    run("openssl", "pkcs12", "-export", "-in", str(chain), "-inkey", str(tmp_path / "k.pem"), "-out",
        str(tmp_path / "b.p12"), "-passout", "pass:x", "-certpbe", "NONE")
    data = (tmp_path / "b.p12").read_bytes()
    assert len(data) > secrets.HEAD_BYTES
    assert found(tmp_path, data) == [(INNOCENT, "PKCS#12 (PFX) bundle with a private key (pkcs8ShroudedKeyBag) at byte 0")]


@pytest.mark.parametrize("store_type", ["JKS", "JCEKS", "PKCS12"])
def test_java_keystores_with_a_key_and_trust_stores(tmp_path, store_type):
    common = ("-storetype", store_type, "-storepass", "changeit")
    keys, trust, cert = tmp_path / "keys", tmp_path / "trust", tmp_path / "ca.pem"
    run("keytool", "-genkeypair", "-keystore", str(keys), *common, "-keypass", "changeit", "-alias", "node",
        "-keyalg", "RSA", "-keysize", "2048", "-dname", "CN=node", "-validity", "1")
    run("keytool", "-exportcert", "-rfc", "-keystore", str(keys), *common, "-alias", "node", "-file", str(cert))
    run("keytool", "-importcert", "-noprompt", "-keystore", str(trust), *common, "-alias", "ca", "-file", str(cert))
    form = {"JKS": "Java keystore (JKS) with a private key entry (alias 'node') at byte 0",
            "JCEKS": "Java keystore (JCEKS) with a private key entry (alias 'node') at byte 0",
            "PKCS12": "PKCS#12 (PFX) bundle with a private key (pkcs8ShroudedKeyBag) at byte 0"}[store_type]
    assert found(tmp_path, keys.read_bytes(), "opt/app/app.keystore") == [("opt/app/app.keystore", form)]
    assert found(tmp_path, trust.read_bytes(), "opt/app/app.truststore") == []


@pytest.mark.parametrize("store_type, form", [
    ("JCEKS", "Java keystore (JCEKS) with a secret key entry (alias 'aes') at byte 0"),
    ("PKCS12", "PKCS#12 (PFX) bundle with a secret (secretBag) at byte 0"),
])
def test_secret_key_entries(tmp_path, store_type, form):
    store = tmp_path / "secrets.store"
    run("keytool", "-genseckey", "-keystore", str(store), "-storetype", store_type, "-storepass", "changeit",
        "-keypass", "changeit", "-alias", "aes", "-keyalg", "AES", "-keysize", "128")
    assert found(tmp_path, store.read_bytes()) == [(INNOCENT, form)]


def test_the_hosts_java_trust_store_is_quiet(tmp_path):
    cacerts = Path("/etc/ssl/certs/java/cacerts")
    if not cacerts.is_file():
        pytest.skip("no Java trust store on this host")
    assert found(tmp_path, cacerts.read_bytes(), "etc/ssl/certs/java/cacerts") == []


# -- archives ----------------------------------------------------------------------------------------------------
def tar_of(members: dict[str, bytes], mode: str = "w") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode, format=tarfile.PAX_FORMAT) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def zip_of(members: dict[str, bytes], method: int = zipfile.ZIP_DEFLATED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", method) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


@pytest.mark.parametrize("wrap, label", [
    (lambda data: tar_of({"a/README": b"hello\n", "a/id_rsa": data}, "w:gz"), "tar (gzip) member a/id_rsa"),
    (lambda data: tar_of({"a/id_rsa": data}, "w:bz2"), "tar (bzip2) member a/id_rsa"),
    (lambda data: tar_of({"a/id_rsa": data}, "w:xz"), "tar (xz) member a/id_rsa"),
    (lambda data: tar_of({"a/" + "d" * 120 + "/id_rsa": data}), "tar member a/" + "d" * 120 + "/id_rsa"),
    (gzip.compress, "gzip-compressed content"),
    (bz2.compress, "bzip2-compressed content"),
    (lzma.compress, "xz-compressed content"),
    (lambda data: zip_of({"x/notes.txt": b"notes\n", "x/server.key": data}), "zip member x/server.key"),
    (lambda data: zip_of({"server.key": data}, zipfile.ZIP_STORED), "zip member server.key"),
])
def test_keys_inside_archives(tmp_path, key, wrap, label):
    assert found(tmp_path, wrap(key["rsa"])) == [(INNOCENT, f"PEM RSA private key block at byte 0 in {label}")]


def test_credentials_inside_an_archive(tmp_path):
    key_id, secret = aws_pair()
    credentials = f"[default]\naws_access_key_id={key_id}\naws_secret_access_key={secret}\n".encode()
    data = tar_of({"home/a/.aws/credentials": credentials}, "w:gz")
    assert found(tmp_path, data) == [(INNOCENT, f"AWS access key id and secret access key at byte {credentials.index(b'AKIA')} "
                                                "in tar (gzip) member home/a/.aws/credentials")]


@pytest.mark.parametrize("content", [
    gzip.compress(os.urandom(128)),  # compressed random bytes: no MUNGE key inside an archive
    tar_of({"a/random.bin": os.urandom(1024), "a/README": b"text\n"}, "w:gz"),
    zip_of({"cert.pem": b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"}),
    gzip.compress(b"just a changelog\n" * 100) + bytes(512),  # zero padding after the stream, as gzip ignores
    b"PK\x03\x04" + os.urandom(300),  # a zip without a central directory: no member to read
    b"PK\x05\x06" + bytes(18),  # an empty zip
])
def test_archives_without_a_secret_are_quiet(tmp_path, content):
    assert found(tmp_path, content) == []


def damaged(data: bytes, at: int = 40) -> bytes:
    """``data`` with 64 bytes from ``at`` on overwritten by a pattern no compressor writes there."""
    return data[:at] + b"\xa5" * 64 + data[at + 64:]


TEXT = b"".join(f"line {n}: the quick brown fox\n".encode() for n in range(4000))


@pytest.mark.parametrize(("content", "why"), [
    (damaged(lzma.compress(TEXT)), "xz file the secret scan cannot read: its xz data is damaged after compressed byte"),
    (damaged(bz2.compress(TEXT)), "bzip2 file the secret scan cannot read: its bzip2 data is damaged after compressed"),
    (damaged(gzip.compress(TEXT), 20), "gzip file the secret scan cannot read: its gzip data is damaged after compressed"),
    (gzip.compress(TEXT)[:300], "gzip file the secret scan cannot read: its gzip data ends at byte 300, before"),
    (lzma.compress(TEXT)[:300], "xz file the secret scan cannot read: its xz data ends at byte 300, before"),
    (b"\x1f\x8b\x08\x00" + os.urandom(300), "gzip file the secret scan cannot read: its gzip data is damaged"),
], ids=["xz", "bzip2", "gzip", "gzip-truncated", "xz-truncated", "gzip-garbage"])
def test_damaged_compressed_data_is_reported_not_a_crash(tmp_path, content, why):
    """A damaged stream hides what follows the damage from the scan: it is named, with where and why."""
    (finding,) = found(tmp_path, content)
    assert finding[0] == INNOCENT and finding[1].startswith(why), finding


def test_a_damaged_zip_member_is_reported(tmp_path):
    data = bytearray(zip_of({"notes.txt": TEXT}))
    data[60:124] = b"\xa5" * 64  # inside the member's deflate data
    (finding,) = found(tmp_path, bytes(data))
    assert finding[1].startswith("zip file the secret scan cannot read: member notes.txt: "), finding


def empty_block_zip(members: int, stream_bytes: int) -> bytes:
    """A zip whose ``members`` all point at one deflate stream of ``stream_bytes`` of empty stored blocks that
    never ends, each claiming 100 bytes: work without output, as many times as there are members."""
    stream = b"\x00\x00\x00\xff\xff" * (stream_bytes // 5)  # non-final stored blocks of length 0
    local = b"PK\x03\x04" + struct.pack("<HHHHHIIIHH", 20, 0, 8, 0, 0, 0, len(stream), 100, 1, 0) + b"a"
    names = [b"m%04d" % n for n in range(members)]
    fields = (20, 20, 0, 8, 0, 0, 0, len(stream), 100)
    central = b"".join(b"PK\x01\x02" + struct.pack("<HHHHHHIIIHHHHHII", *fields, len(name), 0, 0, 0, 0, 0, 0) + name
                       for name in names)
    end = b"PK\x05\x06" + struct.pack("<HHHHIIH", 0, 0, members, members, len(central), len(local) + len(stream), 0)
    return local + stream + central + end


def test_a_zip_of_members_sharing_one_stream_of_empty_blocks_costs_one_pass(tmp_path):
    bomb = empty_block_zip(1000, 15 << 20)
    assert len(bomb) < archives.ARCHIVE_MAX_SIZE
    start = time.monotonic()
    (finding,) = found(tmp_path, bomb)
    elapsed = time.monotonic() - start
    assert finding[1] == ("zip file the secret scan cannot read: member m0000: its data expands to 0 bytes, its "
                          "directory entry says 100 (a damaged or crafted archive)"), finding
    assert elapsed < 2, f"the scan of one hostile zip took {elapsed:.1f} s"


def test_zip_members_that_share_their_data_are_refused(tmp_path):
    """Members that point at one stream which does expand to what each claims (a quoted-overlap bomb): refused at
    the second member, which would read the first one's data again."""
    one = zip_of({"a.txt": b"x" * 16000})
    local_size = one.index(b"PK\x01\x02")
    central_one = one[local_size:one.index(b"PK\x05\x06")]
    central = b"".join(central_one.replace(b"a.txt", b"m%04d" % n) for n in range(500))
    end = b"PK\x05\x06" + struct.pack("<HHHHIIH", 0, 0, 500, 500, len(central), local_size, 0)
    assert found(tmp_path, one[:local_size] + central + end) == [(INNOCENT, (
        "zip file the secret scan cannot read: member m0001 overlaps another member's data (several members point "
        "at the same data, as in a zip bomb)"))]


def test_concatenated_streams_are_read_on(tmp_path, key):
    """``cat notes.gz key.gz``: gzip -d writes both; so does the scan read both."""
    for compress, kind in ((gzip.compress, "gzip"), (bz2.compress, "bzip2"), (lzma.compress, "xz")):
        data = compress(b"notes\n" * 10) + compress(key["rsa"])
        assert found(tmp_path, data) == [(INNOCENT, f"PEM RSA private key block at byte 60 in {kind}-compressed content")]


def test_an_archive_inside_an_archive_is_not_opened(tmp_path, key):
    inner = tar_of({"id_rsa": key["rsa"]}, "w:gz")
    assert found(tmp_path, zip_of({"backup.tar.gz": inner})) == []  # documented: one level


def test_member_count_bound(tmp_path, key):
    filler = {f"f{n:04d}.txt": b"x\n" for n in range(archives.MAX_MEMBERS)}
    assert found(tmp_path, zip_of({**filler, "zz/server.key": key["rsa"]})) == []
    assert found(tmp_path, zip_of({"aa/server.key": key["rsa"], **filler})) == [
        (INNOCENT, "PEM RSA private key block at byte 0 in zip member aa/server.key")]


def test_a_compression_bomb_costs_its_bound_only(tmp_path, key):
    zeros = 48 << 20
    bomb = tar_of({"big.img": bytes(zeros), "id_rsa": key["rsa"]}, "w:gz")
    assert len(bomb) < archives.ARCHIVE_MAX_SIZE
    start = time.monotonic()
    assert found(tmp_path, bomb) == []  # the key lies past 32 MiB of decompressed bytes: not reached
    assert time.monotonic() - start < 10
    zipped = zip_of({"big.img": bytes(zeros), "id_rsa": key["rsa"]})
    assert found(tmp_path, zipped) == [(INNOCENT, "PEM RSA private key block at byte 0 in zip member id_rsa")]


def test_an_archive_over_the_size_bound_is_not_read(tmp_path, key):
    data = zip_of({"id_rsa": key["rsa"], "noise.bin": os.urandom(archives.ARCHIVE_MAX_SIZE)}, zipfile.ZIP_STORED)
    assert len(data) > archives.ARCHIVE_MAX_SIZE
    assert found(tmp_path, data) == []


def test_files_pack_adds_are_scanned_the_same_way(key):
    assert secrets.sniff_bytes(gzip.compress(key["rsa"])) == "PEM RSA private key block at byte 0 in gzip-compressed content"
    assert secrets.sniff_bytes(gzip.compress(b"alias ahci ahci\n" * 1000)) is None


# -- the scan in several processes -------------------------------------------------------------------------------------
def planted_files(tmp_path: Path, key: dict[str, bytes]) -> tuple[list[tuple[str, int]], dict[int, str]]:
    """40 files, every fifth a key: ([(path, size)], {index: what is found})."""
    files, expected = [], {}
    for index in range(40):
        path = tmp_path / f"f{index:02d}"
        path.write_bytes(key["rsa"] if index % 5 == 0 else f"line {index}\n".encode())
        files.append((str(path), path.stat().st_size))
        if index % 5 == 0:
            expected[index] = "PEM RSA private key block at byte 0"
    return files, expected


def test_sniff_many_in_processes_finds_what_one_process_finds(tmp_path, key, monkeypatch):
    files, expected = planted_files(tmp_path, key)
    monkeypatch.setattr(secrets, "PARALLEL_MIN_FILES", 1)
    assert secrets.sniff_many(files, 1) == expected
    assert secrets.sniff_many(files, 3) == expected


def test_a_child_that_fails_has_its_share_sniffed_again(tmp_path, key, monkeypatch):
    files, expected = planted_files(tmp_path, key)

    def failing_child(_files, _share, _count):
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            os._exit(3)  # pylint: disable=protected-access
        os.close(write_end)
        return pid, read_end

    monkeypatch.setattr(secrets, "PARALLEL_MIN_FILES", 1)
    monkeypatch.setattr(secrets, "_fork_share", failing_child)
    assert secrets.sniff_many(files, 2) == expected
