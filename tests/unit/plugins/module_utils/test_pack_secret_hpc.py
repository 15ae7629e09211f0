"""The credentials an HPC node image carries in its own configuration, and service tokens by their prefix: each
form found with where it is, and the look-alikes next to it (locked accounts, commented or templated settings,
placeholder tokens) left quiet. The whole corpus, packed for real, is tests/faults/test_planted_secret_forms.py."""

from __future__ import annotations

import random
import string
import subprocess
import uuid

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils._pack import secrets, tokens

HASH = subprocess.run(["openssl", "passwd", "-6", "s3cret-pw"], check=True, capture_output=True).stdout.strip()
SHADOW_TAIL = b":19700:0:99999:7:::\n"


@pytest.mark.parametrize(("content", "form"), [
    (b"root:" + HASH + SHADOW_TAIL, "shadow password hash (sha512crypt) of account 'root' at byte 0"),
    (b"root:*" + SHADOW_TAIL + b"node:$y$j9T$abcdefghijklmnop$ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789abcdefg" + SHADOW_TAIL,
     "shadow password hash (yescrypt) of account 'node' at byte 26"),
    (b"root:*" + SHADOW_TAIL + b"guest:" + SHADOW_TAIL,
     "shadow entry of account 'guest' with an empty password field (it logs in without a password) at byte 26"),
    (b"root::0:0:root:/root:/bin/bash\n", "passwd entry of account 'root' with an empty password field (it logs in "
                                          "without a password) at byte 0"),
    (b"root:abJnggxhB/yWI:0:0:root:/root:/bin/bash\n", "passwd password hash (DES crypt) of account 'root' at byte 0"),
    (b"admins:" + HASH + b"::alice\n", "group password hash (sha512crypt) of group 'admins' at byte 0"),
    (b"monitor:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=\n", "htpasswd password hash (SHA-1) of user 'monitor' at byte 0"),
    (b"[domain/x]\nldap_default_authtok_type = obfuscated_password\nldap_default_authtok = AAAQAHk4cVcoIy\n",
     "sssd LDAP bind password (ldap_default_authtok) at byte 59"),
    (b"base dc=x\nrootbindpw Wq9zTr4p\n",
     "LDAP bind password (rootbindpw, as nslcd.conf or pam_ldap.conf hold it) at byte 10"),
    (b"accountingstoragepass=Wq9zTr4p\n", "Slurm database password (accountingstoragepass) at byte 0"),
    (b"[site]\nbaseurl=https://ci:Wq9zTr4p@rpm.example.org/el9/\n",
     "password in a package source or proxy URL (user@rpm.example.org) at byte 20"),
    (b'Acquire::http::Proxy "http://proxy:Wq9zTr4p@proxy.example.org:3128";\n',
     "password in a package source or proxy URL (user@proxy.example.org:3128) at byte 26"),
    (b"[global]\nindex-url = https://ci:Wq9zTr4p@pypi.example.org/simple\n",
     "password in a package source or proxy URL (user@pypi.example.org) at byte 26"),
    (b"//npm.example.org/:_password=V3E5elRyNHA=\n", "npm registry credential (_password, .npmrc) at byte 0"),
    (b"TOKEN=glpat-Wq9zTr4pXb7Lm2Nc5Vd8\n", "GitLab token (glpat-) at byte 6"),
    (b'{"token": "xoxb-730481926455-2918374650192-Wq9zTr4pXb7Lm2Nc5Vd8Kf3h"}', "Slack token (xoxb-) at byte 11"),
], ids=["shadow", "shadow-yescrypt", "shadow-empty", "passwd-empty", "passwd-des", "gshadow", "htpasswd-sha",
        "sssd-obfuscated", "rootbindpw", "slurm-lower-case", "yum-baseurl", "apt-proxy", "pip-index-url", "npmrc",
        "gitlab", "slack-json"])
def test_found(content, form):
    assert secrets.sniff(content) == form


@pytest.mark.parametrize("content", [
    b"root:*" + SHADOW_TAIL + b"a:!" + SHADOW_TAIL + b"b:!!" + SHADOW_TAIL + b"c:!*" + SHADOW_TAIL
    + b"d:!" + HASH + SHADOW_TAIL,  # locked, a locked hash too
    b"root:x:0:0:root:/root:/bin/bash\n",  # shadowed
    b"users:x:100:\nadmins:!::alice\n",  # no group password
    b"# bindpw Wq9zTr4p\nuri ldap://ldap\n",  # commented
    b"bindpw ${LDAP_BIND_PASSWORD}\n", b"ldap_default_authtok = <password>\n", b"StoragePass=changeme\n",
    b"deb http://user:pass@deb.example.org/debian bookworm main\n",  # a placeholder
    b"See https://user:Wq9zTr4p@example.org for the syntax.\n",  # a URL in prose, not a source or proxy line
    b"ghp_" + b"x" * 36 + b"\n", b"npm_0123456789abcdefghijklmnopqrstuvwxyz\n", b"xoxb-your-token-here\n",
    b"sk_live_EXAMPLEEXAMPLEEXAMPLE\n",
    b"a:b:c\nd:e\n",  # colon lines of no one format
], ids=["locked", "passwd-x", "group", "commented", "variable", "template", "changeme", "placeholder-url", "prose-url",
        "ghp-x", "npm-counting", "slack-words", "stripe-example", "mixed-colons"])
def test_quiet(content):
    assert secrets.sniff(content) is None


def test_every_form_is_gated_by_a_two_byte_start_or_looked_for_whole():
    grouped = {group for groups in tokens._BY_START.values() for group in groups}  # pylint: disable=protected-access
    assert grouped | set(tokens._WHOLE) | set(tokens._IN_RUN) == {group for group, _what, _pattern in tokens.FORMS}  # pylint: disable=protected-access
    assert all(len(start) == 2 for start in tokens._BY_START)  # pylint: disable=protected-access


def rand(alphabet: str, count: int) -> str:
    return "".join(random.choice(alphabet) for _index in range(count))


B62, HEX, LOWER36 = string.ascii_letters + string.digits, "0123456789abcdef", string.ascii_lowercase + string.digits

#: The forms of tokens.FORMS the planted corpus does not hold (it holds one file per gitleaks rule of its
#: TOKEN_RULES): a token of each, made as the service documents it, and what the scan names it.
MORE_TOKENS = {
    "gitlab_runner_reg": lambda: ("GR1348941" + rand(B62, 20), "GitLab runner registration token"),
    "gitlab_session": lambda: ("_gitlab_session=" + rand(LOWER36, 32), "GitLab session cookie"),
    "teams_webhook": lambda: (f"https://acme.webhook.office.com/webhookb2/{uuid.uuid4()}@{uuid.uuid4()}/IncomingWebhook/"
                              f"{rand(HEX, 32)}/{uuid.uuid4()}", "Microsoft Teams webhook URL"),
    "onepassword": lambda: ("ops_eyJ" + rand(B62, 260), "1Password token (ops_)"),
    "adobe": lambda: ("p8e-" + rand(B62, 32), "Adobe client secret (p8e-)"),
    "airtable": lambda: ("pat" + rand(B62, 14) + "." + rand(HEX, 64), "Airtable personal access token"),
    "artifactory": lambda: ("AKCp" + rand(B62, 69), "JFrog Artifactory token"),
    "bedrock": lambda: ("ABSK" + rand(B62, 120), "Amazon Bedrock API key"),
    "azure_ad": lambda: (rand(B62, 3) + "8Q~" + rand(B62, 34), "Azure AD client secret"),
    "clickhouse": lambda: ("4b1d" + rand(B62, 38), "ClickHouse Cloud API secret"),
    "clojars": lambda: ("CLOJARS_" + rand(LOWER36, 60), "Clojars token (CLOJARS_)"),
    "cloudflare_ca": lambda: (f"v1.0-{rand(HEX, 24)}-{rand(HEX, 146)}", "Cloudflare Origin CA key"),
    "duffel": lambda: ("duffel_live_" + rand(B62, 43), "Duffel API token (duffel_live_)"),
    "easypost": lambda: ("EZAK" + rand(B62, 54), "EasyPost API key"),
    "facebook": lambda: ("EAAC" + rand(B62, 120), "Facebook page access token"),
    "flutterwave": lambda: (f"FLWSECK_TEST-{rand('abcdefgh0123456789', 32)}-X", "Flutterwave key (FLWSECK_)"),
    "flyio": lambda: ("fo1_" + rand(B62, 43), "Fly.io token (fo1_)"),
    "frameio": lambda: ("fio-u-" + rand(B62, 64), "Frame.io token (fio-u-)"),
    "grafana": lambda: ("glc_" + rand(B62, 40), "Grafana token (glc_)"),
    "harness": lambda: (f"pat.{rand(B62, 22)}.{rand(B62, 24)}.{rand(B62, 20)}", "Harness token"),
    "terraform": lambda: (f"{rand(LOWER36, 14)}.atlasv1.{rand(LOWER36, 64)}", "Terraform Cloud token"),
    "heroku": lambda: ("HRKU-AA" + rand(B62, 58), "Heroku API key (HRKU-)"),
    "infracost": lambda: ("ico-" + rand(B62, 32), "Infracost token (ico-)"),
    "intra42": lambda: ("s-s4t2ud-" + rand(HEX, 64), "42 intra client secret (s-s4t2ud-)"),
    "maxmind": lambda: (f"{rand(B62, 6)}_{rand(B62, 29)}_mmk", "MaxMind license key"),
    "notion": lambda: ("ntn_" + rand(string.digits, 11) + rand(B62, 35), "Notion token (ntn_)"),
    "octopus": lambda: ("API-" + rand(string.ascii_uppercase + string.digits, 26), "Octopus Deploy API key (API-)"),
    "openshift": lambda: ("sha256~" + rand(B62, 43), "OpenShift user token"),
    "perplexity": lambda: ("pplx-" + rand(B62, 48), "Perplexity API key (pplx-)"),
    "readme": lambda: ("rdme_" + rand(LOWER36, 70), "ReadMe API key (rdme_)"),
    "scalingo": lambda: ("tk-us-" + rand(B62, 48), "Scalingo token (tk-us-)"),
    "settlemint": lambda: ("sm_pat_" + rand(B62, 16), "SettleMint token (sm_pat_)"),
    "shippo": lambda: ("shippo_live_" + rand(HEX, 40), "Shippo API token (shippo_live_)"),
    "square": lambda: ("sq0atp-" + rand(B62, 22), "Square access token (sq0atp-)"),
    "nuget": lambda: (f'<add key="ClearTextPassword" value="{rand(B62, 16)}" />', "NuGet feed password"),
    "sendinblue": lambda: (f"xkeysib-{rand(HEX, 64)}-{rand(B62, 16)}", "Brevo (Sendinblue) API key (xkeysib-)"),
    "dynatrace": lambda: (f"dt0c01.{rand(B62, 24)}.{rand(B62, 64)}", "Dynatrace API token"),
}


@pytest.mark.parametrize("group", sorted(MORE_TOKENS))
def test_every_token_form_is_found_at_its_place(group):
    value, form = MORE_TOKENS[group]()
    content = f"[site]\nsecret = {value}\n".encode()
    at = content.index(value.encode()) + (len("https://") if value.startswith("https://") else 0)  # the host on
    assert tokens.token(content) == f"{form} at byte {at}"


def test_a_finding_shows_the_fixed_prefix_only():
    value = f"AbCdEf_{rand(B62, 29)}_mmk"  # a MaxMind key: its random part starts like a prefix would
    assert tokens.token(f"key={value}\n".encode()) == "MaxMind license key at byte 4"


def test_the_token_forms_are_all_tested_here_or_in_the_corpus():
    corpus_groups = {"github_classic", "github_fine", "gitlab", "slack", "slack_app", "slack_webhook", "stripe", "npm",
                     "pypi", "openai", "anthropic", "huggingface", "gcp_api_key", "digitalocean", "doppler",
                     "databricks", "sendgrid", "shopify", "twilio", "postman", "pulumi", "rubygems", "linear",
                     "alibaba", "sentry", "prefect", "planetscale", "jwt"}
    assert {group for group, _what, _pattern in tokens.FORMS} == corpus_groups | set(MORE_TOKENS)
