"""Where a bundle can come from: the local store and the hub, behind one protocol, walked by one loop.

A `Source` lists the versions of a NAME, fetches one into the local store (a no-op for the local store itself),
and takes a push. A `Walk` goes over `[local, hub]` newest version first, skipping what does not fit this machine
or fails a check, with the reason recorded, and yields each version it fetched whole; its caller installs it
(core/bundle_search.py, the one search every restore, pull and fetch goes through).
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar

from .backends.base import HubConnectionLost
from .bundle import BundleError, FieldMismatch, Manifest, UnsafeBundle
from .chunks import DamagedChunk
from .hub import Hub, HubError, SignatureError, check_signature
from .store import LocalStore, Removal, UnreadableManifest

Progress = Callable[[int, int], None]  # (bytes done, bytes total)
T = TypeVar("T")

# A connection that broke under a listing or a pull is tried again on a fresh one this many times (a server that is
# down refuses at once, so the bound costs little); a timeout or a refusal is not retried.
RETRIES = 2


@dataclass(frozen=True)
class Place:
    """Where versions are: the local store (`location`: its folder) or a hub (`location`: its URL, the password
    hidden; `namespace` where a command names the one it works on). The front ends word it."""

    kind: str  # "local" or "hub"
    location: str
    namespace: str | None = None


class Source(Protocol):
    kind: str  # "local" or "hub": RestoreResult.source
    where: Place

    def names(self) -> list[str]: ...

    def versions(self, name: str, problems: list[UnreadableManifest] | None = None) -> list[Manifest]:
        """NAME's versions, newest first; what could not be read is added to PROBLEMS (and left out)."""
        ...

    def remove(self, name: str, version: str | None = None, dry_run: bool = False) -> list[Removal]:
        """Delete NAME (one version or all); returns what went (or would go)."""
        ...

    def fetch(self, manifest: Manifest, store: LocalStore, progress: Progress | None = None) -> Manifest:
        """Make `manifest` a version of `store` (verified); returns the stored manifest."""
        ...

    def push(self, manifest: Manifest, store: LocalStore, progress: Progress | None = None) -> Manifest:
        """Copy a version of `store` here; returns the manifest as this source keeps it."""
        ...

    def reconnect(self) -> None:
        """After a HubConnectionLost: the next call goes over a fresh connection."""
        ...


class LocalSource:
    kind = "local"

    def __init__(self, store: LocalStore) -> None:
        self.store = store
        self.where = Place(self.kind, store.root)

    def names(self) -> list[str]:
        return self.store.names()

    def versions(self, name: str, problems: list[UnreadableManifest] | None = None) -> list[Manifest]:
        return self.store.versions(name, problems)  # an unreadable manifest is quarantined and said

    def remove(self, name: str, version: str | None = None, dry_run: bool = False) -> list[Removal]:
        return self.store.remove(name, version, dry_run)

    def fetch(self, manifest: Manifest, store: LocalStore, progress: Progress | None = None) -> Manifest:
        if store.root == self.store.root:
            return manifest
        with self.store.open_payload(manifest) as payload:  # into another local store: copied, hash verified
            return store.adopt(manifest, payload)

    def push(self, manifest: Manifest, store: LocalStore, progress: Progress | None = None) -> Manifest:
        with store.open_payload(manifest) as payload:
            return self.store.adopt(manifest, payload)

    def reconnect(self) -> None:
        pass


class HubSource:
    kind = "hub"

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.url = hub.config.url
        self.display_url = hub.display_url  # the URL with its password hidden
        self.namespace = hub.config.namespace
        self.where = Place(self.kind, hub.display_url)

    def names(self) -> list[str]:
        return self.hub.names()

    def versions(self, name: str, problems: list[UnreadableManifest] | None = None) -> list[Manifest]:
        return self.hub.versions(name)  # an unreadable hub manifest is skipped by the hub itself

    def remove(self, name: str, version: str | None = None, dry_run: bool = False) -> list[Removal]:
        return self.hub.remove(name, version, dry_run)

    def gc(
        self,
        keep: int = 3,
        dry_run: bool = False,
        keep_member: Callable[[str], bool] | None = None,
        progress: Callable[[Manifest], Progress] | None = None,
    ) -> list[Removal]:
        """Keep the newest KEEP versions of each name and machine; delete the rest (and the members `keep_member`
        refuses from those kept, each rewrite shown by `progress(manifest)`)."""
        return self.hub.gc(keep, dry_run, keep_member, progress)

    def fetch(self, manifest: Manifest, store: LocalStore, progress: Progress | None = None) -> Manifest:
        """Check the signature, pull (every chunk verified), then store it: next time it is local. Kernels of one
        machine fetching the same version at once pull it once."""
        check_signature(manifest, self.hub.config.secret)
        with store.fetching(manifest) as here:  # one pull per machine: other kernels wait, then read the store
            if not here:
                with store.receive(manifest) as sink:  # one pass: each verified chunk straight into the store
                    self.hub.pull(manifest, sink, progress)
        return manifest

    def push(self, manifest: Manifest, store: LocalStore, progress: Progress | None = None) -> Manifest:
        return self.hub.push(manifest, store.payload_path(manifest), progress)

    def reconnect(self) -> None:
        self.hub.backend.reconnect()


class SkipKind(str, enum.Enum):
    """Why a walk passed over a version."""

    NOT_WANTED = "not wanted"  # not the version asked for (another pinned version, another code digest)
    INCOMPATIBLE = "incompatible"  # it cannot restore on this machine (`mismatches`: the fields that differ)
    WRONG_SIGNATURE = "wrong signature"  # signed with another team's secret, or not signed
    TRANSFER_FAILED = "transfer failed"  # the hub failed while sending it, retries included (the walk leaves it)
    UNUSABLE = "unusable"  # its payload could not be read or verified (a chunk damaged or gone: older ones are tried)
    DAMAGED = "damaged"  # installing it found a damaged member (the local copy is quarantined)
    UNSAFE = "unsafe"  # a member would land outside the cache dirs (quarantined)
    NOT_INSTALLED = "not installed"  # the cache dir could not take it (the walk stops there)


@dataclass(frozen=True)
class Skip:
    """A version a walk passed over: its id and where it was, why (`kind`), the cause in its own words (`detail`:
    an error's message), and where a quarantined copy went. The front ends word it (frontends/wording.py); a test
    reads its fields."""

    version: str
    where: Place
    kind: SkipKind
    detail: str = ""
    moved_to: str | None = None
    tries: int = 1  # how many times the transfer was tried (a lost connection is retried on a fresh one)
    mismatches: tuple[FieldMismatch, ...] = ()  # INCOMPATIBLE: the fields of its fingerprint that differ from here

    @property
    def worth_telling(self) -> bool:
        """Whether a user should hear of it even when a later version restored (a wrong secret, a damaged bundle);
        a version made for another machine, or not asked for, is no news."""
        return self.kind not in (SkipKind.INCOMPATIBLE, SkipKind.NOT_WANTED)


@dataclass
class Found:
    """What a walk ended with: the stored manifest (None: nothing usable), where it came from, and the versions it
    passed over (`skipped`, with why); `problems`, what went wrong besides a version (a manifest the store could
    not read)."""

    manifest: Manifest | None = None
    source: Source | None = None
    installed: Any = None
    fetch_seconds: float = 0.0
    skipped: list[Skip] = field(default_factory=list)
    problems: list[UnreadableManifest] = field(default_factory=list)
    down: list[tuple[Source, HubError]] = field(default_factory=list)  # sources that did not answer
    wrong_signatures: int = 0  # hub versions refused as not signed with this team's secret
    retries: list[str] = field(default_factory=list)  # connections lost and tried again: each error's words


def _retrying(call: Callable[[], T], source: Source, found: Found) -> T:
    """CALL, tried again on a fresh connection when the connection broke under it, at most RETRIES times."""
    for attempt in range(RETRIES + 1):
        try:
            return call()
        except HubConnectionLost as exc:
            if attempt == RETRIES:
                raise
            found.retries.append(str(exc))
            source.reconnect()
            time.sleep(0.05 * (attempt + 1))  # a server restarting, a proxy re-routing: a moment is enough
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class Candidate:
    """A version the walk fetched whole into the local store: its manifest as the store keeps it, where it came
    from and how long the fetch took."""

    manifest: Manifest
    source: Source
    fetch_seconds: float = 0.0


class Walk:
    """NAME's versions, newest first, over `sources` in order (the local store, then the hub): each one `wanted` asks
    for (None: each), that `misfit` finds no field against (another torch, GPU...) and that fetches whole is yielded,
    already in `store` (`progress(source, manifest)`: a fetch's progress bar). The caller says how installing it went:
    `take` ends the walk; `reject` (a check failed) quarantines the local copy and goes on; `give_up` (the cache dir
    could not take it) ends it with nothing. What was passed over, and why, is in `found`."""

    def __init__(
        self,
        name: str,
        sources: list[Source],
        store: LocalStore,
        misfit: Callable[[Manifest], tuple[FieldMismatch, ...]],
        progress: Callable[[Source, Manifest], Progress | None] | None = None,
        wanted: Callable[[Manifest], bool] | None = None,
    ) -> None:
        self.name, self.sources, self.store = name, sources, store
        self.misfit, self.progress, self.wanted = misfit, progress, wanted
        self.found = Found()
        self._ended = False

    def __iter__(self) -> Iterator[Candidate]:
        found = self.found
        for source in self.sources:
            try:
                versions = _retrying(lambda: source.versions(self.name, found.problems), source, found)  # noqa: B023
            except HubError as exc:
                found.down.append((source, exc))
                continue
            for manifest in versions:
                candidate = self._fetch(source, manifest)
                if candidate is False:  # the source failed under the transfer: leave it
                    break
                if candidate is not None:
                    yield candidate
                if self._ended:
                    return

    def _fetch(self, source: Source, manifest: Manifest) -> Candidate | None | Literal[False]:
        found = self.found

        def skip(kind: SkipKind, detail: str = "", **more: Any) -> None:
            found.skipped.append(Skip(manifest.version, source.where, kind, detail, **more))

        if self.wanted is not None and not self.wanted(manifest):
            skip(SkipKind.NOT_WANTED)
            return None
        mismatches = self.misfit(manifest)
        if mismatches:
            skip(SkipKind.INCOMPATIBLE, mismatches=mismatches)
            return None
        start = time.perf_counter()
        bar = self.progress(source, manifest) if self.progress else None
        try:
            local = _retrying(lambda: source.fetch(manifest, self.store, bar), source, found)
        except SignatureError as exc:
            skip(SkipKind.WRONG_SIGNATURE, str(exc))
            found.wrong_signatures += 1
            return None
        except DamagedChunk as exc:  # this version is bad, not the hub: an older one may be whole
            skip(SkipKind.UNUSABLE, str(exc))
            return None
        except HubError as exc:  # the transfer failed, retried: the hub is the problem, not this version
            tries = RETRIES + 1 if isinstance(exc, HubConnectionLost) else 1
            skip(SkipKind.TRANSFER_FAILED, str(exc), tries=tries)
            return False
        except FileNotFoundError:  # pruned by another kernel between listing and reading
            return None
        except (BundleError, OSError) as exc:
            skip(SkipKind.UNUSABLE, str(exc))
            return None
        finally:
            close = getattr(bar, "close", None)
            if close is not None:
                close()
        return Candidate(local, source, time.perf_counter() - start)

    def take(self, candidate: Candidate, installed: Any = None) -> Found:
        """The walk ends with CANDIDATE (`installed`: what installing it gave, e.g. the paths written)."""
        self.store.touch(candidate.manifest)
        found = self.found
        found.manifest, found.source, found.installed = candidate.manifest, candidate.source, installed
        found.fetch_seconds = candidate.fetch_seconds
        self._ended = True
        return found

    def reject(self, candidate: Candidate, exc: BundleError) -> None:
        """Installing CANDIDATE found a damaged or unsafe member: the local copy goes to quarantine, the walk on."""
        moved = self.store.quarantine(candidate.manifest, str(exc))
        kind = SkipKind.UNSAFE if isinstance(exc, UnsafeBundle) else SkipKind.DAMAGED
        self.found.skipped.append(Skip(candidate.manifest.version, candidate.source.where, kind, str(exc), moved))

    def give_up(self, candidate: Candidate, exc: OSError) -> None:
        """The cache dir could not take CANDIDATE (full, read-only): no older version would fare better."""
        skip = Skip(candidate.manifest.version, candidate.source.where, SkipKind.NOT_INSTALLED, str(exc))
        self.found.skipped.append(skip)
        self._ended = True

    def first(self) -> Found:
        """The walk, fetching only: the first candidate is taken."""
        for candidate in self:
            return self.take(candidate)
        return self.found
