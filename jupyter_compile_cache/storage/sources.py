"""Where a bundle can come from: the local store and the hub, behind one protocol, walked by one loop.

A `Source` lists the versions of a NAME, fetches one into the local store (a no-op for the local store itself),
and takes a push. `find` walks `[local, hub]` newest version first, skipping what does not fit this machine or
fails a check, with the reason recorded; the cell's restore, the panel's restore button and the CLI's
`hub pull` all go through it, so they skip, quarantine and report alike.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any, Protocol

from .bundle import BundleError, Manifest, UnsafeBundle
from .hub import Hub, HubError, SignatureError, check_signature
from .store import LocalStore, Removal

Progress = Callable[[int, int], None]  # (bytes done, bytes total)


class Source(Protocol):
    kind: str  # "local" or "hub": RestoreResult.source
    where: str  # for messages: "the local store /path", "the hub redis://host:6379/0"

    def names(self) -> list[str]: ...

    def versions(self, name: str) -> list[Manifest]: ...

    def remove(self, name: str, version: str | None = None, dry_run: bool = False) -> list[Removal]:
        """Delete NAME (one version or all); returns what went (or would go)."""
        ...

    def fetch(self, manifest: Manifest, store: LocalStore, progress: Progress | None = None) -> Manifest:
        """Make `manifest` a version of `store` (verified); returns the stored manifest."""
        ...

    def push(self, manifest: Manifest, store: LocalStore, progress: Progress | None = None) -> Manifest:
        """Copy a version of `store` here; returns the manifest as this source keeps it."""
        ...


class LocalSource:
    kind = "local"

    def __init__(self, store: LocalStore) -> None:
        self.store = store
        self.where = f"the local store {store.root}"

    def names(self) -> list[str]:
        return self.store.names()

    def versions(self, name: str) -> list[Manifest]:
        return self.store.versions(name)

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


class HubSource:
    kind = "hub"

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.url = hub.config.url
        self.display_url = hub.display_url  # the URL with its password hidden
        self.namespace = hub.config.namespace
        self.where = f"the hub {hub.display_url}"

    def names(self) -> list[str]:
        return self.hub.names()

    def versions(self, name: str) -> list[Manifest]:
        return self.hub.versions(name)

    def remove(self, name: str, version: str | None = None, dry_run: bool = False) -> list[Removal]:
        return self.hub.remove(name, version, dry_run)

    def gc(self, keep: int = 3, dry_run: bool = False) -> list[Removal]:
        """Keep the newest KEEP versions of each name and machine; delete the rest."""
        return self.hub.gc(keep, dry_run)

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


@dataclass
class Found:
    """What `find` ended with: the stored manifest (None: nothing usable), where it came from, and why others were
    skipped (one line per version). `warnings` say the same of skipped versions in words worth telling even when a
    later version was used; `problems`, what went wrong besides a version (a manifest the store could not read)."""

    manifest: Manifest | None = None
    source: Source | None = None
    installed: Any = None
    fetch_seconds: float = 0.0
    skipped: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    down: list[tuple[Source, HubError]] = field(default_factory=list)  # sources that did not answer
    wrong_signatures: int = 0  # hub versions refused as not signed with this team's secret


def find(
    name: str,
    sources: list[Source],
    store: LocalStore,
    misfit: Callable[[Manifest], str | None],
    install: Callable[[Manifest, IO[bytes]], Any] | None = None,
    progress: Callable[[Source, Manifest], Progress | None] | None = None,
) -> Found:
    """The newest version of NAME that fits this machine, fetched into `store` and, with `install`, installed.

    `misfit(manifest)` says why a version cannot restore on this machine (another torch, GPU...), or None.

    `install(manifest, payload)` extracts into torch's cache dirs: a BundleError there quarantines the local copy
    and the walk goes on; an OSError ends it (the cache dir is the problem, not the bundle).
    """
    found = Found()
    for source in sources:
        try:  # the local store also says which manifests it could not read (now quarantined)
            if isinstance(source, LocalSource):
                versions = source.store.versions(name, found.problems)
            else:
                versions = source.versions(name)
        except HubError as exc:
            found.down.append((source, exc))
            continue
        label = "" if source.kind == "local" else f"{source.kind} "
        for manifest in versions:
            tag = f"{label}version {manifest.version}"
            reason = misfit(manifest)
            if reason:
                found.skipped.append(f"{tag}: incompatible ({reason})")
                continue
            start = time.perf_counter()
            bar = progress(source, manifest) if progress else None
            try:
                local = source.fetch(manifest, store, bar)
            except SignatureError as exc:
                found.skipped.append(f"{tag}: {exc}")
                found.warnings.append(f"{exc}; refused")
                found.wrong_signatures += 1
                continue
            except HubError as exc:  # the transfer failed: the hub is the problem, not this version
                found.skipped.append(f"{tag}: {exc}")
                found.warnings.append(f"could not pull {name!r} from {source.where}: {exc}")
                break
            except FileNotFoundError:  # pruned by another kernel between listing and reading
                continue
            except (BundleError, OSError) as exc:
                found.skipped.append(f"{tag}: unusable: {exc}")
                found.warnings.append(f"bundle {name!r} {tag} from {source.where} is unusable: {exc}")
                continue
            finally:
                close = getattr(bar, "close", None)
                if close is not None:
                    close()
            fetch_seconds = time.perf_counter() - start
            if install is not None:
                try:
                    with store.open_payload(local) as payload:
                        found.installed = install(local, payload)
                except FileNotFoundError:
                    continue
                except BundleError as exc:
                    kind = "refused (unsafe)" if isinstance(exc, UnsafeBundle) else "damaged"
                    moved = store.quarantine(local, str(exc))
                    found.skipped.append(f"{tag}: {kind}: {exc}; moved to {moved}")
                    found.warnings.append(f"bundle {name!r} {tag} is {kind}: {exc}; moved to {moved}")
                    continue
                except OSError as exc:
                    found.skipped.append(f"{tag}: {exc}")
                    found.warnings.append(f"could not restore bundle {name!r}: {exc}")
                    return found
            store.touch(local)
            found.manifest, found.source, found.fetch_seconds = local, source, fetch_seconds
            return found
    return found
