"""Image and version names: pack and deploy accept and refuse the same names, with the same message.

Each side is asked through its own entry point (pack's request validation, deploy's apply_state),
so the test holds whatever module the rule lives in.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from bootlink_fixtures import make_pack

from ansible_collections.hpc.stateless.plugins.module_utils._contract.names import (
    CPIO_FORMATS,
    FORMATS,
    SQUASHFS_FORMAT,
    artifact_file,
    format_of,
    url_quote,
)
from ansible_collections.hpc.stateless.plugins.module_utils._deploy.bootlink import apply_state
from ansible_collections.hpc.stateless.plugins.module_utils._layers.graph import LayerGraph, LayerSpecError
from ansible_collections.hpc.stateless.plugins.module_utils._pack.compress import COMPRESSORS
from ansible_collections.hpc.stateless.plugins.module_utils._pack.run import PackError, PackRequest

GOOD = ["1.0~rc1", "2026.11.23+site1", "2.36-9+deb12u4", "v1.2-3-gabc123-dirty", "Release_2", "a" * 128, "7"]
BAD = ["", ".", "..", ".hidden", "-lead", "~rc1", "+site1", "_x", "a/b", "has space", "tab\there", "line\nbreak", "v1\n",
       "a,b", "a:b", "a$b", "a%2Bb", "caf\u00e9", "a" * 129, "previous", "images", "ipxe", "pxelinux.cfg",
       "pxelinux.0", "ldlinux.c32"]


def pack_refusal(tmp_path: Path, kind: str, value: str) -> str | None:
    names = {"image": "compute", "version": "v1", kind: value}
    request = PackRequest(image=names["image"], version=names["version"], output_dir=str(tmp_path / "out"),
                          formats=["cpio.zst"], source_path=str(tmp_path))
    try:
        request.validate()
    except PackError as exc:
        return str(exc)
    return None


def deploy_refusal(tmp_path: Path, kind: str, value: str) -> str | None:
    names = {"image": "compute", "version": "v1", kind: value}
    params = {"boot_root": str(tmp_path / "tftp"), "image": names["image"], "version": names["version"],
              "state": "absent", "keep": 3, "lock_timeout": 0}
    try:
        apply_state(params, check_mode=True)
    except Exception as exc:  # pylint: disable=broad-exception-caught  # any refusal; the message is compared
        return str(exc)
    return None


@pytest.mark.parametrize("kind", ["image", "version"])
@pytest.mark.parametrize("value", GOOD)
def test_both_stages_accept_debian_style_and_git_describe_names(tmp_path, kind, value):
    assert pack_refusal(tmp_path, kind, value) is None
    assert deploy_refusal(tmp_path, kind, value) is None


@pytest.mark.parametrize("kind", ["image", "version"])
@pytest.mark.parametrize("value", BAD)
def test_both_stages_refuse_the_same_names_with_the_same_message(tmp_path, kind, value):
    packed = pack_refusal(tmp_path, kind, value)
    deployed = deploy_refusal(tmp_path, kind, value)
    assert packed is not None and deployed is not None
    assert packed == deployed
    assert packed.startswith(f"{kind} {value!r} is not a valid name")


def test_a_packed_debian_style_version_deploys(tmp_path):
    src = make_pack(tmp_path / "out", version="1.0~rc1")
    result = apply_state({"boot_root": str(tmp_path / "tftp"), "image": "compute", "src": str(src),
                          "state": "switched", "keep": 3, "lock_timeout": 0})
    assert result["current"] == "1.0~rc1"
    assert (tmp_path / "tftp" / "compute").readlink() == Path("images/compute/1.0~rc1")


def test_pack_compresses_every_cpio_format_of_the_contract():
    assert set(COMPRESSORS) == set(CPIO_FORMATS) and FORMATS == CPIO_FORMATS + (SQUASHFS_FORMAT,)
    assert [format_of(artifact_file("compute", fmt)) for fmt in FORMATS] == list(FORMATS)
    assert format_of("initrd.img") is None


def test_names_in_http_urls_quote_plus_only():
    assert url_quote("2026.11.23+site1") == "2026.11.23%2Bsite1"
    assert url_quote("1.0~rc1_a-b.c") == "1.0~rc1_a-b.c"


@pytest.mark.parametrize("image", ["previous", "pxelinux.cfg", "i" * 129])
def test_the_layer_dag_refuses_image_names_pack_and_deploy_would_refuse(image):
    with pytest.raises(LayerSpecError, match=rf"hpc_stateless_images\.{re.escape(image)}: image '{image}' "
                                             "is not a valid name"):
        LayerGraph.from_spec({"base": {"bootstrap": {"distro": "debian", "release": "12"}}}, {image: {"layer": "base"}})
