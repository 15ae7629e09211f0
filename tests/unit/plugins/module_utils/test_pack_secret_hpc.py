"""The credentials an HPC node image carries in its own configuration, and service tokens by their prefix: each
form found with where it is, and the look-alikes next to it (locked accounts, commented or templated settings,
placeholder tokens) left quiet. The whole corpus, packed for real, is tests/faults/test_planted_secret_forms.py."""

from __future__ import annotations

import subprocess

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils._pack import secrets, tokens

HASH = subprocess.run(["openssl", "passwd", "-6", "s3cret-pw"], check=True, capture_output=True).stdout.strip()
SHADOW_TAIL = b":19700:0:99999:7:::\n"


@pytest.mark.parametrize(("content", "form"), [
    (b"root:" + HASH + SHADOW_TAIL, "shadow password hash (sha512crypt) of account 'root' at byte 0"),
    (b"root:*" + SHADOW_TAIL + b"node:$y$j9T$abcdefghijklmnop$ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789abcdefg" + SHADOW_TAIL,
     "shadow password hash (yescrypt) of account 'node' at byte 26"),
    (b"root:*" + SHADOW_TAIL + b"guest:" + SHADOW_TAIL, "shadow entry of account 'guest' with an empty password "
                                                         "field (it logs in without a password) at byte 26"),
    (b"root::0:0:root:/root:/bin/bash\n", "passwd entry of account 'root' with an empty password field (it logs in "
                                          "without a password) at byte 0"),
    (b"root:abJnggxhB/yWI:0:0:root:/root:/bin/bash\n", "passwd password hash (DES crypt) of account 'root' at byte 0"),
    (b"admins:" + HASH + b"::alice\n", "group password hash (sha512crypt) of group 'admins' at byte 0"),
    (b"monitor:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=\n", "htpasswd password hash (SHA-1) of user 'monitor' at byte 0"),
    (b"[domain/x]\nldap_default_authtok_type = obfuscated_password\nldap_default_authtok = AAAQAHk4cVcoIy\n",
     "sssd LDAP bind password (ldap_default_authtok) at byte 59"),
    (b"base dc=x\nrootbindpw Wq9zTr4p\n", "LDAP bind password (rootbindpw, as nslcd.conf or pam_ldap.conf hold it) at "
                                        "byte 10"),
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
