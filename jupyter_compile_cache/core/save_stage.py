"""A cell's save stage and its ending. `save`: what it recorded, written as a new version of NAME in the local store
(least recently used versions evicted past the size cap), then pushed to the hub by the policy. `publish_restored`:
a version restored from the local store goes up where the hub has none of NAME for this machine, so a bundle saved
before the hub was set reaches the team. `end`: every
cell's ending, whether its body ran to the end or raised: its run kept in the store it named, the statistics
counted, its line told."""

from __future__ import annotations

import contextlib
import time

from ..failure import Failure
from ..storage.bundle import Manifest
from ..storage.hub import HubError
from ..storage.run_builds import RunBuilds
from ..storage.signing import SignatureError, check_signature
from ..storage.sources import HubSource
from ..storage.store import LocalStore
from ..torch_adapter import fingerprint, layers
from ..torch_adapter.entry_records import saved_functions
from . import events
from .options import CellOptions, writer
from .record_stage import Recorded
from .records import CellReport
from .store_session import StoreSession


class SaveStage:
    """A cell's save stage (`save`) and every cell's ending (`end`)."""

    def __init__(self, stores: StoreSession) -> None:
        self.stores = stores
        self.tell = stores.tell  # what happens, to the front end
        self.transfer = stores.transfer  # a save's or a push's progress, shown by the front end
        self._stats_failed = False  # a store that cannot take the statistics is told once a session
        self._published: set[tuple[str, str, str, str]] = set()  # (hub, namespace, name, version) asked this session

    def save(self, name: str, recorded: Recorded, report: CellReport, opts: CellOptions, hub: HubSource | None) -> None:
        """A new version of NAME from what the cell recorded: the local store, then the hub. A failure is told; the
        cell's result stands."""
        stores = self.stores
        store = stores.store(opts.store_dir)
        cell_files = recorded.files
        stats = {
            "body_seconds": report.body_seconds,
            "layers": report.layers,
            "layer_bytes": cell_files.layer_bytes(),
        }
        functions = saved_functions(recorded.precompile_keys) if recorded.precompile else {}
        if functions:  # which code each precompile entry is for: another kernel finds the version that fits its code
            stats["functions"] = functions
        if opts.source_digest:  # the notebook's plan compares it with the saved cell's body
            stats["cell_digest"] = opts.source_digest
        now = fingerprint.current()
        manifest = Manifest.new(name, now, fingerprint.digest(now), writer(), stats)
        start = time.perf_counter()
        bar = self.transfer(events.Moving.SAVE, name, opts.quiet)
        try:
            manifest = store.write(manifest, cell_files.files, bar)
        except OSError as exc:
            report.save_failed = True
            self.tell(events.StepFailed(events.Step.SAVE, Failure.of(exc), name, store.root, exc.errno), report)
            return
        finally:
            bar.close()
        report.saved_version = manifest.version
        report.saved_bytes = manifest.payload_bytes
        report.saved_files = len(manifest.members)
        report.save_seconds = time.perf_counter() - start
        self.enforce_size_cap(store, report, opts.quiet)
        if hub is not None and report.restore is not None and report.restore.hub_signed_elsewhere:
            # The team's versions of NAME did not verify with our secret: a version signed with it would be refused
            # by the team in turn. Most likely our secret is not the team's.
            self.tell(events.NotPushedSignedElsewhere(name), report)
            return
        if hub is None:
            return
        if report.push_left_to is not None:  # a collaborator compiled NAME at the same time: one version goes up
            started = time.time() - report.body_seconds - report.save_seconds - 60  # 60: clocks of two machines
            report.push_left_to = stores.hub_policy.push_left_to(hub, name, manifest.fingerprint_id, started)
        if report.push_left_to is None:
            stores.hub_policy.push(hub, store, manifest, report, self.transfer(events.Moving.PUSH, name, opts.quiet))

    def keep(self, name: str, recorded: Recorded, report: CellReport, opts: CellOptions, hub: HubSource | None) -> None:
        """What a cell recorded: a new version of NAME where it compiled something (or `--force-save`, or NAME has
        none and torch's own cache held its graphs), else the kernels it tuned again beside the bundles; then a
        restored version the hub lacks goes up."""
        first = recorded.used_warm_cache and not self.stores.store(opts.store_dir).versions(name)
        if opts.save and recorded.files.files and (recorded.compiled_new or opts.force_save or first):
            self.save(name, recorded, report, opts, hub)
        elif opts.save and report.kernels_retuned:  # no new version: kept beside the bundles
            self.keep_run_builds(name, recorded, report, opts)
        self.publish_restored(name, report, opts, hub)

    def publish_restored(self, name: str, report: CellReport, opts: CellOptions, hub: HubSource | None) -> None:
        """The version the cell restored from the local store, pushed to HUB if it has no version of NAME for this
        machine (asked once a session per version): a copy the hub's single flight kept local, compiled beside the
        version the hub got, stays local. A version the cell saved was pushed by `save` already."""
        restore = report.restore
        if hub is None or not opts.save or restore is None or restore.source != "local" or report.saved_version:
            return
        asked = (hub.url, hub.namespace, name, restore.version or "")
        if asked in self._published:
            return
        self._published.add(asked)
        policy = self.stores.hub_policy
        store = self.stores.store(opts.store_dir)
        manifest = next((m for m in store.versions(name) if m.version == restore.version), None)
        if manifest is None:
            return
        try:
            if hub.hub.holds(manifest):
                return
            on_hub = hub.versions(name)
        except HubError as exc:
            policy.failed(hub, exc, report)
            return
        if on_hub and not any(_signed_with(m, hub.hub.config.secret) for m in on_hub):
            self.tell(events.NotPushedSignedElsewhere(name), report)  # our secret is most likely not the team's
            return
        if any(m.fingerprint_id == manifest.fingerprint_id for m in on_hub):  # the team's copy for this machine
            return
        policy.push(hub, store, manifest, report, self.transfer(events.Moving.PUSH, name, opts.quiet))

    def keep_run_builds(self, name: str, recorded: Recorded, report: CellReport, opts: CellOptions) -> None:
        """The Triton kernels that torch's run-time tuning built in the processes a restored cell started, kept on
        this machine for NAME's next restore (storage/run_builds.py); a failure is told, the cell's result stands."""
        store = self.stores.store(opts.store_dir)
        try:
            report.run_builds_kept = RunBuilds(store.root).keep(name, recorded.files.created_files)
        except OSError as exc:
            self.tell(events.StepFailed(events.Step.RUN_BUILDS, Failure.of(exc), name, store.root), report)

    def enforce_size_cap(self, store: LocalStore, report: CellReport, quiet: bool) -> None:
        """Evict least recently used versions past `CompileCache.max_size`, after taking torch's build aids out of
        any version that holds them."""
        cap = self.stores.settings.max_bytes
        try:
            removals = store.gc(cap, keep=layers.is_compile_result)
        except OSError as exc:
            self.tell(events.StepFailed(events.Step.EVICT, Failure.of(exc), where=store.root), report)
            return
        slimmed = [r for r in removals if r.kept is not None]
        if slimmed:
            self.tell(events.BuildAidsRemoved(len(slimmed), sum(r.bytes for r in slimmed)), report, quiet)
        evicted = [r for r in removals if r.kept is None]
        if evicted:
            names = tuple(sorted({r.name for r in evicted}))
            self.tell(events.Evicted(len(evicted), names, cap), report, quiet)

    def end(self, report: CellReport, opts: CellOptions) -> None:
        """Every cell's ending, whether its body ran to the end or raised: its run kept (in the store it named), the
        statistics counted, its line told."""
        stores = self.stores
        report.finished = time.time()
        stores.history.append(report)
        store = stores.store(opts.store_dir)
        if report.ok:
            with contextlib.suppress(OSError):
                store.save_run(report.name, report.to_json())
        try:  # statistics are worth a cell's nothing: a store that cannot take them is left as it is
            store.add_stats(report.stats_outcome())
        except Exception as exc:  # statistics must never break a cell
            if not self._stats_failed:
                self._stats_failed = True
                self.tell(events.StepFailed(events.Step.STATISTICS, Failure.of(exc)))
        self.tell(events.CellFinished(report), None, opts.quiet)


def _signed_with(manifest: Manifest, secret: bytes | None) -> bool:
    try:
        check_signature(manifest, secret)
        return True
    except SignatureError:
        return False
