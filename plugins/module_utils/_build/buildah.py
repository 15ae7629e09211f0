# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one place that knows how the buildah CLI is called.

Every stage (build, pack, verify, the buildah connection) calls buildah through :class:`Buildah`,
which runs it through the one process runner (:class:`~_process.ToolRunner`): an argv list,
``LANG=C``, stdin closed, and ``BUILDAH_ISOLATION`` set - the caller's value, else the
environment's, else ``chroot`` (crun cannot start on hosts with hybrid cgroups, chroot isolation can).

How our containers and images are named and labelled is the container contract, _contract/labels.py.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Mapping, Sequence

from ansible_collections.hpc.stateless.plugins.module_utils._process import ProcessError, Result, ToolRunner
from ansible_collections.hpc.stateless.plugins.module_utils._build import rootless
from ansible_collections.hpc.stateless.plugins.module_utils._contract.arch import oci_arch
from ansible_collections.hpc.stateless.plugins.module_utils._contract.labels import CONTAINER_PREFIX, LAYER_LABEL

DEFAULT_ISOLATION = "chroot"
INSTALL_HINT = "install it (Debian/Ubuntu: apt-get install buildah, EL: dnf install buildah)"
#: Below the host's cache root: the labels of each layer image ID (:meth:`Buildah.layer_images`).
LABELS_CACHE_NAME = "image-labels.json"
# buildah's words for "there is no such container/image" (a concurrent removal, a leftover already gone)
_GONE = re.compile(r"not known|no such|does not exist|not found", re.IGNORECASE)


class BuildahError(ProcessError):
    """A buildah command failed; ``str()`` carries the command, its exit code and stderr."""

    @property
    def gone(self) -> bool:
        """True when buildah failed because the container or image does not exist."""
        return bool(_GONE.search(self.stderr))


#: How often a listing that failed because a container or image went away while it was read is asked (_listing).
LISTING_ATTEMPTS = 5


def isolation_default() -> str:
    return os.environ.get("BUILDAH_ISOLATION") or DEFAULT_ISOLATION


def _last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1].strip() if lines else ""


def labels_cache_path() -> str:
    """The file that keeps the labels of each layer image ID (per user for a rootless build)."""
    return os.path.join(rootless.host_cache_path(rootless.HOST_CACHE_ROOT), LABELS_CACHE_NAME)


def read_labels_cache(path: str) -> dict[str, dict[str, str]]:
    """``{image id: labels}`` kept in ``path``; empty when it is missing or unreadable (the images are inspected)."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, dict)
            and all(isinstance(x, str) and isinstance(y, str) for x, y in v.items())}


def write_labels_cache(path: str, labels: Mapping[str, Mapping[str, str]]) -> None:
    """Replace ``path`` with ``labels`` (written beside it and renamed: a reader sees the old file or the new);
    a cache that cannot be written is no error, the next plan inspects again."""
    temp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        with open(temp, "w", encoding="utf-8") as handle:
            json.dump(labels, handle, sort_keys=True)
        os.replace(temp, path)
    except OSError:
        try:
            os.unlink(temp)
        except OSError:
            pass


class Buildah:
    """Client of the buildah binary; a missing binary raises :class:`~_process.ToolMissing` on first use."""

    def __init__(self, executable: str = "buildah", isolation: str | None = None,
                 storage_root: str | None = None, storage_runroot: str | None = None) -> None:
        self.isolation = isolation or isolation_default()
        global_args: list[str] = []
        if storage_root:
            global_args += ["--root", storage_root]
        if storage_runroot:
            global_args += ["--runroot", storage_runroot]
        self.runner = ToolRunner(executable, install_hint=INSTALL_HINT, global_args=global_args,
                                 env={"BUILDAH_ISOLATION": self.isolation})

    @property
    def executable(self) -> str:
        """Absolute path of buildah."""
        return self.runner.path

    @property
    def env(self) -> dict[str, str]:
        """What buildah's environment adds to ours (for callers that start it with Popen)."""
        return dict(self.runner.env)

    def argv(self, *args: str) -> list[str]:
        """The full command line of ``buildah <args>``, without running it."""
        return self.runner.argv(*args)

    def run(self, *args: str, check: bool = True, env: Mapping[str, str] | None = None,
            timeout: float | None = None, input: str | bytes | None = None, text: bool = True) -> Result:
        """``buildah <args>``; with ``check`` a non-zero exit raises :class:`BuildahError`.

        As an unprivileged user, the first call checks the subordinate ids first
        (:func:`~rootless.preflight`): :class:`~rootless.RootlessError` says what to add where.
        """
        rootless.preflight_once()
        result = self.runner(*args, check=False, env=env, timeout=timeout, input=input, text=text)
        if check and result.rc != 0:
            said = result.stderr or result.stdout
            raise BuildahError(result.argv, result.rc, said if isinstance(said, str) else said.decode("utf-8", "replace"))
        return result

    # images -----------------------------------------------------------------
    def inspect_image(self, ref: str) -> dict[str, Any]:
        """``buildah inspect`` of image ``ref`` as a dict; :class:`BuildahError` when it is not there."""
        return json.loads(self.run("inspect", "--type", "image", ref).stdout)

    def image_exists(self, ref: str) -> bool:
        return self.run("inspect", "--type", "image", "--format", "{{.FromImageID}}", ref, check=False).ok

    def image_labels(self, ref: str) -> dict[str, str]:
        return self.inspect_image(ref).get("OCIv1", {}).get("config", {}).get("Labels") or {}

    def image_id(self, ref: str) -> str:
        """ID of a local image (the digest of its config, the same in every registry)."""
        return self.run("inspect", "--type", "image", "--format", "{{.FromImageID}}", ref).stdout.strip()

    def layer_images(self) -> list[dict[str, Any]]:
        """Images that carry our layer label, as ``{id, names, labels, created}`` (created: seconds since the epoch).

        An image's ID is the digest of its configuration, which holds its labels: the labels of an ID never
        change, so they are read once (one ``buildah inspect`` each) and kept in :func:`labels_cache_path`.
        Every plan lists the images; one inspect per image would cost a no-op plan seconds on a host holding
        dozens of layer images.
        """
        images = self._listing("images", "--json", "--filter", f"label={LAYER_LABEL}")
        known = read_labels_cache(labels_cache_path())
        result, kept = [], {}
        for image in images or []:
            image_id = image.get("id")
            labels = known.get(image_id)
            if labels is None:
                try:
                    labels = self.image_labels(image_id)
                except BuildahError as exc:
                    if exc.gone:
                        continue  # removed by someone else between the listing and now
                    raise
            kept[image_id] = labels
            result.append({"id": image_id, "names": image.get("names") or [], "labels": labels,
                           "created": image.get("created") or 0})
        if kept != known:
            write_labels_cache(labels_cache_path(), kept)  # the images listed now: removed ones leave the cache
        return result

    def tag(self, ref: str, *names: str) -> None:
        self.run("tag", ref, *names)

    def rmi(self, ref: str) -> bool:
        """Remove image name ``ref``; False when buildah could not."""
        return self.run("rmi", ref, check=False).ok

    # working containers ---------------------------------------------------------
    def containers(self) -> list[dict[str, Any]]:
        """Every working container of this storage (``buildah containers --json``)."""
        return self._listing("containers", "--json")

    def _listing(self, *args: str) -> list[dict[str, Any]]:
        """A ``buildah containers|images --json`` listing, whole and consistent.

        buildah lists the containers (images), then reads each one's state: when another build on the host
        removes one in between, the whole listing fails with "container (image) not known" (seen with two
        builds at once, for both listings). The listing is asked again, a few times.
        """
        for _attempt in range(LISTING_ATTEMPTS - 1):
            try:
                return json.loads(self.run(*args).stdout or "[]") or []
            except BuildahError as exc:
                if not exc.gone:
                    raise
        return json.loads(self.run(*args).stdout or "[]") or []

    def container_names(self, stem: str = CONTAINER_PREFIX) -> list[str]:
        """Names of working containers that start with ``stem``."""
        return [c["containername"] for c in self.containers() if c.get("containername", "").startswith(stem)]

    def container_exists(self, name: str) -> bool:
        return name in self.container_names(name)

    def from_image(self, image: str, name: str, userns: tuple[str, str] | None = None) -> str:
        """Create a working container; ``image`` is a local ref or ``scratch``. ``userns``: its ``(uid map, gid map)``
        (``container:host:size``), which every ``buildah run`` in it then uses; None: the host's ids."""
        maps = ["--userns-uid-map", userns[0], "--userns-gid-map", userns[1]] if userns else []
        return _last_line(self.run("from", "--pull=never", "--quiet", *maps, "--name", name, image).stdout) or name

    def id_mapping(self, container: str) -> dict[str, Any]:
        """buildah's ``IDMappingOptions`` of ``container`` (``HostUIDMapping`` true: the host's ids)."""
        data = json.loads(self.run("inspect", "--type", "container", container).stdout or "{}")
        return data.get("IDMappingOptions") or {}

    def mount(self, container: str) -> str:
        """Mount ``container``; an unprivileged user must be in the namespace of ``buildah unshare``,
        where the mount point can be seen (a :class:`~rootless.RootlessError` says so)."""
        if os.geteuid() != 0:
            raise rootless.RootlessError(
                f"buildah mount {container}: an unprivileged user can mount a container only inside the user "
                f"namespace of `buildah unshare`, and every later step must see that mount: run the whole "
                f"playbook in it ({rootless.unshare_hint(['ansible-playbook', 'site.yml'])}; make image does), "
                f"or enable the callback hpc.stateless.buildah_isolation in ansible.cfg, which does it")
        return self.run("mount", container).stdout.strip()

    def mounts(self) -> dict[str, str]:
        """``{container: mount point}`` of every mounted working container (empty when buildah cannot tell)."""
        result = self.run("mount", check=False)
        pairs = (line.split() for line in result.stdout.splitlines()) if result.ok else ()
        return {p[0]: p[1] for p in pairs if len(p) == 2}

    def umount(self, container: str) -> None:
        self.run("umount", container, check=False)

    def rm(self, container: str) -> Result:
        return self.run("rm", container, check=False)

    def remove(self, container: str) -> None:
        """Unmount and remove ``container``; one that is gone already is no error."""
        self.umount(container)
        self.rm(container)

    def config_labels(self, container: str, labels: Mapping[str, str]) -> None:
        args: list[str] = []
        for name in sorted(labels):
            args += ["--label", f"{name}={labels[name]}"]
        if args:
            self.run("config", *args, container)

    def config_arch(self, container: str, arch: str) -> None:
        """Set the OCI architecture (and variant) of the image ``container`` commits to Debian architecture ``arch``."""
        architecture, variant = oci_arch(arch)
        self.run("config", "--arch", architecture, *(["--variant", variant] if variant else []), container)

    def commit(self, container: str, ref: str, tmpdir: str | None = None) -> str:
        """Commit ``container`` as ``ref``; buildah's temporary files go to ``tmpdir`` (its TMPDIR) when given."""
        return _last_line(self.run("commit", "--quiet", "--rm", container, ref,
                                   env={"TMPDIR": tmpdir} if tmpdir else None).stdout)

    def run_in(self, container: str, command: Sequence[str], volumes: Mapping[str, str] | None = None,
               environment: Mapping[str, str] | None = None) -> Result:
        """``buildah run`` ``command`` in ``container`` with host ``{path: path inside}`` volumes."""
        args: list[str] = []
        for host, inside in (volumes or {}).items():
            args += ["--volume", f"{host}:{inside}"]
        for name, value in (environment or {}).items():
            args += ["--env", f"{name}={value}"]
        return self.run("run", *args, container, "--", *command)

    # registries (hpc.stateless.layer_registry) ----------------------------------------
    @staticmethod
    def _registry_args(tls_verify: bool, authfile: str | None) -> list[str]:
        args = [f"--tls-verify={'true' if tls_verify else 'false'}"]
        if authfile:
            args += ["--authfile", authfile]
        return args

    def pull(self, remote: str, tls_verify: bool = True, authfile: str | None = None) -> str:
        """``buildah pull`` ``remote`` (``host/repo:tag``, no transport); returns the image ID."""
        return _last_line(self.run("pull", "--quiet", *self._registry_args(tls_verify, authfile),
                                   f"docker://{remote}").stdout)

    def push(self, ref: str, remote: str, tls_verify: bool = True, authfile: str | None = None) -> None:
        """``buildah push`` local ``ref`` to ``remote`` (``host/repo:tag``)."""
        self.run("push", "--quiet", *self._registry_args(tls_verify, authfile), ref, f"docker://{remote}")

    def push_manifest_list(self, name: str, refs: Sequence[str], remote: str, tls_verify: bool = True,
                           authfile: str | None = None) -> None:
        """Push local images ``refs`` (one per architecture, each with its config's architecture) to ``remote`` as
        ONE manifest list, through the local list ``name``, which is removed again (made afresh each time)."""
        if self.run("manifest", "exists", name, check=False).rc == 0:
            self.run("manifest", "rm", name)
        self.run("manifest", "create", name)
        try:
            for ref in refs:
                self.run("manifest", "add", name, f"containers-storage:{ref}")
            self.run("manifest", "push", "--all", "--quiet", *self._registry_args(tls_verify, authfile), name,
                     f"docker://{remote}")
        finally:
            self.run("manifest", "rm", name, check=False)
