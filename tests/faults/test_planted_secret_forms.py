"""Every secret form an image leaks, planted in a tree with decoys next to them: pack refuses, names each
secret with the form it found and no decoy, and writes nothing under a final name (issue 30).

The tree is a small root (a stand-in kernel in /boot) with the planted corpus of secret_corpus.py (the
one the benchmark runs detect-secrets on); the pack is the real hpc.stateless.pack module on it.

The token files stand for these gitleaks default rules (config/gitleaks.toml), one file each, each named
(secret_corpus.TOKEN_RULES): github-pat, github-oauth, github-app-token, github-refresh-token,
github-fine-grained-pat, gitlab-pat, gitlab-deploy-token, gitlab-runner-authentication-token, gitlab-ptt,
slack-bot-token, slack-user-token, slack-app-token, slack-webhook-url, stripe-access-token, npm-access-token,
pypi-upload-token, openai-api-key, anthropic-api-key, huggingface-access-token, gcp-api-key, digitalocean-pat,
doppler-api-token, dynatrace-api-token, databricks-api-token, sendgrid-api-token, shopify-access-token,
twilio-api-key, postman-api-token, pulumi-api-token, rubygems-api-token, linear-api-key, alibaba-access-key-id,
sentry-user-token, prefect-api-token, planetscale-api-token, grafana-service-account-token, jwt; with the older
forms of the corpus, also aws-access-token (a key pair), private-key, pkcs12-file, vault-service-token and
age-secret-key. gitleaks is not installable here: each token is of the form its rule matches, by construction.
"""

from __future__ import annotations

import re
from pathlib import Path

import secret_corpus
from faults_site import FAULTS_IMAGE
from pack_support import pack_module, small_root


def refused_paths(message: str) -> dict[str, str]:
    """``{path: form}`` of the refusal's list (``refusing to pack secrets: /a (form); /b (form). Remove ...``)."""
    listed = message.split("refusing to pack secrets: ", 1)[1].split(". Remove them", 1)[0]
    return {match.group(1): match.group(2) for match in re.finditer(r"(?:^|; )/(\S+) \((.*?)\)(?=; /|$)", listed)}


def final_names(output: Path) -> list[str]:
    """Everything under ``output`` that is not below a hidden (partial) directory."""
    return sorted(str(path.relative_to(output)) for path in output.rglob("*")
                  if not any(part.startswith(".") for part in path.relative_to(output).parts))


def test_pack_refuses_every_planted_form_names_no_decoy_and_writes_nothing(tmp_path):
    root = small_root(tmp_path)
    corpus = secret_corpus.plant(root, tmp_path)
    out = tmp_path / "out"

    rc, result = pack_module(image=FAULTS_IMAGE, source_path=str(root), output_dir=str(out), version="v1")

    assert rc != 0, "pack packed a tree full of secrets"
    message = result["msg"]
    assert "refusing to pack secrets" in message, message
    named = refused_paths(message)
    missed = {rel: form for rel, form in corpus.secrets.items() if named.get(rel) != form}
    assert not missed, "not named, or named with another form:\n" + "\n".join(
        f"  /{rel}: want {form!r}, got {named.get(rel)!r}" for rel, form in sorted(missed.items()))
    assert {f"etc/tokens/{rule}.env" for rule in secret_corpus.TOKEN_RULES} <= set(named)
    decoys = sorted(set(named) & set(corpus.decoys))
    assert not decoys, f"decoys named as secrets: {decoys}"
    assert sorted(named) == sorted(corpus.secrets), f"named beyond the planted secrets: {sorted(set(named) - set(corpus.secrets))}"
    assert not out.exists() or final_names(out) == [], f"the refused pack wrote {final_names(out)}"


def test_the_same_tree_without_the_secrets_packs(tmp_path):
    """The decoys alone pack (check mode: nothing written): they are no secrets to pack either."""
    root = small_root(tmp_path)
    corpus = secret_corpus.plant(root, tmp_path)
    for rel in corpus.secrets:
        (root / rel).unlink()

    rc, result = pack_module(image=FAULTS_IMAGE, source_path=str(root), output_dir=str(tmp_path / "out"),
                             version="v1", check_mode=True)

    assert rc == 0, result.get("msg")
    assert not (tmp_path / "out").exists() or final_names(tmp_path / "out") == []
