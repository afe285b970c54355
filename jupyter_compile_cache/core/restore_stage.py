"""A cell's restore stage (`restore_for_cell`): the newest version of NAME that fits this machine (the local store,
then the hub), installed into torch's cache dirs and told; if none, NAME's lease on the hub (one kernel compiles
while the others wait for its bundle); and the precompile guard set to ask, while the body runs, for another version
of NAME whose precompile entry is for a function's code (`install_version_with`). `restore()` of the script API and
`%compile_cache restore` come here too."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO

from ..failure import Failure
from ..storage import bundle
from ..storage.bundle import Manifest, matching_versions
from ..storage.hub import Lease
from ..storage.run_builds import RunBuilds
from ..storage.sources import HubSource, Progress, SkipKind, Source
from ..storage.store import LocalStore
from ..torch_adapter import capture, fingerprint, layers
from ..torch_adapter.entry_records import alternate_member
from ..torch_adapter.precompile import PrecompileGuard
from . import events
from .notebook import NotebookStage
from .options import CellOptions, writer
from .records import CellReport, RestoreResult
from .store_session import StoreSession


@dataclass
class CellRestore:
    """What a cell's restore stage leaves the rest of the cell: NAME's lease on the hub, if it took one (released at
    the cell's end), the files the restore installed, and those installed beside them while the body runs (another
    version's entries, for a function's code): not the cell's work, carried into its bundle only if used.
    `find_elsewhere`: while the body runs, asked for a code digest no entry in the cache dir has, installs the entries
    of another version of NAME that has it, and says whether it did."""

    lease: Lease | None = None
    files: list[str] = field(default_factory=list)
    installed_beside: list[str] = field(default_factory=list)
    find_elsewhere: Callable[[str], bool] | None = None


class RestoreStage:
    def __init__(self, stores: StoreSession, guard: PrecompileGuard, notebook: NotebookStage) -> None:
        self.stores = stores
        self.tell = stores.tell  # what happens, to the front end
        self.transfer = stores.transfer  # a pull's or an install's progress, shown by the front end
        self.guard = guard
        self.notebook = notebook  # what the kernel fetched ahead of its cells: a restore from it says so
        self.restored_paths: dict[str, list[str]] = {}  # NAME -> the files its last restore installed
        self._to_refresh: list[str] = []  # files the last restore wrote, for the precompile guard's refresh
        self._alternates: dict[str, set[str]] = {}  # NAME -> versions whose entries were installed beside its own

    def restore_for_cell(self, name: str, opts: CellOptions, report: CellReport, hub: HubSource | None) -> CellRestore:
        """The restore stage of a cell: the newest version of NAME that fits; if none, NAME's lease on the hub (the
        hub policy's single flight); and the guard set to find another version of NAME for a function whose code
        the restored one does not hold."""
        if opts.restore:
            report.restore = self.restore(name, opts, report, hub)
        restored = report.restore is not None and report.restore.restored
        # the lease is keyed by this machine's fingerprint: worked out only where one may be taken
        fingerprint_id = fingerprint.digest(fingerprint.current()) if hub is not None and not restored else ""

        def again() -> RestoreResult:  # while a collaborator compiles NAME, until their bundle arrives
            return self.restore(name, opts, report, hub)

        lease = self.stores.hub_policy.single_flight(hub, name, fingerprint_id, writer(), opts, report, again)
        cell = CellRestore(lease, self.restored_paths.get(name, []))
        installed = report.restore.version if report.restore is not None else None
        if installed is not None:  # nothing fitted at all: no other version of NAME will
            cell.find_elsewhere = lambda digest: self.install_version_with(
                name, digest, installed, opts, cell.installed_beside
            )
        return cell

    def restore(
        self,
        name: str,
        opts: CellOptions,
        report: CellReport | None,
        hub: HubSource | None,
        progress: Progress | None = None,
    ) -> RestoreResult:
        """The newest version of NAME that fits, installed and told (or why none was). `progress(done, total)` is
        told the bytes pulled, then restored (else the front end's bar shows what takes over a second)."""
        stores = self.stores
        result = RestoreResult(name)
        store = stores.store(opts.store_dir)
        start = time.perf_counter()
        roots = capture.cache_roots()

        def pull_bar(source: Source, _manifest: Manifest) -> Progress | None:
            if source.kind != "hub":
                return None
            return progress or self.transfer(events.Moving.PULL, name, opts.quiet)

        def install(manifest: Manifest, payload: IO[bytes]) -> list[str]:
            bar = None if progress is not None else self.transfer(events.Moving.RESTORE, name, opts.quiet)
            try:
                return self._install(store, manifest, payload, roots, progress or bar)
            finally:
                if bar is not None:
                    bar.close()

        pinned = opts.version

        def wanted(manifest: Manifest) -> bool:
            return pinned is None or bool(matching_versions([manifest.version], pinned))

        found = stores.search.newest(name, store, hub, wanted=wanted, install=install, progress=pull_bar, report=report)
        found.skipped = [skip for skip in found.skipped if skip.kind != SkipKind.NOT_WANTED]
        # a version asked for that NAME has not
        unknown_version = pinned if pinned is not None and found.manifest is None and not found.skipped else None
        result.skipped = list(found.skipped)
        from_hub = hub if hub is not None and found.source is hub else None
        if found.manifest is not None and found.source is not None:
            manifest = found.manifest
            result.source, result.version = found.source.kind, manifest.version
            result.files, result.bytes = len(found.installed), manifest.payload_bytes
            result.uses_cpu_kernels = manifest.uses_cpu_kernels
            cold = manifest.stats.get("body_seconds")
            result.cold_seconds = float(cold) if isinstance(cold, (int, float)) else None
            if from_hub is not None:
                stores.hub_policy.trust(from_hub, report)
                result.hub_url, result.pull_seconds = from_hub.display_url, found.fetch_seconds
            try:  # restored files too: never the cell's work (a restore beside the body installs them as it runs)
                run_builds = RunBuilds(store.root).install(name, roots)
            except OSError as exc:  # torch builds them again, as without them
                run_builds = []
                self.tell(events.StepFailed(events.Step.RUN_BUILDS, Failure.of(exc), name, store.root), report)
            result.run_builds = len(run_builds)
            self.restored_paths[name] = found.installed + run_builds
        result.hub_signed_elsewhere = found.wrong_signatures > 0 and from_hub is None
        result.retries = len(found.retries)
        result.seconds = time.perf_counter() - start
        if result.restored:  # what went wrong on the way is worth telling: a wrong secret, a damaged version
            for problem in found.problems:
                self.tell(events.ManifestQuarantined(problem), report)
            for skip in found.skipped:
                if skip.worth_telling:
                    self.tell(events.SkippedVersion(name, skip), report)
            fetched_at_start = result.source == "local" and name in self.notebook.fetched
            if fetched_at_start and hub is not None:
                stores.hub_policy.trust(hub, report)
            self.tell(events.Restored.of(result, fetched_at_start), report, opts.quiet)
        elif found.skipped or found.problems or unknown_version is not None:  # one line says it all, each reason once
            not_restored = events.NotRestored(name, tuple(found.skipped), tuple(found.problems), unknown_version)
            self.tell(not_restored, report, opts.quiet)
        return result

    def refresh_loaded(self) -> None:
        """Newer precompile entries a restore brought for functions this kernel already loaded, installed now."""
        paths, self._to_refresh = self._to_refresh, []
        if paths:
            self.guard.refresh(paths)

    def _install(
        self,
        store: LocalStore,
        manifest: Manifest,
        payload: IO[bytes],
        roots: dict[str, str],
        progress: Progress | None,
    ) -> list[str]:
        """Extract a version into the cache dirs, unless its last restore there (this kernel's or one before a
        restart) left every file it wrote unchanged: restoring NAME and then running its cell, or restarting the
        kernel, passes over it."""
        key = json.dumps([manifest.version, sorted(roots.items())])
        paths = store.installed(manifest.name, key)
        if paths is not None:
            return paths
        paths = bundle.extract(payload, manifest, roots, progress, keep=layers.is_compile_result)
        with contextlib.suppress(OSError):  # the next restore extracts it again
            store.note_installed(manifest.name, key, paths)
        self._to_refresh += paths  # a function this kernel already loaded may have a newer entry here
        return paths

    def install_version_with(
        self, name: str, digest: str, installed: str, opts: CellOptions, beside: list[str] | None = None
    ) -> bool:
        """Another version of NAME (local store, then the hub) whose precompile entries include one for this code
        digest, installed beside the restored one: each function of the cell takes the entry made for its code, and a
        colleague's variant of the cell, saved as a newer version, never makes the original's kernel compile. The
        files it installed are added to `beside`. Whether one was installed."""
        if not opts.restore or opts.version is not None:  # a pinned version is the only one
            return False
        stores = self.stores
        tried = self._alternates.setdefault(name, set())  # installed beside it already in this kernel
        roots = capture.cache_roots()

        def wanted(manifest: Manifest) -> bool:  # not tried yet, with an entry for this code
            functions = manifest.stats.get("functions")
            if manifest.version in tried or manifest.version == installed or not isinstance(functions, dict):
                return False
            return any(isinstance(f, dict) and f.get("digest") == digest for f in functions.values())

        def install(manifest: Manifest, payload: IO[bytes]) -> list[str]:
            paths = bundle.extract(
                payload,
                manifest,
                roots,
                None,
                lambda m: alternate_member(m, manifest.version),
                layers.is_compile_result,
            )
            if beside is not None:
                beside.extend(paths)
            return paths

        hub = stores.hub_policy.for_cell(opts)  # None while it is being left alone after a failure
        try:
            found = stores.search.newest(name, stores.store(opts.store_dir), hub, wanted=wanted, install=install)
        except Exception as exc:  # the restored version stands; this function compiles as plain torch.compile would
            self.tell(events.StepFailed(events.Step.FIND_ELSEWHERE, Failure.of(exc), name))
            return False
        for problem in found.problems:  # a manifest the store could not read (the restore told the rest)
            self.tell(events.ManifestQuarantined(problem))
        if found.manifest is None:
            return False
        tried.add(found.manifest.version)
        return True
