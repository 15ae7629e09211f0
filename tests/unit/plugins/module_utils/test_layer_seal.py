"""The seal the build runs after every layer's roles: the opt-out rule, and what the content key covers.

The build itself (a site role that installs openssh-server, packed without host keys) is
tests/integration/test_seal.py.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils._layers.content_key import RoleIndex, compute_keys
from ansible_collections.hpc.stateless.plugins.module_utils._layers.graph import LayerGraph
from ansible_collections.hpc.stateless.plugins.module_utils._layers.seal import (
    SEAL_SKIP_REASON_VAR,
    SEAL_VAR,
    LayerSeal,
    SealError,
    layer_seal,
)

# --------------------------------------------------------------------------- the opt-out rule


@pytest.mark.parametrize("seal", [True, None, "yes", "true", "on", 1])
def test_a_layer_is_sealed_unless_it_opts_out(seal):
    decision = layer_seal("compute", seal, "ignored while sealed")
    assert decision == LayerSeal("compute", True, "")
    assert decision.report == "layer compute sealed (hpc.stateless.base tasks_from=seal)"


@pytest.mark.parametrize("seal", [False, "no", "false", "off", 0])
def test_an_opt_out_with_a_reason_is_recorded(seal):
    decision = layer_seal("login", seal, "  site keys: login nodes share one host key (ticket 42) ")
    assert decision == LayerSeal("login", False, "site keys: login nodes share one host key (ticket 42)")
    assert decision.report == "layer login NOT sealed (hpc_stateless_seal: false): " \
        "site keys: login nodes share one host key (ticket 42)"


@pytest.mark.parametrize("reason", [None, "", "   ", 42, ["a list"]])
def test_an_opt_out_without_a_reason_is_an_error_naming_the_layer(reason):
    with pytest.raises(SealError, match=rf"^layer login: {SEAL_VAR} is false without {SEAL_SKIP_REASON_VAR}: say why"):
        layer_seal("login", False, reason)


def test_a_reason_of_several_lines_and_a_seal_that_is_no_boolean_are_errors():
    with pytest.raises(SealError, match=rf"^layer login: {SEAL_SKIP_REASON_VAR} must be one line"):
        layer_seal("login", False, "one\ntwo")
    with pytest.raises(SealError, match=rf"^layer login: {SEAL_VAR} must be true or false, not 'maybe'"):
        layer_seal("login", "maybe", "")


# --------------------------------------------------------------------------- the content key


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")


@pytest.fixture(name="roles")
def fixture_roles(tmp_path: Path) -> Path:
    """A site role and a stand-in of the seal role (its ``seal`` entry point reads one variable)."""
    root = tmp_path / "roles"
    write(root / "site/tasks/main.yml", """
        - name: Install the SSH server
          ansible.builtin.package:
            name: openssh-server
        """)
    write(root / "sealer/tasks/seal.yml", """
        - name: Remove the host keys
          ansible.builtin.debug:
            msg: removed
          when: not sealer_keep_keys
        """)
    return root


LAYERS = {
    "root": {"bootstrap": {"distro": "debian", "release": "12"}, "roles": []},
    "site": {"parent": "root", "roles": ["site"]},
}


def keys(roles: Path, seal_role: str | None = "sealer", **site_vars) -> dict:
    index = RoleIndex([str(roles)], [])
    graph = LayerGraph.from_spec(LAYERS, role_exists=index.exists)
    return compute_keys(graph, index, lambda name: dict(site_vars) if name == "site" else {}, seal_role=seal_role)


def test_the_key_of_a_layer_with_roles_covers_the_seal_role_and_the_opt_out(roles):
    sealed = keys(roles)
    assert sealed["site"].seal == "sealer"
    assert {"sealer_keep_keys", SEAL_VAR, SEAL_SKIP_REASON_VAR} <= set(sealed["site"].variables)
    assert sealed["site"].key != keys(roles, seal_role=None)["site"].key
    # Opting out, its reason, a variable the seal reads and the seal's own files all re-key the layer.
    variants = [keys(roles, **{SEAL_VAR: False, SEAL_SKIP_REASON_VAR: "a"}),
                keys(roles, **{SEAL_VAR: False, SEAL_SKIP_REASON_VAR: "b"}),
                keys(roles, sealer_keep_keys=True)]
    write(roles / "sealer/tasks/seal.yml", "- ansible.builtin.meta: noop\n")
    variants.append(keys(roles))
    assert len({sealed["site"].key, *(variant["site"].key for variant in variants)}) == 5
    # A variable neither the roles nor the seal read does not.
    assert keys(roles, unrelated=1)["site"].key == keys(roles)["site"].key


def test_a_layer_without_roles_is_not_sealed_so_its_key_stays(roles):
    assert keys(roles)["root"].seal is None
    assert keys(roles)["root"].key == keys(roles, seal_role=None)["root"].key
