# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one place that knows how the buildah CLI is called.

Every call is an argv list run through ``module.run_command`` with ``LANG=C`` and
``BUILDAH_ISOLATION`` set (``chroot`` unless the caller or the environment says
otherwise: crun cannot start on hosts with hybrid cgroups, chroot isolation can).
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

LABEL_PREFIX = "hpc.stateless."
DEFAULT_IMAGE_PREFIX = "localhost/hpc-stateless"
DEFAULT_ISOLATION = "chroot"


class BuildahError(Exception):
    """A buildah command failed; ``str()`` carries the command and its stderr."""

    def __init__(self, argv: list[str], rc: int, stderr: str) -> None:
        self.argv = argv
        self.rc = rc
        self.stderr = stderr.strip()
        super().__init__(f"{' '.join(argv)} failed (rc={rc}): {self.stderr}")


def container_stem(prefix: str, layer: str) -> str:
    """Start of every working-container name of ``layer`` under image ``prefix``.

    The prefix is part of the name so that builds into different prefixes (tests,
    CI runners, benchmarks) never see, or clean up, each other's containers.
    """
    tag = hashlib.sha256(prefix.rstrip("/").encode("utf-8")).hexdigest()[:6]
    return f"hpc-stateless-{layer}-{tag}-"


def container_name(prefix: str, layer: str, key: str) -> str:
    """Deterministic working-container name, so a rerun finds a leftover."""
    return container_stem(prefix, layer) + key[:12]


def image_ref(prefix: str, layer: str, key: str) -> str:
    """Image reference of a layer: ``<prefix>/<layer>:<content key>``."""
    return f"{prefix.rstrip('/')}/{layer}:{key}"


def isolation_default() -> str:
    return os.environ.get("BUILDAH_ISOLATION") or DEFAULT_ISOLATION


class Buildah:
    """Thin client over the buildah binary, bound to an AnsibleModule."""

    def __init__(self, module: Any, isolation: str | None = None,
                 storage_root: str | None = None, storage_runroot: str | None = None) -> None:
        self.module = module
        self.executable = module.get_bin_path("buildah", required=False)
        if not self.executable:
            module.fail_json(msg="buildah is not installed on the build host; "
                                 "install it (Debian/Ubuntu: apt-get install buildah, EL: dnf install buildah)")
        self.isolation = isolation or isolation_default()
        self.global_args: list[str] = []
        if storage_root:
            self.global_args += ["--root", storage_root]
        if storage_runroot:
            self.global_args += ["--runroot", storage_runroot]

    def run(self, *args: str, check: bool = True, env: dict[str, str] | None = None) -> tuple[int, str, str]:
        argv = [self.executable, *self.global_args, *args]
        rc, out, err = self.module.run_command(
            argv,
            environ_update={"LANG": "C", "LC_ALL": "C", "BUILDAH_ISOLATION": self.isolation, **(env or {})},
        )
        if check and rc != 0:
            raise BuildahError(argv, rc, err or out)
        return rc, out, err

    # images -----------------------------------------------------------------
    def image_exists(self, ref: str) -> bool:
        rc, _out, _err = self.run("inspect", "--type", "image", "--format", "{{.FromImageID}}", ref, check=False)
        return rc == 0

    def image_labels(self, ref: str) -> dict[str, str]:
        _rc, out, _err = self.run("inspect", "--type", "image", ref)
        data = json.loads(out)
        return data.get("OCIv1", {}).get("config", {}).get("Labels") or {}

    def layer_images(self) -> list[dict[str, Any]]:
        """Images that carry our layer label, as ``{id, names, labels}``."""
        _rc, out, _err = self.run("images", "--json", "--filter", f"label={LABEL_PREFIX}layer")
        images = json.loads(out or "[]") or []
        result = []
        for image in images:
            ref = image.get("id")
            rc, out, err = self.run("inspect", "--type", "image", ref, check=False)
            if rc != 0:
                if "image not known" in err + out:
                    continue  # removed by someone else between the listing and now
                raise BuildahError([self.executable, "inspect", "--type", "image", ref], rc, err or out)
            labels = json.loads(out).get("OCIv1", {}).get("config", {}).get("Labels") or {}
            result.append({"id": ref, "names": image.get("names") or [], "labels": labels})
        return result

    def tag(self, ref: str, *names: str) -> None:
        self.run("tag", ref, *names)

    # working containers ---------------------------------------------------------
    def containers(self) -> list[dict[str, Any]]:
        _rc, out, _err = self.run("containers", "--json")
        return json.loads(out or "[]") or []

    def container_exists(self, name: str) -> bool:
        return any(c.get("containername") == name for c in self.containers())

    def from_image(self, image: str, name: str) -> str:
        """Create a working container; ``image`` is a local ref or ``scratch``."""
        _rc, out, _err = self.run("from", "--pull=never", "--quiet", "--name", name, image)
        return out.strip().splitlines()[-1] if out.strip() else name

    def mount(self, container: str) -> str:
        _rc, out, _err = self.run("mount", container)
        return out.strip()

    def umount(self, container: str) -> None:
        self.run("umount", container, check=False)

    def config_labels(self, container: str, labels: dict[str, str]) -> None:
        args: list[str] = []
        for name in sorted(labels):
            args += ["--label", f"{name}={labels[name]}"]
        if args:
            self.run("config", *args, container)

    def commit(self, container: str, ref: str, tmpdir: str | None = None) -> str:
        """Commit ``container`` as ``ref``; buildah's temporary files go to ``tmpdir`` (its TMPDIR) when given."""
        _rc, out, _err = self.run("commit", "--quiet", "--rm", container, ref,
                                  env={"TMPDIR": tmpdir} if tmpdir else None)
        return out.strip().splitlines()[-1] if out.strip() else ""

    def rm(self, container: str) -> None:
        self.run("rm", container, check=False)

    # registries (hpc.stateless.layer_registry) ----------------------------------------
    @staticmethod
    def _registry_args(tls_verify: bool, authfile: str | None) -> list[str]:
        args = [f"--tls-verify={'true' if tls_verify else 'false'}"]
        if authfile:
            args += ["--authfile", authfile]
        return args

    def image_id(self, ref: str) -> str:
        """ID of a local image (the digest of its config, the same in every registry)."""
        _rc, out, _err = self.run("inspect", "--type", "image", "--format", "{{.FromImageID}}", ref)
        return out.strip()

    def pull(self, remote: str, tls_verify: bool = True, authfile: str | None = None) -> str:
        """``buildah pull`` ``remote`` (``host/repo:tag``, no transport); returns the image ID."""
        _rc, out, _err = self.run("pull", "--quiet", *self._registry_args(tls_verify, authfile),
                                  f"docker://{remote}")
        return out.strip().splitlines()[-1] if out.strip() else ""

    def push(self, ref: str, remote: str, tls_verify: bool = True, authfile: str | None = None) -> None:
        """``buildah push`` local ``ref`` to ``remote`` (``host/repo:tag``)."""
        self.run("push", "--quiet", *self._registry_args(tls_verify, authfile), ref, f"docker://{remote}")
