# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The planted-secrets corpus: every secret form pack must refuse, and decoys it must not name.

One builder for the fault case (tests/faults/test_planted_secret_forms.py: the real pack module
refuses the tree) and the benchmark (benchmarks/secret_scan_bench.py: our scan against
detect-secrets on the same tree). :func:`plant` writes, into a directory, files at the paths
a real image would leak them at:

* cloud and service credentials: AWS key pairs (``~/.aws/credentials``, and a temporary pair in an
  env file), a GCP service-account JSON key, an Azure storage connection string, a kubeconfig with
  ``client-key-data``, Vault tokens (``hvs.`` in ``~/.vault-token``, the legacy ``s.`` in a shell
  profile), ``.pgpass``, ``.netrc``, a docker ``config.json`` with ``auths``;
* key stores: a PKCS#12 bundle under an ordinary name (``client.bundle``), Java keystores (JKS,
  JCEKS, PKCS#12) with a private key entry;
* private keys inside archives: a tar.gz of a home directory, a zip, a gzip'd key, a plain tar;
* the credentials an HPC image most often carries: password hashes in ``/etc/shadow`` (and an empty
  password field in its backup), an ``.htpasswd`` (both hashed by ``openssl passwd``), LDAP bind
  passwords (sssd's ``ldap_default_authtok``, nslcd's ``bindpw``, ``/etc/ldap.secret``), slurmdbd's
  ``StoragePass``, a password in an apt source's URL, apt's ``auth.conf.d``, ``.git-credentials`` and
  an ``.npmrc`` token;
* service tokens in the forms of the gitleaks default rules a prefix identifies, each in a file of its
  own (:data:`TOKEN_RULES` names the gitleaks rule each one stands for);
* the forms found before: a PEM key with CRLF line ends, an OpenSSH key indented in a YAML vars
  file, an armored PGP private key, a Kerberos keytab, a MUNGE key and a Slurm JWT key at paths no
  name rule looks at.

Keys are real: ssh-keygen, openssl, gpg and keytool (default-jre-headless, installed by
scripts/setup.sh) make them. Cloud tokens are random values in the providers' formats (no real
account behind them); the keytab is written byte for byte by its format (MIT's ktutil is not on
the build host). The decoys are what images hold next to such files: certificates, public keys
and keyrings, trust stores (JKS, PKCS#12), prose that quotes a PEM header or an
``aws_secret_access_key =`` line, AWS's documented example key pair, templates with placeholders,
the storage emulator's published Azure key, locked and shadowed accounts, configurations without
a password, placeholder and sample tokens (``ghp_xxxx...``, ``<token>``, ``${VAR}``, ``changeme``,
jwt.io's sample), a redacted kubeconfig, a docker config with a
credential helper, checksum lists, and compressed data (a gzip'd changelog, a jar, a tar.gz of
certificates, gzip'd random bytes).

:data:`Corpus.secrets` maps each planted path to the form hpc.stateless's scan names it by (the
fault case checks the exact words); the benchmark counts paths only, for both scanners.
"""

from __future__ import annotations

import base64
import gzip
import io
import json
import os
import secrets as random_source
import shutil
import string
import struct
import subprocess
import tarfile
import tempfile
import time
import uuid
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ansible_collections.hpc.stateless.plugins.module_utils._pack.credentials import AZURE_EMULATOR_KEY

TOOLS = ("ssh-keygen", "openssl", "gpg", "gpgconf", "keytool")
STOREPASS = "changeit"

# AWS's documented example key pair (docs.aws.amazon.com, "Managing access keys"): a decoy.
AWS_EXAMPLE_ID = "AKIAIOSFODNN7EXAMPLE"
AWS_EXAMPLE_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
# The Azure storage emulator's (Azurite's) published account key: a decoy.
AZURITE_KEY = AZURE_EMULATOR_KEY.decode()


@dataclass(frozen=True)
class Corpus:
    """What :func:`plant` wrote: secrets (path -> the form our scan names) and decoys (paths)."""

    root: Path
    secrets: dict[str, str]
    decoys: tuple[str, ...]

    @property
    def paths(self) -> list[str]:
        return sorted([*self.secrets, *self.decoys])


def missing_tools() -> list[str]:
    """The tools :func:`plant` needs that this host lacks."""
    return [tool for tool in TOOLS if shutil.which(tool) is None]


def _run(*argv: str, data: bytes | None = None, env: dict[str, str] | None = None) -> bytes:
    return subprocess.run(list(argv), input=data, env=env, check=True, capture_output=True).stdout


def _random_text(alphabet: str, length: int) -> str:
    return "".join(random_source.choice(alphabet) for _index in range(length))


class _Keys:
    """Real key material made once per corpus, in a scratch directory."""

    def __init__(self, scratch: Path) -> None:
        self.scratch = scratch
        self.rsa_pkcs8 = _run("openssl", "genpkey", "-algorithm", "rsa", "-pkeyopt", "rsa_keygen_bits:2048")
        self.rsa_traditional = _run("openssl", "rsa", "-traditional", data=self.rsa_pkcs8)
        self.ed25519_pkcs8 = _run("openssl", "genpkey", "-algorithm", "ed25519")
        self.ec_sec1 = _run("openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout")
        self.certificate = _run("openssl", "req", "-x509", "-key", "/dev/stdin", "-subj", "/CN=node.example.org",
                                "-days", "30", data=self.rsa_pkcs8)
        self.public_pem = _run("openssl", "pkey", "-pubout", data=self.rsa_pkcs8)

    def openssh(self, name: str) -> tuple[bytes, bytes]:
        """A new OpenSSH ed25519 key pair: (private, public)."""
        path = self.scratch / name
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{name}@planted", "-f", str(path))
        return path.read_bytes(), path.with_name(name + ".pub").read_bytes()

    def pgp(self) -> tuple[bytes, bytes]:
        """An OpenPGP key: (armored secret key, binary public keyring)."""
        # In the system's temporary directory: gpg-agent's socket path must stay short (108 bytes).
        home = Path(tempfile.mkdtemp(prefix="gnupg-"))
        env = {**os.environ, "GNUPGHOME": str(home)}
        batch = ("gpg", "--batch", "--pinentry-mode", "loopback", "--passphrase", "")
        try:
            _run(*batch, "--quick-gen-key", "Planted <planted@example.org>", "ed25519", "sign", "never", env=env)
            return _run(*batch, "--armor", "--export-secret-keys", env=env), _run("gpg", "--batch", "--export", env=env)
        finally:
            subprocess.run(["gpgconf", "--kill", "gpg-agent"], env=env, check=False, capture_output=True)
            shutil.rmtree(home, ignore_errors=True)

    def pkcs12(self, *options: str) -> bytes:
        """``openssl pkcs12 -export`` of the certificate (and its key unless -nokeys) with ``options``."""
        cert, key, out = self.scratch / "cert.pem", self.scratch / "key.pem", self.scratch / "bundle.p12"
        cert.write_bytes(self.certificate)
        key.write_bytes(self.rsa_pkcs8)
        keys = () if "-nokeys" in options else ("-inkey", str(key))
        _run("openssl", "pkcs12", "-export", "-in", str(cert), *keys, "-out", str(out), "-passout",
             f"pass:{STOREPASS}", *options)
        return out.read_bytes()

    def keystore(self, store_type: str, trust_only: bool = False) -> bytes:
        """A keytool keystore of ``store_type`` with a private key entry, or a trust store of one CA."""
        path = self.scratch / f"store-{random_source.token_hex(4)}.{store_type.lower()}"
        common = ("-keystore", str(path), "-storetype", store_type, "-storepass", STOREPASS)
        if trust_only:
            cert = self.scratch / "ca.pem"
            cert.write_bytes(self.certificate)
            _run("keytool", "-importcert", "-noprompt", *common, "-alias", "site-ca", "-file", str(cert))
        else:
            _run("keytool", "-genkeypair", *common, "-keypass", STOREPASS, "-alias", "node", "-keyalg", "EC",
                 "-dname", "CN=node.example.org", "-validity", "30")
        return path.read_bytes()


def _keytab(principal: tuple[str, ...], realm: str, enctype: int, key: bytes) -> bytes:
    """A version 0x0502 keytab with one entry (MIT krb5's keytab file format)."""
    def counted(text: str) -> bytes:
        return struct.pack(">H", len(text)) + text.encode()

    entry = (struct.pack(">H", len(principal)) + counted(realm) + b"".join(counted(p) for p in principal)
             + struct.pack(">IIB", 1, int(time.time()), 3) + struct.pack(">HH", enctype, len(key)) + key
             + struct.pack(">I", 3))
    return b"\x05\x02" + struct.pack(">i", len(entry)) + entry


def _tar(members: dict[str, bytes], compression: str = "") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=f"w:{compression}" if compression else "w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), int(time.time()), 0o600
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _zip(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def _at(data: bytes, marker: bytes) -> int:
    return data.index(marker)


B62 = string.ascii_letters + string.digits
HEX = "0123456789abcdef"


def _jwt() -> str:
    def part(value: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()
    return ".".join([part({"alg": "HS256", "typ": "JWT"}), part({"sub": "slurmrestd", "iat": int(time.time())}),
                     base64.urlsafe_b64encode(os.urandom(32)).rstrip(b"=").decode()])


def token_forms() -> dict[str, tuple[str, str]]:
    """gitleaks default rule id -> (a new token of its form, what our scan names it: the words before " at byte")."""
    return {
        "github-pat": ("ghp_" + _random_text(B62, 36), "GitHub token (ghp_)"),
        "github-oauth": ("gho_" + _random_text(B62, 36), "GitHub token (gho_)"),
        "github-app-token": ("ghs_" + _random_text(B62, 36), "GitHub token (ghs_)"),
        "github-refresh-token": ("ghr_" + _random_text(B62, 36), "GitHub token (ghr_)"),
        "github-fine-grained-pat": ("github_pat_" + _random_text(B62, 22) + "_" + _random_text(B62, 59),
                                    "GitHub fine-grained personal access token (github_pat_)"),
        "gitlab-pat": ("glpat-" + _random_text(B62, 20), "GitLab token (glpat-)"),
        "gitlab-deploy-token": ("gldt-" + _random_text(B62, 20), "GitLab token (gldt-)"),
        "gitlab-runner-authentication-token": ("glrt-" + _random_text(B62, 20), "GitLab token (glrt-)"),
        "gitlab-ptt": ("glptt-" + _random_text(HEX, 40), "GitLab token (glptt-)"),
        "slack-bot-token": (f"xoxb-{_random_text(string.digits, 12)}-{_random_text(string.digits, 13)}-"
                            f"{_random_text(B62, 24)}", "Slack token (xoxb-)"),
        "slack-user-token": (f"xoxp-{_random_text(string.digits, 12)}-{_random_text(string.digits, 12)}-"
                             f"{_random_text(string.digits, 13)}-{_random_text(HEX, 32)}", "Slack token (xoxp-)"),
        "slack-app-token": (f"xapp-1-A{_random_text(string.ascii_uppercase + string.digits, 10)}-"
                            f"{_random_text(string.digits, 13)}-{_random_text(HEX, 64)}", "Slack app-level token (xapp-)"),
        "slack-webhook-url": (f"https://hooks.slack.com/services/T{_random_text(string.ascii_uppercase, 8)}/"
                              f"B{_random_text(string.ascii_uppercase, 8)}/{_random_text(B62, 24)}", "Slack webhook URL"),
        "stripe-access-token": ("sk_live_" + _random_text(B62, 24), "Stripe secret key (sk_live_)"),
        "npm-access-token": ("npm_" + _random_text(B62, 36), "npm access token (npm_)"),
        "pypi-upload-token": ("pypi-AgEIcHlwaS5vcmc" + _random_text(B62, 70), "PyPI upload token (pypi-)"),
        "openai-api-key": ("sk-proj-" + _random_text(B62, 74) + "T3BlbkFJ" + _random_text(B62, 74),
                           "OpenAI API key (sk-proj-)"),
        "anthropic-api-key": ("sk-ant-api03-" + _random_text(B62, 93) + "AA", "Anthropic API key (sk-ant-)"),
        "huggingface-access-token": ("hf_" + _random_text(string.ascii_letters, 34), "Hugging Face token (hf_)"),
        "gcp-api-key": ("AIza" + _random_text(B62, 35), "Google API key"),
        "digitalocean-pat": ("dop_v1_" + _random_text(HEX, 64), "DigitalOcean token (dop_)"),
        "doppler-api-token": ("dp.pt." + _random_text(B62, 43), "Doppler token"),
        "dynatrace-api-token": (f"dt0c01.{_random_text(B62, 24)}.{_random_text(B62, 64)}", "Dynatrace API token"),
        "databricks-api-token": ("dapi" + _random_text(HEX, 32), "Databricks token"),
        "sendgrid-api-token": (f"SG.{_random_text(B62, 22)}.{_random_text(B62, 43)}", "SendGrid API key"),
        "shopify-access-token": ("shpat_" + _random_text(HEX, 32), "Shopify token (shpat_)"),
        "twilio-api-key": ("SK" + _random_text(HEX, 32), "Twilio API key"),
        "postman-api-token": (f"PMAK-{_random_text(HEX, 24)}-{_random_text(HEX, 34)}", "Postman API key (PMAK-)"),
        "pulumi-api-token": ("pul-" + _random_text(HEX, 40), "Pulumi token (pul-)"),
        "rubygems-api-token": ("rubygems_" + _random_text(HEX, 48), "RubyGems API key (rubygems_)"),
        "linear-api-key": ("lin_api_" + _random_text(B62, 40), "Linear API key (lin_api_)"),
        "alibaba-access-key-id": ("LTAI" + _random_text(B62, 20), "Alibaba Cloud access key id"),
        "sentry-user-token": ("sntryu_" + _random_text(HEX, 64), "Sentry token (sntryu_)"),
        "prefect-api-token": ("pnu_" + _random_text(B62, 36), "Prefect API key (pnu_)"),
        "planetscale-api-token": ("pscale_tkn_" + _random_text(B62, 40), "PlanetScale credential (pscale_tkn_)"),
        "grafana-service-account-token": (f"glsa_{_random_text(B62, 32)}_{_random_text(HEX, 8)}", "Grafana token (glsa_)"),
        "jwt": (_jwt(), "JSON Web Token"),
    }


#: The gitleaks default rules (config/gitleaks.toml) the token files stand for, one file each.
TOKEN_RULES = ("github-pat", "github-oauth", "github-app-token", "github-refresh-token", "github-fine-grained-pat",
               "gitlab-pat", "gitlab-deploy-token", "gitlab-runner-authentication-token", "gitlab-ptt",
               "slack-bot-token", "slack-user-token", "slack-app-token", "slack-webhook-url", "stripe-access-token",
               "npm-access-token", "pypi-upload-token", "openai-api-key", "anthropic-api-key",
               "huggingface-access-token", "gcp-api-key", "digitalocean-pat", "doppler-api-token",
               "dynatrace-api-token", "databricks-api-token", "sendgrid-api-token", "shopify-access-token",
               "twilio-api-key", "postman-api-token", "pulumi-api-token", "rubygems-api-token", "linear-api-key",
               "alibaba-access-key-id", "sentry-user-token", "prefect-api-token", "planetscale-api-token",
               "grafana-service-account-token", "jwt")


def _hpc_files() -> dict[str, tuple[bytes, str]]:
    """The credentials of an HPC node image's own configuration: path -> (content, the form our scan names)."""
    found: dict[str, tuple[bytes, str]] = {}
    hashed = _run("openssl", "passwd", "-6", _random_text(B62, 12)).strip()
    shadow = (b"root:*:19700:0:99999:7:::\ndaemon:*:19700:0:99999:7:::\nslurm:!:19700::::::\n"
              b"alice:" + hashed + b":19700:0:99999:7:::\n")
    found["etc/shadow"] = (shadow, f"shadow password hash (sha512crypt) of account 'alice' at byte {_at(shadow, b'alice:')}")
    backup = b"root:*:19700:0:99999:7:::\nguest::19700:0:99999:7:::\n"
    found["etc/shadow-"] = (backup, "shadow entry of account 'guest' with an empty password field (it logs in without a "
                                    f"password) at byte {_at(backup, b'guest:')}")
    apr1 = _run("openssl", "passwd", "-apr1", _random_text(B62, 12)).strip()
    found["var/www/html/status/.htpasswd"] = (b"monitor:" + apr1 + b"\n",
                                              "htpasswd password hash (apr1) of user 'monitor' at byte 0")
    sssd = (b"[sssd]\nservices = nss, pam\ndomains = LDAP\n\n[domain/LDAP]\nid_provider = ldap\n"
            b"ldap_uri = ldaps://ldap.example.org\nldap_default_bind_dn = cn=nodes,ou=services,dc=example,dc=org\n"
            b"ldap_default_authtok_type = password\nldap_default_authtok = " + _random_text(B62, 16).encode() + b"\n")
    found["etc/sssd/sssd.conf"] = (sssd, "sssd LDAP bind password (ldap_default_authtok) at byte "
                                         f"{_at(sssd, b'ldap_default_authtok =')}")
    nslcd = (b"uid nslcd\ngid nslcd\nuri ldaps://ldap.example.org\nbase dc=example,dc=org\n"
             b"binddn cn=nodes,ou=services,dc=example,dc=org\nbindpw " + _random_text(B62, 16).encode() + b"\n")
    found["etc/nslcd.conf"] = (nslcd, "LDAP bind password (bindpw, as nslcd.conf or pam_ldap.conf hold it) at byte "
                                      f"{_at(nslcd, b'bindpw')}")
    found["etc/ldap.secret"] = (_random_text(B62, 16).encode() + b"\n", "LDAP bind password file")
    slurmdbd = (b"AuthType=auth/munge\nDbdHost=head\nSlurmUser=slurm\nStorageType=accounting_storage/mysql\n"
                b"StorageHost=db\nStorageUser=slurm\nStoragePass=" + _random_text(B62, 16).encode() + b"\n")
    found["etc/slurm/slurmdbd.conf"] = (slurmdbd, f"Slurm database password (StoragePass) at byte {_at(slurmdbd, b'StoragePass')}")
    source = f"deb https://ci:{_random_text(B62, 16)}@repo.example.org/hpc bookworm main\n".encode()
    found["etc/apt/sources.list.d/site.list"] = (source, "password in a package source or proxy URL (user@repo.example.org) "
                                                         f"at byte {_at(source, b'://')}")
    auth = f"machine repo.example.org/hpc\nlogin ci\npassword {_random_text(B62, 16)}\n".encode()
    found["etc/apt/auth.conf.d/site.conf"] = (auth, "netrc password (machine repo.example.org/hpc) at byte "
                                                    f"{_at(auth, b'password')}")
    found["root/.git-credentials"] = (f"https://ci-bot:{_random_text(B62, 20)}@git.example.org\n".encode(),
                                      "git credential store (.git-credentials) password for git.example.org at byte 0")
    npmrc = f"registry=https://npm.example.org/\n//npm.example.org/:_authToken={uuid.uuid4()}\n".encode()
    found["home/ci/.npmrc"] = (npmrc, "npm registry credential (_authToken, .npmrc) at byte "
                                      f"{_at(npmrc, b'//npm.example.org/:')}")
    forms = token_forms()
    for rule in TOKEN_RULES:
        value, form = forms[rule]
        content = f"# {rule}\nexport SITE_TOKEN={value}\n".encode()
        at = _at(content, b"hooks.slack.com" if rule == "slack-webhook-url" else value.encode())  # after https://
        found[f"etc/tokens/{rule}.env"] = (content, f"{form} at byte {at}")
    return found


def _secret_files(keys: _Keys) -> dict[str, tuple[bytes, str]]:
    """Every planted secret: path -> (content, the form our scan names)."""
    # pylint: disable=too-many-locals
    upper32 = string.ascii_uppercase + "234567"
    b64 = string.ascii_letters + string.digits + "+/"
    found: dict[str, tuple[bytes, str]] = {}

    aws_id = "AKIA" + _random_text(upper32, 16)
    aws = (f"[default]\naws_access_key_id = {aws_id}\naws_secret_access_key = {_random_text(b64, 40)}\n"
           "region = eu-west-1\n").encode()
    found["home/alice/.aws/credentials"] = (aws, f"AWS access key id and secret access key at byte {_at(aws, b'AKIA')}")
    sts = (f"# job environment\nAWS_REGION=eu-west-1\nAWS_ACCESS_KEY_ID=ASIA{_random_text(upper32, 16)}\n"
           f"AWS_SECRET_ACCESS_KEY={_random_text(b64, 40)}\n"
           f"AWS_SESSION_TOKEN={_random_text(b64, 300)}\n").encode()
    found["opt/jobs/nightly.env"] = (sts, "AWS access key id and secret access key (temporary, ASIA) at byte "
                                          f"{_at(sts, b'ASIA')}")

    service_account = json.dumps({
        "type": "service_account", "project_id": "hpc-analytics", "private_key_id": random_source.token_hex(20),
        "private_key": keys.rsa_pkcs8.decode(), "client_email": "loader@hpc-analytics.iam.gserviceaccount.com",
        "client_id": str(random_source.randbelow(10 ** 21)), "auth_uri": "https://accounts.google.com/o/oauth2/auth",
        "token_uri": "https://oauth2.googleapis.com/token"}, indent=2).encode()
    at = _at(service_account, b'"-----BEGIN')
    found["opt/analytics/loader-key.json"] = (service_account, f"GCP service-account key (private_key: PEM private key block) at byte {at}")

    azure_key = base64.b64encode(os.urandom(64)).decode()
    azure = ("[storage]\nconnection_string = DefaultEndpointsProtocol=https;AccountName=hpcresults;"
             f"AccountKey={azure_key};EndpointSuffix=core.windows.net\n").encode()
    found["etc/results-uploader/storage.ini"] = (azure, "Azure storage account key (connection string AccountKey) "
                                                        f"at byte {_at(azure, b'AccountKey=')}")

    client_key = base64.b64encode(keys.ec_sec1).decode()
    cert_data = base64.b64encode(keys.certificate).decode()
    kubeconfig = (f"apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    certificate-authority-data: {cert_data}\n"
                  "    server: https://k8s.example.org:6443\n  name: hpc\ncontexts:\n- context:\n    cluster: hpc\n"
                  "    user: admin\n  name: admin@hpc\ncurrent-context: admin@hpc\nusers:\n- name: admin\n  user:\n"
                  f"    client-certificate-data: {cert_data}\n    client-key-data: {client_key}\n").encode()
    found["root/.kube/config"] = (kubeconfig, "kubeconfig client-key-data (base64 of a PEM EC private key block) at byte "
                                              f"{_at(kubeconfig, client_key.encode())}")

    vault_token = ("hvs.CAESI" + _random_text(string.ascii_letters + string.digits + "_-", 86)).encode()
    found["root/.vault-token"] = (vault_token, "HashiCorp Vault token (hvs.) at byte 0")
    legacy = f"export VAULT_ADDR=https://vault.example.org:8200\nexport VAULT_TOKEN=s.{_random_text(string.ascii_letters + string.digits, 24)}\n"
    legacy_bytes = legacy.encode()
    found["etc/profile.d/vault.sh"] = (legacy_bytes, f"HashiCorp Vault token (legacy s.) at byte {_at(legacy_bytes, b'=s.') + 1}")

    pgpass = (f"# results database\ndb.example.org:5432:results:alice:{_random_text(string.ascii_letters + string.digits, 20)}\n"
              f"*:*:*:report:{_random_text(string.ascii_letters + string.digits, 16)}\n").encode()
    found["home/alice/.pgpass"] = (pgpass, f"PostgreSQL password file (.pgpass) entry with a password at byte {_at(pgpass, b'db.')}")
    netrc = (f"machine registry.example.org\n  login ci\n  password {_random_text(string.ascii_letters + string.digits, 24)}\n"
             "machine ftp.example.org login anonymous password guest@\n").encode()
    found["root/.netrc"] = (netrc, f"netrc password (machine registry.example.org) at byte {_at(netrc, b'password')}")
    auth = base64.b64encode(f"ci-bot:{_random_text(string.ascii_letters + string.digits, 32)}".encode()).decode()
    docker = json.dumps({"auths": {"registry.example.org": {"auth": auth}}}, indent=1).encode()
    at = _at(docker, b'"auth"')
    found["home/ci/.docker/config.json"] = (docker, f"container registry credentials (auths, registry.example.org: auth) at byte {at}")

    found["etc/pki/tls/client.bundle"] = (keys.pkcs12(), "PKCS#12 (PFX) bundle with a private key (pkcs8ShroudedKeyBag) at byte 0")
    found["opt/app/conf/keystore.jks"] = (keys.keystore("JKS"), "Java keystore (JKS) with a private key entry (alias 'node') at byte 0")
    found["opt/app/conf/keystore.jceks"] = (keys.keystore("JCEKS"),
                                            "Java keystore (JCEKS) with a private key entry (alias 'node') at byte 0")
    found["opt/app/conf/keystore.p12"] = (keys.keystore("PKCS12"),
                                          "PKCS#12 (PFX) bundle with a private key (pkcs8ShroudedKeyBag) at byte 0")

    bob_key, bob_public = keys.openssh("bob")
    found["srv/backup/home-bob.tar.gz"] = (
        _tar({"home/bob/.bashrc": b"alias ll='ls -l'\n", "home/bob/.ssh/id_ed25519.pub": bob_public,
              "home/bob/.ssh/id_ed25519": bob_key}, "gz"),
        "OpenSSH private key block at byte 0 in tar (gzip) member home/bob/.ssh/id_ed25519")
    found["srv/backup/web-keys.zip"] = (_zip({"README.txt": b"web server keys\n", "keys/server.crt": keys.certificate,
                                              "keys/server.key": keys.rsa_traditional}),
                                        "PEM RSA private key block at byte 0 in zip member keys/server.key")
    found["srv/backup/deploy_key.gz"] = (gzip.compress(keys.ed25519_pkcs8),
                                         "PEM private key block at byte 0 in gzip-compressed content")
    found["srv/backup/ssl.tar"] = (_tar({"etc/ssl/certs/server.pem": keys.certificate,
                                         "etc/ssl/private/server.key": keys.ec_sec1}),
                                   "PEM EC private key block at byte 0 in tar member etc/ssl/private/server.key")

    found["etc/ssl/private/windows-node.key"] = (keys.rsa_traditional.replace(b"\n", b"\r\n"),
                                                 "PEM RSA private key block at byte 0")
    deploy_key, _public = keys.openssh("deploy")
    head = b"deploy:\n  user: ci\n  ssh_key: |\n"
    yaml_vars = head + b"".join(b"    " + line + b"\n" for line in deploy_key.splitlines()) + b"  port: 22\n"
    found["etc/ansible/group_vars/all/deploy.yml"] = (yaml_vars, f"OpenSSH private key block at byte {len(head) + 4}")
    pgp_secret, _keyring = keys.pgp()
    found["root/signing-key.asc"] = (pgp_secret, "PGP private key block at byte 0")
    found["etc/krb5.keytab"] = (_keytab(("host", "node1.example.org"), "EXAMPLE.ORG", 18, os.urandom(32)),
                                "Kerberos keytab at byte 0")
    found["srv/munge/munge.key"] = (os.urandom(1024), "1024 random bytes with no file format, as in a MUNGE key, at byte 0")
    found["etc/slurm-llnl/jwt_hs256.key"] = (os.urandom(32), "32 random bytes with no file format, as in a MUNGE key, at byte 0")
    found.update(_hpc_files())
    return found


PROSE = b"""# Credentials

Never copy a private key into an image. A PEM key starts with a line such as

    -----BEGIN RSA PRIVATE KEY-----

and the AWS CLI reads `~/.aws/credentials`, where a line `aws_secret_access_key =` holds the
secret: deliver both at boot. A kubeconfig's `client-key-data:` and a docker `config.json`'s
`"auths"` are secrets too, as are Vault tokens (`hvs.` followed by the token).
"""

MAN_PAGE = f""".TH CREDENTIALS 5
.SH NAME
credentials \\- AWS shared credentials file
.SH EXAMPLE
.nf
[default]
aws_access_key_id = {AWS_EXAMPLE_ID}
aws_secret_access_key = {AWS_EXAMPLE_SECRET}
.fi
.SH SEE ALSO
A .netrc line looks like: machine example.com login daniel password qwerty
.br
A .pgpass line is hostname:port:database:username:password
""".encode()

SCRIPT = b"""#!/bin/sh
# refuse to ship private keys
for f in "$@"; do
    if grep -q -e '-----BEGIN OPENSSH PRIVATE KEY-----' -e 'client-key-data:' -e 'AccountKey=' "$f"; then
        echo "$f holds a credential" >&2; exit 1
    fi
done
"""

PYTHON = b'''"""Helpers for key files."""
PEM_HEADER = b"-----BEGIN PRIVATE KEY-----"
TEMPLATE = """
-----BEGIN RSA PRIVATE KEY-----
{body}
-----END RSA PRIVATE KEY-----
"""
SERVICE_ACCOUNT_TYPE = "service_account"
'''


# jwt.io's published sample token: documentation, not a credential.
JWT_SAMPLE = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5"
              "MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c")
HPC_DECOYS = {
    # locked and shadowed accounts: '*', '!', '!!', '!*', and a locked hash ('!' before it)
    "var/backups/shadow.bak": b"root:*:19700:0:99999:7:::\nslurm:!:19700::::::\nmunge:!!:19700::::::\n"
                              b"svc:!*:19700::::::\nalice:!$6$Zx3kLq9v$k2Qm8vX0pZrT2sUw4yA6cE8gI0kM2oQ4sU6wY8aC0eG2iK4mO6qS8u"
                              b"W0yA2cE4gI6kM8oQ0sU2wY4aC6eG8:19700:0:99999:7:::\n",
    "etc/passwd": b"root:x:0:0:root:/root:/bin/bash\nslurm:x:64030:64030::/nonexistent:/usr/sbin/nologin\n",
    "etc/group": b"root:x:0:\nslurm:x:64030:\n",
    "etc/gshadow": b"root:*::\nslurm:!::\n",
    # configurations without a password
    "etc/sssd/conf.d/kerberos.conf": b"[domain/KRB]\nid_provider = ldap\nauth_provider = krb5\nldap_sasl_mech = GSSAPI\n",
    "etc/nslcd.conf.dpkg-dist": b"uid nslcd\ngid nslcd\nuri ldap:///\nbase dc=example,dc=net\n"
                                b"#binddn cn=proxyuser,dc=example,dc=net\n#bindpw secret\n",
    "usr/share/doc/slurmdbd/examples/slurmdbd.conf": b"StorageType=accounting_storage/mysql\nStorageUser=slurm\n"
                                                     b"StoragePass=<password>\n#StoragePass=changeme\n",
    "etc/apt/sources.list": b"deb http://deb.debian.org/debian bookworm main\n"
                            b"deb https://${REPO_USER}:${REPO_PASS}@repo.example.org/hpc bookworm main\n",
    "etc/skel/.git-credentials.example": b"https://user:<token>@github.com\n",
    "etc/skel/.npmrc": b"//registry.npmjs.org/:_authToken=${NPM_TOKEN}\n",
    # placeholder and sample tokens
    "usr/share/doc/site-ci/TOKENS.md": (
        "# CI tokens\n\nexport GITHUB_TOKEN=ghp_" + "x" * 36 + "\nexport GITLAB_TOKEN=glpat-<token>\n"
        "export SLACK_TOKEN=xoxb-your-token-here\nexport NPM_TOKEN=${NPM_TOKEN}\nexport STRIPE_KEY=changeme\n"
        "export GITHUB_TOKEN=ghp_0123456789abcdefghijklmnopqrstuvwxyz\nexport PYPI_TOKEN=pypi-<token>\n"
        f"A JWT looks like {JWT_SAMPLE}\n").encode(),
}


def _decoy_files(keys: _Keys) -> dict[str, bytes]:
    """Every decoy: path -> content."""
    # pylint: disable=too-many-locals
    _private, alice_public = keys.openssh("alice")
    _pgp_secret, keyring = keys.pgp()
    template = json.dumps({"type": "service_account", "project_id": "PROJECT_ID", "private_key_id": "KEY_ID",
                           "private_key": "-----BEGIN PRIVATE KEY-----\n...\n-----END PRIVATE KEY-----\n",
                           "client_email": "SERVICE_ACCOUNT_EMAIL"}, indent=2).encode()
    cert_data = base64.b64encode(keys.certificate).decode()
    redacted = ("apiVersion: v1\nkind: Config\nusers:\n- name: admin\n  user:\n"
                f"    client-certificate-data: {cert_data}\n    client-key-data: DATA+OMITTED\n").encode()
    docker = json.dumps({"auths": {"registry.example.org": {}}, "credsStore": "secretservice"}, indent=1).encode()
    azure = ("# the storage emulator (Azurite), and where the production key goes\n"
             "dev = DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;"
             f"AccountKey={AZURITE_KEY};BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;\n"
             "prod = DefaultEndpointsProtocol=https;AccountName=<account>;AccountKey=<account-key>\n").encode()
    sums = b"".join(f"{os.urandom(32).hex()}  pkg/file{index}.so\n".encode() for index in range(20))
    record = b"".join(f"app/mod{index}.py,sha256={base64.urlsafe_b64encode(os.urandom(32)).rstrip(b'=').decode()},"
                      f"{1000 + index}\n".encode() for index in range(20))
    assets = json.dumps({f"static/js/chunk{index}.js": {
        "integrity": "sha384-" + base64.b64encode(os.urandom(48)).decode()} for index in range(8)}, indent=2).encode()
    changelog = b"app (1.2-1) bookworm; urgency=medium\n\n  * New upstream release.\n\n -- Maintainer <m@example.org>\n" * 40
    jar = _zip({"META-INF/MANIFEST.MF": b"Manifest-Version: 1.0\nMain-Class: org.example.Main\n",
                "org/example/Main.class": b"\xca\xfe\xba\xbe\x00\x00\x00\x3d" + os.urandom(900)})
    return {
        "usr/share/doc/site-tools/README.md": PROSE,
        "usr/share/man/man5/credentials.5": MAN_PAGE,
        "etc/skel/.aws/credentials": f"[default]\naws_access_key_id = {AWS_EXAMPLE_ID}\n"
                                     f"aws_secret_access_key = {AWS_EXAMPLE_SECRET}\n".encode(),
        "usr/local/bin/check-credentials": SCRIPT,
        "usr/lib/python3/dist-packages/keyhelp/__init__.py": PYTHON,
        "etc/ssl/certs/node.pem": keys.certificate,
        "etc/ssl/certs/node.der": _run("openssl", "x509", "-outform", "DER", data=keys.certificate),
        "etc/ssl/public/node.pub.pem": keys.public_pem,
        "home/alice/.ssh/id_ed25519.pub": alice_public,
        "home/alice/.ssh/authorized_keys": alice_public,
        "usr/share/keyrings/site-archive-keyring.gpg": keyring,
        "etc/ssl/certs/java/cacerts": keys.keystore("JKS", trust_only=True),
        "opt/app/conf/truststore.p12": keys.keystore("PKCS12", trust_only=True),
        "etc/pki/tls/ca-bundle.p12": keys.pkcs12("-nokeys", "-certpbe", "NONE"),
        "opt/analytics/key-template.json": template,
        "etc/results-uploader/storage.example.ini": azure,
        "root/.kube/config.redacted": redacted,
        "root/.docker/config.json": docker,
        "usr/share/doc/vault/README": b"export VAULT_TOKEN=hvs.<token>  # from `vault login`\n"
                                      b"Legacy tokens look like s.<24 characters>.\n",
        "usr/share/doc/postgresql-common/pgpass.sample": b"# hostname:port:database:username:password\n"
                                                         b"#localhost:5432:*:postgres:<password>\n",
        "usr/share/doc/curl/netrc.sample": b"machine example.com login anonymous password <password>\n",
        "var/lib/site/SHA256SUMS": sums,
        "usr/lib/python3/dist-packages/app-1.0.dist-info/RECORD": record,
        "usr/share/site-portal/asset-manifest.json": assets,
        "usr/share/doc/app/changelog.Debian.gz": gzip.compress(changelog),
        "usr/share/java/site-app.jar": jar,
        "var/backups/certs.tar.gz": _tar({"certs/node.pem": keys.certificate, "certs/README": PROSE}, "gz"),
        "var/lib/site/state.gz": gzip.compress(os.urandom(600)),
        **HPC_DECOYS,
    }


def plant(root: Path, scratch: Path | None = None) -> Corpus:
    """Write the corpus into the directory ``root`` (created if missing); ``scratch`` holds the key
    tools' working files (a temporary directory when None, removed after)."""
    missing = missing_tools()
    if missing:
        raise RuntimeError(f"the secret corpus needs {', '.join(missing)} (scripts/setup.sh installs them)")
    work = Path(tempfile.mkdtemp(prefix="secret-corpus-", dir=scratch))
    try:
        keys = _Keys(work)
        secret_files = _secret_files(keys)
        decoy_files = _decoy_files(keys)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for rel, data in [*((rel, data) for rel, (data, _form) in secret_files.items()), *decoy_files.items()]:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return Corpus(root, {rel: form for rel, (_data, form) in secret_files.items()}, tuple(sorted(decoy_files)))
