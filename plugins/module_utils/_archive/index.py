# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the configured apt sources offer: their signed Release files and Packages indexes, read on the controller.

:meth:`ArchiveView.load` reads every source once: its ``InRelease`` (or ``Release`` + ``Release.gpg``),
checked with ``gpgv`` against the source's keyring (``signed_by``) or the distribution's archive keyring,
then the Packages index of each component for the architecture, checked against the Release file's SHA256
list. Everything lands under ``cache_dir``:

* ``releases/<key>.json`` - one source's verified Release file: its hash, date, Valid-Until, validators
  (ETag, Last-Modified) and index hashes. Within ``max_age`` seconds of its last check a source costs no
  network at all; after that, one conditional GET (a 304, or on a mirror that sends no validators the same
  bytes again: their hash matches, nothing is verified or parsed twice).
* ``packages/<sha256>.json`` - one Packages index, parsed to ``{name: [versions, newest first]}`` and named
  by the hash the Release file gives for it, so an unchanged index is never fetched or parsed again.

Writes are atomic and one :class:`~..._fs.Flock` (``cache_dir/lock``) serialises concurrent runs.
:func:`pending_updates` compares installed packages with the view under a freshness policy.
"""

from __future__ import annotations

import concurrent.futures
import email.utils
import gzip
import hashlib
import json
import lzma
import os
import tempfile
import time
import urllib.error
import urllib.parse
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, NamedTuple, Sequence

from ansible.module_utils.urls import ConnectionError as UrlsConnectionError, open_url

from ansible_collections.hpc.stateless.plugins.module_utils import _paths, _process
from ansible_collections.hpc.stateless.plugins.module_utils._archive import debversion
from ansible_collections.hpc.stateless.plugins.module_utils._contract.signature import parse_status
from ansible_collections.hpc.stateless.plugins.module_utils._fs import Flock, LockBusy, wait_message
from ansible_collections.hpc.stateless.plugins.module_utils._paths import write_atomic
from ansible_collections.hpc.stateless.plugins.module_utils._time import iso_utc

#: Freshness policies: rebuild on any update, on security updates only, or never (the lag is still reported).
POLICIES = ("any", "security", "never")
#: Seconds within which a source checked before is taken as it was (no network).
DEFAULT_MAX_AGE = 300.0
#: How far a Release file's Date may lie ahead of this host's clock (seconds): apt's Acquire::Max-FutureTime
#: default. Beyond it the file is "not valid yet", as apt says, and refused.
MAX_FUTURE = 10.0
#: Seconds a single request may take.
DEFAULT_TIMEOUT = 30.0
#: Sources read at the same time.
FETCH_THREADS = 4
#: Seconds a run waits for another run reading the same cache.
LOCK_TIMEOUT = 600.0
#: The keyrings a source without ``signed_by`` is checked against (those present on the controller).
DISTRO_KEYRINGS = ("/usr/share/keyrings/debian-archive-keyring.gpg",
                   "/usr/share/keyrings/ubuntu-archive-keyring.gpg")
#: Compressed forms of a Packages index, preferred first.
_COMPRESSIONS = ((".xz", lzma.decompress), (".gz", gzip.decompress), ("", bytes))
_CACHE_FORMAT = 2
_GPGV_HINT = "install gpgv (Debian/Ubuntu: apt-get install gpgv; EL: dnf install gnupg2)"


class ArchiveError(ValueError):
    """A source cannot be read or trusted; the message names the layer, the source's URI and suite, and what to do."""

    def __init__(self, problem: str, source=None, hint: str = "") -> None:
        where = ""
        if source is not None:
            layer = getattr(source, "layer", "") or ""
            where = f"{layer + ': ' if layer else ''}apt source {source.uri} {source.suite}: "
        self.problem = problem
        self.source = source
        self.hint = hint
        super().__init__(f"{where}{problem}{' - ' + hint if hint else ''}")


class Response(NamedTuple):
    """What one request returned: status 200 (body), 304 (not modified) or 404 (not there)."""

    status: int
    body: bytes = b""
    etag: str = ""
    last_modified: str = ""


class FetchFailed(Exception):
    """The request got no usable answer (unreachable host, timeout, an HTTP error other than 404, too much data).

    ``transient`` is true for a fault that may pass (name resolution, a refused or reset connection, a timeout,
    HTTP 408/429/5xx): :func:`fetch_with_retries` tries again."""

    def __init__(self, message: str, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


class TooLarge(FetchFailed):
    """The answer is larger than the signed Release file says (or than any Release file may be)."""


Fetch = Callable[..., Response]

#: The most a Release/InRelease file (or its detached signature) may weigh, as apt's Acquire::MaxReleaseFileSize.
MAX_RELEASE_BYTES = 10_000_000
#: Seconds a whole archive view may spend on the network while it holds the cache's lock (below LOCK_TIMEOUT).
DEFAULT_DEADLINE = 300.0
#: Seconds to wait before each new try of a request that got no answer, doubling as apt's
#: Acquire::Retries::Delay does (apt caps one delay at 30 s): about a minute in all. The build hosts' resolver
#: outages mostly last about 10 s, some over 15 s.
RETRY_DELAYS = (1.0, 2.0, 4.0, 8.0, 15.0, 30.0)
#: How often apt (mmdebstrap's, a debootstrap root's, a layer's roles' while it builds) tries a download that got
#: no answer again: as many tries as :data:`RETRY_DELAYS`, with apt's own doubling delay (1, 2, 4, 8, 16, 30 s).
APT_RETRY_COUNT = len(RETRY_DELAYS)
_CHUNK = 1 << 16
_TRANSIENT_HTTP = (408, 429, 500, 502, 503, 504)


def _read_capped(reply, url: str, max_bytes: int | None, deadline: float | None) -> bytes:
    """The body of ``reply``, refused when it exceeds ``max_bytes`` or is still coming at ``deadline`` (monotonic)."""
    chunks: list[bytes] = []
    total = 0
    # read1: what has arrived (one receive at most), so a mirror that drips bytes still meets the deadline.
    read = getattr(reply, "read1", reply.read)
    while True:
        if deadline is not None and time.monotonic() > deadline:
            raise FetchFailed(f"{url} was still downloading when the time allowed for the archive check ran out "
                              f"({total} bytes read)")
        chunk = read(_CHUNK)
        if not chunk:
            return b"".join(chunks)
        total += len(chunk)
        if max_bytes is not None and total > max_bytes:
            raise TooLarge(f"{url} is larger than the {max_bytes} bytes it may have (its signed Release file's size, "
                           "or apt's limit for a Release file)")
        chunks.append(chunk)


def fetch_url(url: str, *, headers: Mapping[str, str] | None = None, timeout: float = DEFAULT_TIMEOUT,
              max_bytes: int | None = None, deadline: float | None = None) -> Response:
    """GET ``url`` (http, https or file) once; a 404/410 or a missing file is ``Response(404)``, not an error.

    ``max_bytes`` caps the body, ``deadline`` (a ``time.monotonic()`` value) ends a download still running then.
    Raises :class:`FetchFailed` with the reason when there is no usable answer.
    """
    parsed = urllib.parse.urlsplit(url)
    if deadline is not None:
        timeout = max(0.1, min(timeout, deadline - time.monotonic()))
    if parsed.scheme == "file":
        path = urllib.parse.unquote(parsed.path)
        try:
            with open(path, "rb") as handle:
                return Response(200, _read_capped(handle, url, max_bytes, deadline))
        except FileNotFoundError:
            return Response(404)
        except OSError as exc:
            raise FetchFailed(f"cannot read {path}: {exc.strerror or exc}") from None
    if parsed.scheme not in ("http", "https"):
        raise FetchFailed(f"unsupported URI scheme {parsed.scheme!r} (use http://, https:// or file://)")
    host = parsed.netloc or url
    try:
        # Ansible's own HTTP client: its proxy, CA and netrc handling, as every module of the collection.
        with open_url(url, headers=dict(headers or {}), http_agent="hpc.stateless archive check", timeout=timeout,
                      decompress=False) as reply:
            return Response(reply.status, _read_capped(reply, url, max_bytes, deadline), reply.headers.get("ETag", ""),
                            reply.headers.get("Last-Modified", ""))
    except urllib.error.HTTPError as exc:
        if exc.code == 304:
            return Response(304)
        if exc.code in (404, 410):
            return Response(404)
        raise FetchFailed(f"HTTP {exc.code} {exc.reason} for {url}", exc.code in _TRANSIENT_HTTP) from None
    except urllib.error.URLError as exc:
        raise FetchFailed(f"cannot reach {host}: {exc.reason}", True) from None
    except UrlsConnectionError as exc:
        raise FetchFailed(f"cannot reach {host}: {exc}", True) from None
    except (TimeoutError, OSError) as exc:
        raise FetchFailed(f"no answer from {host} within {timeout:g} s ({exc})", True) from None


def fetch_with_retries(fetch: Fetch, url: str, *, delays: Sequence[float] = RETRY_DELAYS,
                       deadline: float | None = None, sleep: Callable[[float], None] = time.sleep,
                       **kwargs) -> Response:
    """``fetch(url, **kwargs)``, tried again after each of ``delays`` while it fails with a transient fault (and
    the ``deadline``, monotonic, allows); the last failure names what was tried."""
    started = time.monotonic()
    for attempt, delay in enumerate((*delays, None), start=1):
        try:
            if deadline is not None:
                kwargs["deadline"] = deadline
            return fetch(url, **kwargs)
        except FetchFailed as exc:
            late = deadline is not None and delay is not None and time.monotonic() + delay > deadline
            if not exc.transient or delay is None or late:
                if attempt == 1:
                    raise
                raise FetchFailed(f"{exc} ({attempt} tries over {time.monotonic() - started:.0f} s"
                                  f"{', out of time' if late else ''})", exc.transient) from None
            sleep(delay)
    raise AssertionError("unreachable")  # the loop returns or raises


def default_cache_dir() -> str:
    """Where the archive cache lives: /var/cache/hpc.stateless/archive as root, else under $XDG_CACHE_HOME or ~/.cache.

    Inside a user namespace (``buildah unshare`` of a rootless build) uid 0 is the user, who cannot write root's
    cache: the user's own one then."""
    return _paths.controller_cache_dir("archive")


# -- Release files ---------------------------------------------------------------------------------

def parse_release(text: str) -> dict[str, object]:
    """The fields of a Release file (one deb822 stanza); ``SHA256`` becomes ``{path: (sha256, size)}``."""
    fields: dict[str, object] = {}
    current = ""
    lines: dict[str, list[str]] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        if line[0] in " \t":
            if current:
                lines.setdefault(current, []).append(line.strip())
            continue
        key, _sep, value = line.partition(":")
        current = key.strip()
        fields[current] = value.strip()
    files: dict[str, tuple[str, int]] = {}
    for entry in lines.get("SHA256", []):
        parts = entry.split()
        if len(parts) == 3 and parts[1].isdigit():
            files[parts[2]] = (parts[0].lower(), int(parts[1]))
    fields["SHA256"] = files
    return fields


def _release_time(value: object) -> float | None:
    if not value:
        return None
    try:
        return email.utils.parsedate_to_datetime(str(value)).timestamp()
    except (TypeError, ValueError):
        return None


def _held_date(record: dict | None) -> float | None:
    if not record:
        return None
    held = record.get("date_epoch")
    return float(held) if isinstance(held, (int, float)) else _release_time(record.get("date"))


def release_problem(suite: str, fields: Mapping[str, object], held_date: float | None = None,
                    require_date: bool = True, now: float | None = None) -> str | None:
    """Why a verified Release file (``fields``, :func:`parse_release`) cannot stand for ``suite``, or None.

    As apt judges a Release file: its ``Suite`` or ``Codename`` names the suite asked for (for an old-style
    ``<codename>/updates`` the part before the last ``/``; a flat repository, ``<dir>/``, has no name to
    match), and its ``Date`` is not older than that of the file already held (``held_date``): a mirror or a
    man in the middle cannot pass the signed ``bookworm`` file off as ``bookworm-security``, nor replay an
    old signed file to hide the updates published since. (apt only warns about the first; here it is refused.)
    With ``now``, a ``Date`` more than :data:`MAX_FUTURE` seconds after it is refused as apt refuses it (``not
    valid yet``): signed ahead of time, it would outrank every file published until then.
    """
    if not suite.endswith("/"):
        names = {str(fields.get(k, "")).strip() for k in ("Suite", "Codename")} - {""}
        if suite not in names and (suite.rpartition("/")[0] or None) not in names:
            return (f"its Release file is for suite {str(fields.get('Suite', '')) or '(none)'} (codename "
                    f"{str(fields.get('Codename', '')) or '(none)'}), not {suite}: a mislabelled Release file")
    date = _release_time(fields.get("Date"))
    if date is None and require_date:
        return f"its Release file has no valid Date ({str(fields.get('Date', '')) or 'none'}): it cannot be ordered"
    if date is not None and now is not None and date > now + MAX_FUTURE:
        return (f"its Release file is dated {iso_utc(date)}, {date - now:.0f} s ahead of this host's clock "
                f"({iso_utc(now)}; at most {MAX_FUTURE:.0f} s of clock skew): not valid yet")
    if date is not None and held_date is not None and date < held_date:
        return (f"its Release file is dated {iso_utc(date)}, older than the one already checked ({iso_utc(held_date)}): "
                "a replayed or rolled-back Release file")
    return None


def _dearmored(keyring: str, workdir: str) -> str:
    """``keyring`` as gpgv reads it: an ASCII-armoured key (``.asc``) is converted first."""
    with open(keyring, "rb") as handle:
        armoured = handle.read(64).lstrip().startswith(b"-----BEGIN PGP")
    if not armoured:
        return keyring
    target = os.path.join(workdir, f"key{len(os.listdir(workdir))}.gpg")
    _process.run([_process.which("gpg", _GPGV_HINT), "--batch", "--homedir", workdir, "--dearmor",
                  "--output", target, keyring])
    return target


def signature_problem(status: str) -> str | None:
    """Why gpgv's ``--status-fd`` output does not show a trustworthy signature of a Release file, or None.

    Trustworthy, as apt's gpgv method judges: at least one good signature (``GOODSIG`` with its ``VALIDSIG``;
    gpgv reports a signature by an expired or revoked key, or an expired signature, as
    ``EXPKEYSIG``/``REVKEYSIG``/``EXPSIG`` with a ``VALIDSIG`` and exit status 0: those count for nothing), and
    no ``BADSIG`` at all. A file signed by several keys, as Debian's are, may carry signatures by keys the
    keyring lacks. The status lines are read as the release signature's (_contract/signature.py).
    """
    sigs, general = parse_status(status, signed="the Release file", signature="the signature")
    bad = [sig for sig in sigs if sig.bad]
    if bad:
        return bad[0].problems[0]
    if any(sig.good for sig in sigs):
        return None
    problems = [problem for sig in sigs for problem in sig.problems] + general
    return "; ".join(problems) if problems else "no good signature"


def verify_signature(signed: bytes, keyrings: Sequence[str], detached: bytes | None = None) -> bytes:
    """The signed content of a clearsigned ``InRelease`` (or ``Release`` with its ``detached`` signature)
    once ``gpgv`` found a good signature by a key of ``keyrings``.

    Raises ValueError with the reason (:func:`signature_problem`, or gpgv's own) when it did not.
    """
    gpgv = _process.which("gpgv", _GPGV_HINT)
    with tempfile.TemporaryDirectory(prefix="hpc-archive-gpgv-") as work:
        home = os.path.join(work, "home")
        os.mkdir(home, 0o700)
        rings = [_dearmored(k, work) for k in keyrings]
        data = os.path.join(work, "data")
        with open(data, "wb") as handle:
            handle.write(signed)
        argv = [gpgv, "--homedir", home, "--status-fd", "1"] + [a for k in rings for a in ("--keyring", k)]
        if detached is None:
            out = os.path.join(work, "content")
            argv += ["--output", out, data]
        else:
            signature = os.path.join(work, "data.gpg")
            with open(signature, "wb") as handle:
                handle.write(detached)
            argv += [signature, data]
        result = _process.run(argv, check=False, timeout=60)
        problem = signature_problem(result.stdout)
        if problem is None and result.rc != 0:
            problem = f"gpgv exited with {result.rc}"
        if problem is not None:
            reason = [line.replace("gpgv: ", "") for line in result.stderr.splitlines() if line.strip()]
            raise ValueError(problem + (f": {reason[-1]}" if reason and problem == "no good signature" else ""))
        if detached is not None:
            return signed
        with open(out, "rb") as handle:
            return handle.read()


# -- Packages indexes --------------------------------------------------------------------------------

def parse_packages(text: str) -> dict[str, list[str]]:
    """``{package name: [every version listed, newest first]}`` of a Packages index."""
    found: dict[str, list[str]] = {}
    name = ""
    for line in text.split("\n"):
        if line.startswith("Package:"):
            name = line[8:].strip()
        elif line.startswith("Version:") and name:
            found.setdefault(name, []).append(line[8:].strip())
            name = ""
    for name, versions in found.items():
        if len(versions) > 1:
            versions.sort(key=debversion.sort_key, reverse=True)
    return found


def _source_key(source) -> tuple[str, str, str]:
    return (source.uri.rstrip("/"), source.suite, source.signed_by or "")


@dataclass
class _Loaded:
    """One source as loaded: its merged declaration, Release record and one index per component."""

    source: object
    components: tuple[str, ...]
    release: dict = field(default_factory=dict)
    indexes: list = field(default_factory=list)  # [{name: [versions newest first]}]
    network: str = "none"  # none (within max_age), 304, same (unchanged bytes), fetched


class ArchiveView:
    """The packages the configured sources offer. Build it with :meth:`load`; ask :meth:`candidate`,
    :meth:`origin`, :attr:`states`; :meth:`restricted` is the view of one layer's sources."""

    def __init__(self, loaded: Sequence[_Loaded], arch: str) -> None:
        self._loaded = list(loaded)
        self.arch = arch

    # -- loading ------------------------------------------------------------------------------------
    @classmethod
    def load(cls, sources: Iterable, *, arch: str, cache_dir: str | None = None, max_age: float = DEFAULT_MAX_AGE,
             fetch: Fetch | None = None, timeout: float = DEFAULT_TIMEOUT, check_valid_until: bool = True,
             trusted: bool = False, now: float | None = None,
             on_wait: Callable[[str], None] | None = None, deadline: float = DEFAULT_DEADLINE,
             retry_delays: Sequence[float] = RETRY_DELAYS) -> ArchiveView:
        """Read every source (each URI+suite+keyring once; components of repeated declarations merged).

        ``check_valid_until=False`` accepts a Release file past its Valid-Until (a dated snapshot);
        ``trusted=True`` (or a source's own ``trusted`` attribute) skips the signature check - only for a
        repository trusted by other means. Runs of one host read one cache in turn: ``on_wait`` gets, once, the
        message of a run that must wait (``waiting for the apt archive index cache <dir>, held by pid N ...``).
        A request that gets no answer is tried again after each of ``retry_delays`` seconds (a resolver or
        link outage passes); all requests together get ``deadline`` seconds once the cache's lock is held.
        Raises :class:`ArchiveError` naming the layer, source and suite.
        """
        merged: dict[tuple[str, str, str], _Loaded] = {}
        for source in sources:
            key = _source_key(source)
            if key in merged:
                entry = merged[key]
                extra = tuple(c for c in source.components if c not in entry.components)
                entry.components += extra
                if source.kind == "security" and entry.source.kind != "security":
                    entry.source = source
            else:
                merged[key] = _Loaded(source, tuple(source.components))
        cache = cache_dir or default_cache_dir()
        loader = _Loader(cache, arch, max_age, fetch or fetch_url, timeout, check_valid_until, trusted,
                         time.time() if now is None else now, tuple(retry_delays))
        loader.prepare()
        lock = Flock(os.path.join(cache, "lock"), f"reading apt archive indexes for the plan of ansible-playbook pid "
                                                  f"{_process.playbook_pid()}")
        try:
            lock.acquire(timeout=LOCK_TIMEOUT, on_wait=on_wait and (
                lambda holder: on_wait(wait_message(f"the apt archive index cache {cache}", holder))))
        except LockBusy as exc:
            raise ArchiveError(f"the archive cache {cache} is busy: {exc}",
                               hint="wait for that run to end, or end it if it hangs (the ansible-playbook pid its "
                                    "note names)") from None
        try:
            loader.deadline = time.monotonic() + deadline
            entries = list(merged.values())
            # The sources are independent (their own record files; index files named by content): read them
            # side by side, so a run costs the slowest source's round trips, not their sum.
            with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(FETCH_THREADS, len(entries)))) as pool:
                outcomes = list(pool.map(_attempt(loader.load, cache), entries))
            for error in outcomes:
                if error is not None:
                    raise error
        finally:
            lock.release()
        return cls(list(merged.values()), arch)

    # -- questions ----------------------------------------------------------------------------------
    @property
    def sources(self) -> tuple:
        """The sources of the view, each URI+suite once, in declaration order."""
        return tuple(entry.source for entry in self._loaded)

    @property
    def states(self) -> list[dict[str, str]]:
        """The repository states read: ``[{uri, suite, date, sha256}]`` (sha256 of the InRelease/Release file)."""
        return [{"uri": e.source.uri.rstrip("/"), "suite": e.source.suite, "date": e.release.get("date", ""),
                 "sha256": e.release.get("sha256", "")} for e in self._loaded]

    @property
    def network(self) -> dict[str, str]:
        """How each source was read this time, ``{"<uri> <suite>": none|304|same|fetched}`` (for reports)."""
        return {f"{e.source.uri.rstrip('/')} {e.source.suite}": e.network for e in self._loaded}

    def restricted(self, sources: Iterable) -> ArchiveView:
        """The view of only ``sources`` (one layer's), sharing what was loaded; a source not loaded is an error."""
        wanted = {_source_key(s) for s in sources}
        unknown = wanted - {_source_key(e.source) for e in self._loaded}
        if unknown:
            raise ValueError(f"sources not in this archive view: {sorted(unknown)}; load the view with every layer's sources")
        return ArchiveView([e for e in self._loaded if _source_key(e.source) in wanted], self.arch)

    def _offers(self, name: str):
        for entry in self._loaded:
            for index in entry.indexes:
                versions = index.get(name)
                if versions:
                    yield entry.source, versions

    def candidate(self, name: str, security: bool = False) -> tuple[str, object] | None:
        """The newest version of package ``name`` the sources offer and its source (a security source wins a
        tie: the same version in the release and the security suite is a security fix); None when none offers it.
        With ``security`` only the sources of kind ``security`` count."""
        best: tuple[str, object] | None = None
        for source, versions in self._offers(name.split(":", 1)[0]):
            if security and source.kind != "security":
                continue
            if best is None:
                best = (versions[0], source)
                continue
            order = debversion.compare(versions[0], best[0])
            if order > 0 or (order == 0 and source.kind == "security" and best[1].kind != "security"):
                best = (versions[0], source)
        return best

    def origin(self, name: str, version: str) -> object | None:
        """The source that offers ``version`` of ``name`` (a security source first), or None."""
        found = None
        for source, versions in self._offers(name.split(":", 1)[0]):
            if any(debversion.compare(v, version) == 0 for v in versions):
                if source.kind == "security":
                    return source
                found = found or source
        return found


def _keyrings(source) -> list[str]:
    """The keyring files the source's signature is checked against; ArchiveError when there is none."""
    if source.signed_by:
        if not os.path.isfile(source.signed_by):
            raise ArchiveError(f"its keyring {source.signed_by} is not a file on this controller", source,
                               "put the repository's public key there (binary .gpg or armoured .asc)")
        return [source.signed_by]
    found = [k for k in DISTRO_KEYRINGS if os.path.isfile(k)]
    if not found:
        raise ArchiveError("no keyring to check its signature: the source names none and no archive keyring "
                           f"is installed ({', '.join(DISTRO_KEYRINGS)})", source,
                           "install debian-archive-keyring (or ubuntu-keyring), or give the source a keyring")
    return found


def _keyrings_digest(source) -> str:
    """The sha256 of the source's keyring files: a record verified with other keys is not taken as verified."""
    digest = hashlib.sha256()
    for keyring in _keyrings(source):
        with open(keyring, "rb") as handle:
            digest.update(handle.read())
    return digest.hexdigest()


def _attempt(load: Callable[[_Loaded], None], cache: str) -> Callable[[_Loaded], ArchiveError | None]:
    """``load`` returning its ArchiveError instead of raising it (the first in declaration order is raised); a
    tool that cannot run (gpgv) or a cache that cannot be written is one too, naming the source."""
    def attempt(entry: _Loaded) -> ArchiveError | None:
        try:
            load(entry)
        except ArchiveError as exc:
            return exc
        except _process.ProcessError as exc:
            return ArchiveError(str(exc), entry.source)
        except OSError as exc:
            return ArchiveError(f"cannot write the archive cache {cache}: {exc.strerror or exc}", entry.source,
                                "free space there, or set hpc_stateless_freshness_cache_dir to another directory")
        return None
    return attempt


class _Loader:
    """Reads one source at a time into the cache (the caller holds the cache's lock)."""

    def __init__(self, cache: str, arch: str, max_age: float, fetch: Fetch, timeout: float,
                 check_valid_until: bool, trusted: bool, now: float, retry_delays: tuple[float, ...] = ()) -> None:
        self.cache, self.arch, self.max_age, self.fetch, self.timeout = cache, arch, max_age, fetch, timeout
        self.check_valid_until, self.trusted, self.now = check_valid_until, trusted, now
        self.retry_delays = retry_delays
        self.deadline: float | None = None  # monotonic; set when the lock is held

    def prepare(self) -> None:
        try:
            for sub in ("releases", "packages"):
                os.makedirs(os.path.join(self.cache, sub), 0o755, exist_ok=True)
            if not os.access(self.cache, os.W_OK):
                raise PermissionError(13, "not writable")
        except OSError as exc:
            raise ArchiveError(f"cannot use the archive cache directory {self.cache}: {exc.strerror or exc}",
                               hint="set hpc_stateless_freshness_cache_dir to a directory this user can write") from None

    # -- one source -----------------------------------------------------------------------------------
    def load(self, entry: _Loaded) -> None:
        source = entry.source
        if not source.suite:
            raise ArchiveError("no suite: only Debian-style (apt) sources can be checked", source,
                               "leave rpm repositories out of the archive view")
        entry.release = self._release(entry)
        self._check_valid_until(entry)
        if _flat(source):
            entry.indexes = [self._packages(entry, "")]
        else:
            entry.indexes = [self._packages(entry, component) for component in entry.components]

    @staticmethod
    def _dists(source) -> str:
        """Where the source's Release files are: ``<uri>/dists/<suite>``, or ``<uri>/<suite>`` when flat."""
        if _flat(source):
            suite = source.suite.rstrip("/")
            return source.uri.rstrip("/") + ("" if suite in ("", ".") else "/" + suite)
        return f"{source.uri.rstrip('/')}/dists/{source.suite}"

    def _get(self, source, url: str, headers: Mapping[str, str] | None = None,
             max_bytes: int = MAX_RELEASE_BYTES) -> Response:
        try:
            return fetch_with_retries(self.fetch, url, delays=self.retry_delays, deadline=self.deadline,
                                      headers=headers or {}, timeout=self.timeout, max_bytes=max_bytes)
        except TooLarge as exc:
            raise ArchiveError(str(exc), source, "the mirror is mid-sync, corrupt or hostile: retry later, or use "
                               "another mirror") from None
        except FetchFailed as exc:
            raise ArchiveError(str(exc), source, "check the mirror URI, the network and any proxy "
                               "(http_proxy), or point the source at a mirror this controller can reach") from None

    def _record_path(self, source) -> str:
        key = hashlib.sha256("\n".join(_source_key(source)).encode("utf-8")).hexdigest()[:32]
        return os.path.join(self.cache, "releases", f"{key}.json")

    def _read_json(self, path: str) -> dict | None:
        try:
            with open(path, "r", encoding="utf-8") as handle:
                data = json.load(handle)
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) and data.get("format") == _CACHE_FORMAT else None

    def _release(self, entry: _Loaded) -> dict:
        source = entry.source
        path = self._record_path(source)
        record = self._read_json(path)
        held = record  # the newest Release file checked before, even when this run checks afresh
        keyrings = "" if self._trusted(source) else _keyrings_digest(source)
        if record and not (self._trusted(source) or (record.get("verified") and record.get("keyrings") == keyrings)):
            record = None  # read before as trusted, or checked with other keys: this run checks afresh
        if record and self.now - float(record.get("checked", 0)) < self.max_age:
            entry.network = "none"
            return record
        headers = {}
        if record and record.get("etag"):
            headers["If-None-Match"] = record["etag"]
        if record and record.get("last_modified"):
            headers["If-Modified-Since"] = record["last_modified"]
        dists = self._dists(source)
        reply = self._get(source, f"{dists}/InRelease", headers)
        inline_signed = reply.status != 404
        if not inline_signed:
            reply = self._get(source, f"{dists}/Release", headers)
            if reply.status == 404:
                raise ArchiveError(f"suite {source.suite} not found at {source.uri} (no {dists}/InRelease or Release)",
                                   source, "check the suite's spelling and that the URI is the archive that holds it "
                                   "(a snapshot URL must include the archive: .../archive/debian-security/<date>/ "
                                   "for <release>-security)")
        if reply.status == 304 and record:
            entry.network = "304"
            record["checked"] = self.now
            write_atomic(path, json.dumps(record), sync=False)
            return record
        detached = None
        if not inline_signed and not self._trusted(source):
            signature = self._get(source, f"{dists}/Release.gpg", max_bytes=MAX_RELEASE_BYTES)
            if signature.status != 200:
                raise ArchiveError("the repository is not signed (no InRelease, no Release.gpg)", source,
                                   "sign its Release file, or declare the source trusted if it is trusted by other means")
            detached = signature.body
        if reply.status != 200:
            raise ArchiveError(f"unexpected answer {reply.status} for {dists}/InRelease", source)
        digest = hashlib.sha256(reply.body).hexdigest()
        if record and record.get("sha256") == digest:
            # The same bytes as verified before (a mirror that sends no ETag/Last-Modified): nothing to redo.
            entry.network = "same"
            record.update(checked=self.now, etag=reply.etag, last_modified=reply.last_modified)
            write_atomic(path, json.dumps(record), sync=False)
            return record
        entry.network = "fetched"
        content = self._verified(source, reply.body, detached)
        fields = parse_release(content.decode("utf-8", "replace"))
        date = self._checked_release(source, fields, held)
        record = {"format": _CACHE_FORMAT, "uri": source.uri.rstrip("/"), "suite": source.suite,
                  "sha256": digest, "checked": self.now, "verified": not self._trusted(source), "keyrings": keyrings,
                  "etag": reply.etag, "last_modified": reply.last_modified,
                  "date": str(fields.get("Date", "")), "date_epoch": date,
                  "valid_until": _release_time(fields.get("Valid-Until")),
                  "by_hash": str(fields.get("Acquire-By-Hash", "")).lower() == "yes",
                  "files": {p: list(v) for p, v in fields["SHA256"].items() if "Packages" in p}}
        write_atomic(path, json.dumps(record), sync=False)
        return record

    def _checked_release(self, source, fields: Mapping[str, object], held: dict | None) -> float | None:
        """The Release file's Date once it is the suite asked for and not older than the one ``held``; a
        mislabelled or replayed Release file is an ArchiveError (the record held stays)."""
        # A trusted tree the site builds itself may carry no Date; a signed one must, or it could be replayed forever.
        problem = release_problem(source.suite, fields, _held_date(held), require_date=not self._trusted(source),
                                  now=self.now)
        if problem is None:
            return _release_time(fields.get("Date"))
        if problem.endswith("not valid yet"):
            raise ArchiveError(problem, source, "check this host's clock (timedatectl, chrony) and the mirror's; a "
                               "Release file from the future is refused until its Date has come")
        raise ArchiveError(problem, source, "the mirror serves another suite or an older state of it (a replay, or "
                           "a mirror behind the one read before): check the URI and suite, or use a current mirror; "
                           f"only when going back is meant, remove {self._record_path(source)}")

    def _trusted(self, source) -> bool:
        return self.trusted or bool(getattr(source, "trusted", False))

    def _verified(self, source, body: bytes, detached: bytes | None) -> bytes:
        if self._trusted(source):
            if detached is None and body.lstrip().startswith(b"-----BEGIN PGP SIGNED MESSAGE"):
                return _clearsigned_text(body)
            return body
        keyrings = _keyrings(source)
        try:
            return verify_signature(body, keyrings, detached)
        except ValueError as exc:
            raise ArchiveError(f"its Release file is not signed by a key of {', '.join(keyrings)} ({exc})", source,
                               "give the source the repository's keyring, or check that the mirror is genuine") from None

    def _check_valid_until(self, entry: _Loaded) -> None:
        until = entry.release.get("valid_until")
        check = self.check_valid_until and getattr(entry.source, "check_valid_until", True) is not False
        if check and until is not None and until < self.now:
            raise ArchiveError(f"its Release file expired on {iso_utc(until)} (Valid-Until is in the past)",
                               entry.source, "a mirror that stopped syncing serves stale security data; for a dated "
                               "snapshot on purpose: hpc_stateless_freshness_policy: never (the plan warns and keeps the "
                               "layers), or an archive view loaded with check_valid_until=False (docs/freshness.md)")

    def _packages(self, entry: _Loaded, component: str) -> dict[str, list[str]]:
        source, files = entry.source, entry.release.get("files", {})
        directory = f"{component}/binary-{self.arch}" if component else ""
        base = f"{directory}/Packages" if directory else "Packages"
        for suffix, decompress in _COMPRESSIONS:
            if base + suffix in files:
                break
        else:
            if not component:
                raise ArchiveError("its Release file lists no Packages index", source,
                                   "publish the flat repository with its Packages file in the Release file")
            offered = sorted({p.split("/binary-")[0] for p in files if f"/binary-{self.arch}/" in p})
            raise ArchiveError(f"component {component!r} has no Packages index for {self.arch} "
                               f"(its Release file has {self.arch} indexes for: {', '.join(offered) or 'none'})",
                               source, "fix the source's components, or the architecture")
        digest, size = files[base + suffix]
        cached_path = os.path.join(self.cache, "packages", f"{digest}.json")
        cached = self._read_json(cached_path)
        if cached is not None and isinstance(cached.get("packages"), dict):
            return cached["packages"]
        dists = self._dists(source)
        urls = [f"{dists}/{base}{suffix}"]
        if entry.release.get("by_hash") and directory:
            urls.insert(0, f"{dists}/{directory}/by-hash/SHA256/{digest}")
        body = None
        for url in urls:
            reply = self._get(source, url, max_bytes=size)
            if reply.status == 200:
                body = reply.body
                break
        if body is None:
            raise ArchiveError(f"its Release file lists {base}{suffix} but the mirror does not have it", source,
                               "the mirror is mid-sync or incomplete: retry later, or use another mirror")
        got = hashlib.sha256(body).hexdigest()
        if got != digest:
            raise ArchiveError(f"{base}{suffix} has sha256 {got}, its Release file says {digest}", source,
                               "the mirror is mid-sync or corrupt: retry later, or use another mirror")
        try:
            text = decompress(body).decode("utf-8", "replace")
        except (lzma.LZMAError, OSError, EOFError) as exc:
            raise ArchiveError(f"{base}{suffix} does not decompress ({exc})", source, "retry, or use another mirror") from None
        try:
            packages = parse_packages(text)
        except ValueError as exc:
            raise ArchiveError(f"{base}{suffix} lists a version that is not a Debian version ({exc})", source,
                               "fix the repository's package versions, or leave the source out") from None
        write_atomic(cached_path, json.dumps({"format": _CACHE_FORMAT, "packages": packages}, separators=(",", ":")),
                     sync=False)
        return packages


def _flat(source) -> bool:
    return source.suite.endswith("/")


def _clearsigned_text(body: bytes) -> bytes:
    """The text of a clearsigned message without checking it (``trusted`` sources only)."""
    lines = body.decode("utf-8", "replace").splitlines()
    try:
        start = lines.index("") + 1
        end = lines.index("-----BEGIN PGP SIGNATURE-----")
    except ValueError:
        return body
    return "\n".join(line[2:] if line.startswith("- ") else line for line in lines[start:end]).encode("utf-8") + b"\n"


# -- updates ---------------------------------------------------------------------------------------

class Update(NamedTuple):
    """A newer version of an installed package: ``str()`` is ``openssl 3.0.20 -> 3.0.22``."""

    package: str
    installed: str
    candidate: str
    suite: str
    security: bool

    def __str__(self) -> str:
        return f"{self.package} {self.installed} -> {self.candidate}"


def pending_updates(view: ArchiveView, installed: Mapping[str, str], policy: str = "any") -> list[Update]:
    """The installed packages (``{name: version}``; ``name:arch`` accepted) of which the view offers a newer
    version: under ``any`` and ``never`` every one (``never`` is the lag to warn about), under ``security``
    the security updates. A package whose installed version is below a security source's version has a security
    update (to that version) whatever newer version another source (backports, a site repository) carries: that
    version is no fix of what is installed, and it must not hide one. Security updates first, then by name.

    Raises ValueError naming a policy that is not one of :data:`POLICIES`, or a version that is no Debian version.
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown freshness policy {policy!r} (choose one of {', '.join(POLICIES)})")
    updates = []
    for name, version in installed.items():
        for found in (view.candidate(name, security=True), view.candidate(name)):
            if found is None:
                continue
            candidate, source = found
            try:
                newer = debversion.compare(candidate, version) > 0
            except ValueError as exc:
                raise ValueError(f"installed package {name}: {exc}") from None
            if newer:
                security = source.kind == "security"
                if policy != "security" or security:
                    updates.append(Update(name, version, candidate, source.suite, security))
                break
    return sorted(updates, key=lambda u: (not u.security, u.package))


def describe_updates(updates: Sequence[Update], limit: int = 3) -> str:
    """``4 security updates (openssl 3.0.20 -> 3.0.22, ...)``; ``5 updates, 2 of them security (...)``; ``no updates``."""
    if not updates:
        return "no updates"
    security = sum(1 for u in updates if u.security)
    count = len(updates)
    if security == count:
        head = f"{count} security update{'s' if count != 1 else ''}"
    elif security:
        head = f"{count} updates, {security} of them security"
    else:
        head = f"{count} update{'s' if count != 1 else ''}"
    shown = ", ".join(str(u) for u in updates[:limit])
    return f"{head} ({shown}{', ...' if count > limit else ''})"
