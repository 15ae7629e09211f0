# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The package sources of a layer: where its packages come from, in one place.

Pure functions, no I/O. A layer's sources (:func:`layer_sources`) are its root layer's bootstrap sources
(:func:`bootstrap_sources`) followed by the extra sources (``hpc_stateless_layers.<layer>.sources``) of
every ancestor of the layer and of the layer itself, in that order. The bootstrap (_build/bootstrap.py)
installs from the root's sources and writes them into the root (:func:`render_sources_list`); the build
writes a layer's own extra sources into its working container before its roles run
(:func:`render_deb822`, :func:`image_keyring_path`; playbooks/tasks/layer_sources.yml); the plan and the
release read them to compare what an image installed with what its archive offers.

Debian and Ubuntu: ``mirror`` serves ``<release>`` and ``<release>-updates`` (``updates_mirror`` moves the
latter), ``security_mirror`` serves ``<release>-security``; ``updates: false`` or ``security: false`` switches
a suite off. EL and SUSE: ``mirror`` is the one repository the bootstrap enables, ``updates_mirror`` adds the
distribution's separate updates repository where it has one (Fedora, openSUSE Leap); their ``suite`` is
empty. Why two files in the image: the root's sources stay in ``/etc/apt/sources.list``, one line per
suite, the file both bootstrap tools write and an auditor reads first; a layer's extra sources go to
``/etc/apt/sources.list.d/hpc-stateless-<layer>.sources`` (deb822: each source names its own
``Signed-By`` keyring, and a layer's file is its own).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from ansible_collections.hpc.stateless.plugins.module_utils._contract.inventory import LAYERS_VAR, type_name

#: The kinds of source: a distribution's release, updates and security suites, and a site's extra ones.
KINDS: tuple[str, ...] = ("release", "updates", "security", "extra")
#: The keys of an entry of a layer's ``sources`` list.
SOURCE_KEYS: tuple[str, ...] = ("uri", "suite", "components", "keyring")

#: distro -> (default mirror, default security mirror) of the Debian-style distributions.
DEBIAN_STYLE_MIRRORS: dict[str, tuple[str, str]] = {
    "debian": ("http://deb.debian.org/debian", "http://deb.debian.org/debian-security"),
    "ubuntu": ("http://archive.ubuntu.com/ubuntu", "http://security.ubuntu.com/ubuntu"),
}
#: Debian releases whose security suite is ``<release>/updates`` (from bullseye on it is ``<release>-security``).
LEGACY_SECURITY_RELEASES = frozenset({"wheezy", "jessie", "stretch", "buster"})
#: Releases without updates or security suites: the development releases.
ROLLING_RELEASES = frozenset({"sid", "unstable", "experimental", "rc-buggy"})

#: Where the root's sources are written in the image (one-line format).
SOURCES_LIST = "/etc/apt/sources.list"
#: Where a layer's extra sources are written in the image: ``SOURCES_DIR/hpc-stateless-<layer>.sources``.
SOURCES_DIR = "/etc/apt/sources.list.d"
#: Where a source's keyring is copied in the image.
KEYRINGS_DIR = "/etc/apt/keyrings"

_URI_PATTERN = re.compile(r"(https?|file)://\S+")
_WORD_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/~+-]*")


class SourceSpecError(ValueError):
    """An invalid source setting; ``path`` is the dotted inventory key at fault (as LayerSpecError's)."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem

    def __reduce__(self):  # keep the two-argument constructor picklable
        return (type(self), (self.path, self.problem))


@dataclass(frozen=True)
class Source:
    """One package source: a repository URI and suite with its components and keyring, declared by ``layer``.

    ``signed_by`` is a keyring file on the controller (None: the distribution's own keyring); for an rpm
    repository ``suite`` is "" and ``components`` empty.
    """

    kind: str
    uri: str
    suite: str
    components: tuple[str, ...]
    signed_by: str | None
    layer: str

    @property
    def security(self) -> bool:
        """Whether the source is a distribution's security suite."""
        return self.kind == "security"

    def __str__(self) -> str:
        where = f"{self.uri} {self.suite}".strip()
        return f"{self.kind} source {where}" + (f" of layer {self.layer}" if self.layer else "")


def is_location(value: str) -> bool:
    """Whether ``value`` is an http(s):// or file:// URL or an absolute directory (or a template, resolved later)."""
    return value.startswith("/") or bool(_URI_PATTERN.fullmatch(value)) or "{{" in value


def file_uri(location: str) -> str:
    """Turn a local directory into a file:// URI; URIs pass through."""
    return f"file://{location}" if location.startswith("/") else location


def security_suite(distro: str, release: str) -> str:
    """The name of the security suite of ``release``."""
    if distro == "debian" and release in LEGACY_SECURITY_RELEASES:
        return f"{release}/updates"
    return f"{release}-security"


def suite_default(release: str) -> bool:
    """Whether the updates and security suites are on unless the layer says otherwise."""
    return release not in ROLLING_RELEASES


def bootstrap_sources(bootstrap: Mapping, layer: str = "") -> tuple[Source, ...]:
    """The sources a root layer's ``bootstrap`` mapping (already validated by the layer DAG) installs from.

    ValueError (a :class:`SourceSpecError`) when an rpm distribution has no ``mirror``.
    """
    distro, release = bootstrap["distro"], str(bootstrap["release"])
    # Without signature checks (gpg_check: false) no keyring is named.
    keyring = (bootstrap.get("keyring") or None) if bootstrap.get("gpg_check") is not False else None
    path = f"{LAYERS_VAR}.{layer}.bootstrap" if layer else "bootstrap"
    if distro in DEBIAN_STYLE_MIRRORS:
        default_mirror, default_security = DEBIAN_STYLE_MIRRORS[distro]
        mirror = file_uri(bootstrap.get("mirror") or default_mirror)
        components = tuple(bootstrap.get("components") or ("main",))
        sources = [Source("release", mirror, release, components, keyring, layer)]
        if _switch(bootstrap, "updates", release):
            updates = file_uri(bootstrap.get("updates_mirror") or mirror)
            sources.append(Source("updates", updates, f"{release}-updates", components, keyring, layer))
        if _switch(bootstrap, "security", release):
            security = file_uri(bootstrap.get("security_mirror") or default_security)
            sources.append(Source("security", security, security_suite(distro, release), components, keyring, layer))
        return tuple(sources)
    if not bootstrap.get("mirror"):
        raise SourceSpecError(f"{path}.mirror", f"is required for distro {distro!r}: give a repository URL or a "
                              "local directory holding repodata (e.g. https://dl.rockylinux.org/pub/rocky/9/BaseOS/x86_64/os/)")
    sources = [Source("release", file_uri(bootstrap["mirror"]), "", (), keyring, layer)]
    if bootstrap.get("updates_mirror") and bootstrap.get("updates") is not False:
        sources.append(Source("updates", file_uri(bootstrap["updates_mirror"]), "", (), keyring, layer))
    return tuple(sources)


def _switch(bootstrap: Mapping, key: str, release: str) -> bool:
    value = bootstrap.get(key)
    return suite_default(release) if value is None else bool(value)


def check_bootstrap_sources(path: str, bootstrap: Mapping) -> None:
    """Check the source keys of a bootstrap mapping whose types the layer DAG checked; SourceSpecError names the key."""
    distro = bootstrap.get("distro")
    for key in ("mirror", "updates_mirror", "security_mirror"):
        value = bootstrap.get(key)
        if value and not is_location(value):
            raise SourceSpecError(f"{path}.{key}", f"{value!r} is neither an http(s):// or file:// URL nor an "
                                  "absolute directory")
    if distro not in DEBIAN_STYLE_MIRRORS:
        for key in ("security_mirror", "security"):
            if bootstrap.get(key) is not None:
                raise SourceSpecError(f"{path}.{key}", f"{distro} has no separate security repository (its updates "
                                      "carry the security fixes): remove the key, or set updates_mirror")
    for key in ("updates", "security"):
        if bootstrap.get(key) is False and bootstrap.get(f"{key}_mirror"):
            raise SourceSpecError(f"{path}.{key}_mirror", f"is set while {key}: false switches that suite off: "
                                  "remove one of them")
    for index, component in enumerate(bootstrap.get("components") or ()):
        if not _WORD_PATTERN.fullmatch(component):
            raise SourceSpecError(f"{path}.components[{index}]", f"{component!r} is not a component name")


def normalise_extra_sources(path: str, raw: object) -> list[dict]:
    """Validate a layer's ``sources`` list; return it with every key set (components default ["main"]).

    Each entry: ``uri`` (http(s)://, file:// or an absolute directory), ``suite`` (a flat repository's ends
    with "/" and has no components), ``components``, ``keyring`` (a file on the controller, or absent).
    """
    if raw is None:
        return []
    if not isinstance(raw, (list, tuple)):
        raise SourceSpecError(path, f"expected a list of sources, got {type_name(raw)}")
    result: list[dict] = []
    keyring_names: dict[str, str] = {}
    for index, entry in enumerate(raw):
        where = f"{path}[{index}]"
        if not isinstance(entry, Mapping):
            raise SourceSpecError(where, f"expected a mapping with {', '.join(SOURCE_KEYS)}, got {type_name(entry)}")
        unknown = sorted(str(key) for key in entry if key not in SOURCE_KEYS)
        if unknown:
            raise SourceSpecError(f"{where}.{unknown[0]}", f"unknown key (allowed: {', '.join(SOURCE_KEYS)})")
        for key in ("uri", "suite"):
            if not isinstance(entry.get(key), str) or not entry[key]:
                raise SourceSpecError(f"{where}.{key}", f"is required (a string), got {type_name(entry.get(key))}")
        uri, suite = entry["uri"], entry["suite"]
        if not is_location(uri):
            raise SourceSpecError(f"{where}.uri", f"{uri!r} is neither an http(s):// or file:// URL nor an absolute "
                                  "directory")
        if not _WORD_PATTERN.fullmatch(suite) and suite != "./":
            raise SourceSpecError(f"{where}.suite", f"{suite!r} is not a suite name (e.g. bookworm, or ./ for a flat "
                                  "repository)")
        components = entry.get("components")
        if components is None:
            components = [] if suite.endswith("/") else ["main"]
        if not isinstance(components, (list, tuple)) or not all(isinstance(c, str) for c in components):
            raise SourceSpecError(f"{where}.components", f"expected a list of strings, got {type_name(components)}")
        for number, component in enumerate(components):
            if not _WORD_PATTERN.fullmatch(component):
                raise SourceSpecError(f"{where}.components[{number}]", f"{component!r} is not a component name")
        if suite.endswith("/") and components:
            raise SourceSpecError(f"{where}.components", f"a flat repository (suite {suite!r}) has no components: "
                                  "remove them")
        if not suite.endswith("/") and not components:
            raise SourceSpecError(f"{where}.components", f"suite {suite!r} needs at least one component (e.g. main)")
        keyring = entry.get("keyring")
        if keyring is not None:
            if not isinstance(keyring, str) or not keyring:
                raise SourceSpecError(f"{where}.keyring", f"expected a file name, got {type_name(keyring)}")
            name = keyring_file_name(keyring)
            if keyring_names.setdefault(name, keyring) != keyring:
                raise SourceSpecError(f"{where}.keyring", f"{keyring!r} and {keyring_names[name]!r} would both become "
                                      f"{name} in the image: rename one")
        result.append({"uri": file_uri(uri), "suite": suite, "components": list(components), "keyring": keyring})
    return result


def extra_sources(layer: str, entries: object) -> tuple[Source, ...]:
    """The Source of each entry of ``layer``'s ``sources`` list (validated here too)."""
    return tuple(Source("extra", entry["uri"], entry["suite"], tuple(entry["components"]), entry["keyring"], layer)
                 for entry in normalise_extra_sources(f"{LAYERS_VAR}.{layer}.sources", entries))


def layer_chain(layer: str, layers: Mapping) -> list[str]:
    """``layer``'s ancestors from its root layer down, then ``layer``; SourceSpecError on an unknown layer or a loop."""
    chain: list[str] = []
    name: str | None = layer
    while name is not None:
        if name in chain:
            raise SourceSpecError(f"{LAYERS_VAR}.{name}.parent", f"parent loop: {' -> '.join([*chain, name])}")
        spec = layers.get(name)
        if not isinstance(spec, Mapping):
            where = f"{LAYERS_VAR}.{chain[-1]}.parent" if chain else LAYERS_VAR
            raise SourceSpecError(where, f"no layer {name!r} (known: {', '.join(sorted(map(str, layers)))})")
        chain.append(name)
        name = spec.get("parent")
    return list(reversed(chain))


def layer_sources(layer: str, layers: Mapping) -> tuple[Source, ...]:
    """Every source of ``layer``: its root's bootstrap sources, then the extra sources of each layer from the root down.

    ``layers`` is ``hpc_stateless_layers`` (as written, or as the layer DAG normalised it).
    """
    chain = layer_chain(layer, layers)
    root = chain[0]
    bootstrap = layers[root].get("bootstrap")
    if not isinstance(bootstrap, Mapping):
        raise SourceSpecError(f"{LAYERS_VAR}.{root}", "the root layer has no bootstrap mapping")
    sources = list(bootstrap_sources(bootstrap, root))
    for name in chain:
        sources.extend(extra_sources(name, layers[name].get("sources")))
    return tuple(sources)


# -- the files in the image ------------------------------------------------------------------------
def keyring_file_name(keyring: str) -> str:
    """The file name of a keyring in the image: an armored key (.asc) keeps its extension, any other is .gpg."""
    stem, extension = os.path.splitext(os.path.basename(keyring))
    return stem + (".asc" if extension == ".asc" else ".gpg")


def image_keyring_path(source: Source) -> str | None:
    """Where ``source``'s keyring is in the image (None without one): /etc/apt/keyrings/<layer>-<name>."""
    if not source.signed_by:
        return None
    prefix = f"{source.layer}-" if source.layer else ""
    return f"{KEYRINGS_DIR}/{prefix}{keyring_file_name(source.signed_by)}"


def sources_file(layer: str) -> str:
    """The image's file of ``layer``'s extra sources."""
    return f"{SOURCES_DIR}/hpc-stateless-{layer}.sources"


def render_sources_list(sources: tuple[Source, ...] | list[Source]) -> str:
    """The one-line format ``/etc/apt/sources.list`` of ``sources`` (a root's bootstrap sources)."""
    lines = ["# Written by hpc.stateless from the root layer's bootstrap (docs/bootstrap.md)."]
    for source in sources:
        keyring = image_keyring_path(source)
        options = f" [signed-by={keyring}]" if keyring else ""
        lines.append(" ".join(filter(None, [f"deb{options}", source.uri, source.suite, *source.components])))
    return "\n".join(lines) + "\n"


def render_deb822(sources: tuple[Source, ...] | list[Source]) -> str:
    """The deb822 ``.sources`` file of ``sources`` (a layer's extra sources), one stanza each."""
    stanzas = []
    for source in sources:
        fields = ["Types: deb", f"URIs: {source.uri}", f"Suites: {source.suite}"]
        if source.components:
            fields.append(f"Components: {' '.join(source.components)}")
        keyring = image_keyring_path(source)
        if keyring:
            fields.append(f"Signed-By: {keyring}")
        stanzas.append("\n".join(fields))
    return "# Written by hpc.stateless from hpc_stateless_layers.<layer>.sources (docs/bootstrap.md).\n\n" + \
        "\n\n".join(stanzas) + "\n"
