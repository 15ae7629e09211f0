# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Service tokens that say what they are: a vendor's fixed prefix, then the random part.

:func:`token` finds the first such token in a text window in one pass of one regular expression (the
prefixes are alternatives of it, so text without any costs one scan) and says which service's it is.
The forms are those the services document and gitleaks' default rules know by their prefix (GitHub,
GitLab, Slack, Stripe, npm, PyPI, OpenAI, Anthropic, Hugging Face, Google API keys, DigitalOcean,
JWTs, ...; :data:`FORMS` lists each with its shape). Written here from the services' documented
formats; what gitleaks finds only by a keyword nearby (``twitter ... = <25 characters>``) is not
looked for: no prefix tells such a value from any other.

A match is a token only when its random part is random-looking: at least a third of its characters
distinct (``ghp_xxxx...`` is a placeholder), not a counting run (``ghp_0123456789abcdef...``), no
placeholder word (``token``, ``EXAMPLE``) or run (``xxxxx``, ``000000``) in it. A JWT must decode to a JSON header with ``alg`` and a JSON
payload, and is not jwt.io's published sample.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterable, Iterator

_MAX_MATCHES = 64

# (group name, service and kind, pattern). Every pattern starts with its literal prefix.
FORMS: tuple[tuple[str, str, bytes], ...] = (
    ("github_classic", "GitHub token", rb"gh[pousr]_[A-Za-z0-9]{36}"),
    ("github_fine", "GitHub fine-grained personal access token", rb"github_pat_[A-Za-z0-9_]{82}"),
    ("gitlab", "GitLab token", rb"gl(?:pat|dt|ft|rt|soat|ffct|imt|agent|oas|ptt|cbt)-[A-Za-z0-9_.-]{20,300}"),
    ("gitlab_runner_reg", "GitLab runner registration token", rb"GR1348941[A-Za-z0-9_-]{20}"),
    ("gitlab_session", "GitLab session cookie", rb"_gitlab_session=[0-9a-z]{32}"),
    ("slack", "Slack token", rb"xox(?:[abposre]-(?:[0-9]-)?[0-9]{1,14}-[0-9A-Za-z-]{8,250}|[ar]-(?:[0-9]-)?[0-9A-Za-z]{8,48})"),
    ("slack_app", "Slack app-level token", rb"xapp-[0-9]-[A-Z0-9]+-[0-9]+-[a-z0-9]+"),
    ("slack_webhook", "Slack webhook URL", rb"hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9+/]{43,56}"),
    ("teams_webhook", "Microsoft Teams webhook URL",
     rb"[a-z0-9]+\.webhook\.office\.com/webhookb2/[a-z0-9-]{36}@[a-z0-9-]{36}/IncomingWebhook/[a-z0-9]{32}/[a-z0-9-]{36}"),
    ("stripe", "Stripe secret key", rb"[sr]k_(?:test|live|prod)_[A-Za-z0-9]{10,99}"),
    ("npm", "npm access token", rb"npm_[A-Za-z0-9]{36}"),
    ("pypi", "PyPI upload token", rb"pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{50,1000}"),
    ("openai", "OpenAI API key", rb"sk-(?:(?:proj|svcacct|admin)-)?[A-Za-z0-9_-]{20,74}T3BlbkFJ[A-Za-z0-9_-]{20,74}"),
    ("anthropic", "Anthropic API key", rb"sk-ant-(?:api03|admin01)-[A-Za-z0-9_-]{93}AA"),
    ("huggingface", "Hugging Face token", rb"(?:hf_|api_org_)[A-Za-z]{34}"),
    ("gcp_api_key", "Google API key", rb"AIza[A-Za-z0-9_-]{35}"),
    ("digitalocean", "DigitalOcean token", rb"do[opr]_v1_[a-f0-9]{64}"),
    ("doppler", "Doppler token", rb"dp\.pt\.[A-Za-z0-9]{43}"),
    ("dynatrace", "Dynatrace API token", rb"dt0c01\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{64}"),
    ("databricks", "Databricks token", rb"dapi[a-f0-9]{32}(?:-[0-9])?"),
    ("sendgrid", "SendGrid API key", rb"SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}"),
    ("sendinblue", "Brevo (Sendinblue) API key", rb"xkeysib-[a-f0-9]{64}-[A-Za-z0-9]{16}"),
    ("shopify", "Shopify token", rb"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}"),
    ("twilio", "Twilio API key", rb"SK[0-9a-f]{32}"),
    ("postman", "Postman API key", rb"PMAK-[a-f0-9]{24}-[a-f0-9]{34}"),
    ("pulumi", "Pulumi token", rb"pul-[a-f0-9]{40}"),
    ("rubygems", "RubyGems API key", rb"rubygems_[a-f0-9]{48}"),
    ("linear", "Linear API key", rb"lin_api_[A-Za-z0-9]{40}"),
    ("onepassword", "1Password token",
     rb"(?:A3-[A-Z0-9]{6}-(?:[A-Z0-9]{11}|[A-Z0-9]{6}-[A-Z0-9]{5})-[A-Z0-9]{5}-[A-Z0-9]{5}-[A-Z0-9]{5}"
     rb"|ops_eyJ[A-Za-z0-9+/]{250,}={0,3})"),
    ("adobe", "Adobe client secret", rb"p8e-[A-Za-z0-9]{32}"),
    ("airtable", "Airtable personal access token", rb"pat[A-Za-z0-9]{14}\.[a-f0-9]{64}"),
    ("alibaba", "Alibaba Cloud access key id", rb"LTAI[A-Za-z0-9]{20}"),
    ("artifactory", "JFrog Artifactory token", rb"(?:AKCp[A-Za-z0-9]{69}|cmVmd[A-Za-z0-9]{59})"),
    ("bedrock", "Amazon Bedrock API key", rb"ABSK[A-Za-z0-9+/]{109,269}={0,2}"),
    ("azure_ad", "Azure AD client secret", rb"[A-Za-z0-9_~.]{3}[0-9]Q~[A-Za-z0-9_~.-]{31,34}"),
    ("clickhouse", "ClickHouse Cloud API secret", rb"4b1d[A-Za-z0-9]{38}"),
    ("clojars", "Clojars token", rb"CLOJARS_[a-z0-9]{60}"),
    ("cloudflare_ca", "Cloudflare Origin CA key", rb"v1\.0-[a-f0-9]{24}-[a-f0-9]{146}"),
    ("duffel", "Duffel API token", rb"duffel_(?:test|live)_[A-Za-z0-9_=-]{43}"),
    ("easypost", "EasyPost API key", rb"EZ[AT]K[A-Za-z0-9]{54}"),
    ("facebook", "Facebook page access token", rb"EAA[MC][A-Za-z0-9]{100,}"),
    ("flutterwave", "Flutterwave key", rb"FLW(?:SECK|PUBK)_TEST-[a-h0-9]{32}-X"),
    ("flyio", "Fly.io token", rb"(?:fo1_[A-Za-z0-9_-]{43}|fm1[ar]_[A-Za-z0-9+/]{100,}={0,3}|fm2_[A-Za-z0-9+/]{100,}={0,3})"),
    ("frameio", "Frame.io token", rb"fio-u-[A-Za-z0-9_=-]{64}"),
    ("grafana", "Grafana token",
     rb"(?:eyJrIjoi[A-Za-z0-9]{70,400}={0,3}|glc_[A-Za-z0-9+/]{32,400}={0,3}|glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8})"),
    ("harness", "Harness token", rb"(?:pat|sat)\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{20}"),
    ("terraform", "Terraform Cloud token", rb"[a-z0-9]{14}\.atlasv1\.[a-z0-9_=-]{60,70}"),
    ("heroku", "Heroku API key", rb"HRKU-AA[0-9A-Za-z_-]{58}"),
    ("infracost", "Infracost token", rb"ico-[A-Za-z0-9]{32}"),
    ("intra42", "42 intra client secret", rb"s-s4t2(?:ud|af)-[a-f0-9]{64}"),
    ("maxmind", "MaxMind license key", rb"[A-Za-z0-9]{6}_[A-Za-z0-9]{29}_mmk"),
    ("notion", "Notion token", rb"ntn_[0-9]{11}[A-Za-z0-9]{35}"),
    ("octopus", "Octopus Deploy API key", rb"API-[A-Z0-9]{26}"),
    ("openshift", "OpenShift user token", rb"sha256~[A-Za-z0-9_-]{43}"),
    ("perplexity", "Perplexity API key", rb"pplx-[A-Za-z0-9]{48}"),
    ("planetscale", "PlanetScale credential", rb"pscale_(?:tkn|oauth|pw)_[A-Za-z0-9_=.-]{32,64}"),
    ("prefect", "Prefect API key", rb"pnu_[A-Za-z0-9]{36}"),
    ("readme", "ReadMe API key", rb"rdme_[a-z0-9]{70}"),
    ("scalingo", "Scalingo token", rb"tk-us-[A-Za-z0-9_-]{48}"),
    ("sentry", "Sentry token", rb"(?:sntryu_[a-f0-9]{64}|sntrys_eyJpYXQiO[A-Za-z0-9+/=_]{50,500})"),
    ("settlemint", "SettleMint token", rb"sm_(?:aat|pat|sat)_[A-Za-z0-9]{16}"),
    ("shippo", "Shippo API token", rb"shippo_(?:live|test)_[a-fA-F0-9]{40}"),
    ("square", "Square access token", rb"(?:EAAA|sq0atp-)[A-Za-z0-9_-]{22,60}"),
    ("nuget", "NuGet feed password", rb"<add key=\"(?:ClearText)?Password\"\s*value=\"[^\"]{8,}\"\s*/>"),
    ("jwt", "JSON Web Token", rb"eyJ[A-Za-z0-9_-]{15,}\.eyJ[A-Za-z0-9_-]{15,}\.[A-Za-z0-9_-]{10,}"),
)
# Where the leading literal of a pattern is short, missing or one of several: the literals an instance holds one of.
_ANCHORS = {"github_classic": (b"ghp_", b"gho_", b"ghu_", b"ghs_", b"ghr_"), "huggingface": (b"hf_", b"api_org_"),
            "onepassword": (b"A3-", b"ops_eyJ"), "azure_ad": (b"Q~",), "maxmind": (b"_mmk",),
            "terraform": (b".atlasv1.",), "flyio": (b"fo1_", b"fm1", b"fm2_"), "grafana": (b"eyJrIjoi", b"glc_", b"glsa_"),
            "harness": (b"pat.", b"sat."), "sentry": (b"sntryu_", b"sntrys_"), "square": (b"EAAA", b"sq0atp-"),
            "artifactory": (b"AKCp", b"cmVmd"), "stripe": (b"sk_", b"rk_"),
            "teams_webhook": (b".webhook.office.com/",), "slack_webhook": (b"hooks.slack.com/",),
            "nuget": (b"<add key=",)}
_NAMES = {group: what for group, what, _pattern in FORMS}
# The prefix ends where the random part starts: the first character class or group of the pattern.
_PREFIX = {group: len(re.split(rb"[\[(\\]", pattern, maxsplit=1)[0]) for group, _what, pattern in FORMS}
_PATTERNS = {group: re.compile(pattern + rb"(?![A-Za-z0-9_-])") for group, _what, pattern in FORMS}
# Forms matched on the whole window when one of their literals is in it: a space or an @ inside.
_WHOLE = ("nuget", "teams_webhook")
# Forms without a fixed start: matched on a run that holds one of their literals.
_IN_RUN = ("azure_ad", "maxmind", "terraform", "slack_webhook")
_IN_RUN_LITERALS = tuple((literal, group) for group in _IN_RUN for literal in _ANCHORS[group])
# The forms each two-byte start begins (from each form's leading literal, or its anchors).
_BY_START: dict[bytes, tuple[str, ...]] = {}
for _group, _what, _pattern in FORMS:
    if _group not in _WHOLE and _group not in _IN_RUN:
        for _literal in _ANCHORS.get(_group, (_pattern[:_PREFIX[_group]],)):
            _BY_START[_literal[:2]] = (*_BY_START.get(_literal[:2], ()), _group)
# The characters of a token; the shortest token of FORMS (a Slack token) is this long.
_RUN_CHARS = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.~+/=-"
MIN_RUN = 15
_RUN_TABLE = bytes(0x61 if value in _RUN_CHARS else 0x20 for value in range(256))
_LONG = b"a" * MIN_RUN
_URLS = ("slack_webhook", "teams_webhook")  # after the // of their URL
_BEFORE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_+/-")
# The fixed prefix a finding shows (``ghp_``, ``glpat-``, ``sk_live_``): what the token says it is, never a character
# of its random part. Forms without one are named by their service alone.
_DISPLAY = {group: re.compile(prefix) for group, prefix in {
    "github_classic": rb"gh[pousr]_", "github_fine": rb"github_pat_", "gitlab": rb"gl[a-z]+-", "slack": rb"xox[a-z]-",
    "slack_app": rb"xapp-", "stripe": rb"[sr]k_(?:test|live|prod)_", "npm": rb"npm_", "pypi": rb"pypi-",
    "openai": rb"sk-(?:proj-|svcacct-|admin-)?", "anthropic": rb"sk-ant-", "huggingface": rb"hf_|api_org_",
    "digitalocean": rb"do[opr]_", "shopify": rb"shp[a-z]{2}_", "postman": rb"PMAK-", "pulumi": rb"pul-",
    "rubygems": rb"rubygems_", "linear": rb"lin_api_", "sentry": rb"sntry[us]_", "prefect": rb"pnu_",
    "planetscale": rb"pscale_[a-z]+_", "grafana": rb"glc_|glsa_", "onepassword": rb"ops_", "adobe": rb"p8e-",
    "clojars": rb"CLOJARS_", "duffel": rb"duffel_(?:test|live)_", "flutterwave": rb"FLW(?:SECK|PUBK)_",
    "flyio": rb"fo1_|fm1[ar]_|fm2_", "frameio": rb"fio-u-", "heroku": rb"HRKU-", "infracost": rb"ico-",
    "intra42": rb"s-s4t2(?:ud|af)-", "notion": rb"ntn_", "octopus": rb"API-", "perplexity": rb"pplx-",
    "readme": rb"rdme_", "scalingo": rb"tk-us-", "settlemint": rb"sm_[a-z]{3}_", "shippo": rb"shippo_(?:live|test)_",
    "square": rb"sq0atp-", "sendinblue": rb"xkeysib-"}.items()}
# Placeholder words (lower case, five letters and more: random text holds one once in 10^9) and runs.
_PLACEHOLDER = re.compile(rb"token|secret|example|EXAMPLE|dummy|sample|placeholder|redacted|changeme|xxxxx|XXXXX|"
                          rb"000000|\*\*\*")
# jwt.io's published sample (header HS256, payload {"sub": "1234567890", "name": "John Doe", ...}): documentation.
_JWT_SAMPLE_PAYLOAD = b"eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ"


def token(data: bytes) -> str | None:
    """The first service token in ``data`` (first by its place) and where (``"GitHub token (ghp_) at byte 12"``),
    or None.

    A token is a run of at least :data:`MIN_RUN` characters of :data:`_RUN_CHARS` (found by a table lookup and
    ``find``, at C speed), or starts in one after ``=`` (``TOKEN=ghp_...``); at each such
    start the first two bytes pick the few forms that begin so. The forms whose start is not a fixed literal, or
    that hold a space or an ``@``, are matched on the whole window when a literal of theirs is in it. Prose and
    most code have few such runs."""
    found: list[tuple[int, str]] = []
    for group in _WHOLE:
        if any(literal in data for literal in _ANCHORS[group]):
            found += _matches(data, group, _PATTERNS[group].finditer(data))
    in_run = [(literal, group) for literal, group in _IN_RUN_LITERALS if literal in data]
    by_start = _BY_START
    for start, end in _runs(data):
        for literal, group in in_run:
            if literal in data[start:end]:
                found += _matches(data, group, _PATTERNS[group].finditer(data, start, end))
        at = start
        while at >= 0:
            for group in by_start.get(data[at:at + 2], ()):
                match = _PATTERNS[group].match(data, at, end)
                if match:
                    found += _matches(data, group, [match])
            at = data.find(b"=", at, end)
            at = at + 1 if at >= 0 else -1
        if found:
            break
    return min(found)[1] if found else None


def _matches(data: bytes, group: str, matches: Iterable[re.Match[bytes]]) -> list[tuple[int, str]]:
    """The first of ``matches`` (of form ``group``) that is a token: ``[(where, what)]``, or []."""
    for number, match in enumerate(matches):
        if number >= _MAX_MATCHES:
            break
        if match.start() and data[match.start() - 1] in _BEFORE and group not in _URLS \
                or not _is_token(group, match.group()):
            continue
        prefix = _DISPLAY[group].match(match.group()) if group in _DISPLAY else None
        shown = f" ({prefix.group().decode('ascii')})" if prefix else ""
        return [(match.start(), f"{_NAMES[group]}{shown} at byte {match.start()}")]
    return []


def _runs(data: bytes) -> Iterator[tuple[int, int]]:
    """``(start, end)`` of each run of at least :data:`MIN_RUN` token characters in ``data``."""
    marks = data.translate(_RUN_TABLE)
    at = marks.find(_LONG)
    while at >= 0:
        end = marks.find(b" ", at)
        end = len(data) if end < 0 else end
        yield at, end
        at = marks.find(_LONG, end)


def _is_token(group: str, value: bytes) -> bool:
    if group == "jwt":
        return _jwt(value)
    return group == "nuget" or random_looking(value[_PREFIX[group]:])


def random_looking(body: bytes) -> bool:
    """Whether the random part of a token looks random: a third of its characters distinct (at most 10 asked: a hex
    body has 16 values), no counting run (``0123456789abcdef...``), no placeholder word or run (``token``,
    ``EXAMPLE``, ``xxxxx``, ``00000``)."""
    if len(set(body)) < max(4, min(10, len(body) // 3)) or _PLACEHOLDER.search(body):
        return False
    steps = sum(1 for before, after in zip(body, body[1:]) if after == before + 1)
    return steps < len(body) // 3


def _jwt(value: bytes) -> bool:
    header, payload, _signature = value.split(b".", 2)
    if payload == _JWT_SAMPLE_PAYLOAD:
        return False
    try:
        decoded = json.loads(_b64url(header))
        json.loads(_b64url(payload))
    except (ValueError, binascii.Error):
        return False
    return isinstance(decoded, dict) and "alg" in decoded


def _b64url(text: bytes) -> bytes:
    return base64.urlsafe_b64decode(text + b"=" * (-len(text) % 4))
