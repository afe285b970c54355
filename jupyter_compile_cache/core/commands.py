"""What the front ends do besides running a cell: `status`, `list`, `explain`, `stats`, `push`, `rm`, `gc`, the hub's
own commands and the layer switches, over one session. The magics, the panel, the CLI and the Python API all call
these, and get typed records (records.py, errors.py) to show as they like.
"""

from __future__ import annotations

import contextlib
import os
import platform
import tarfile
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..storage.backends.https import INDEX, write_index
from ..storage.backends.url import redact
from ..storage.bundle import BundleError, Manifest, check_name, short_id
from ..storage.hub import HubError, HubRefused
from ..storage.sources import HubSource, LocalSource, Progress, Source
from . import events
from .errors import NoHub, NotFound, NothingFits
from .machine_fit import MachineFit
from .options import CellOptions, GcOptions, RemoveOptions, writer
from .plans import NotebookPlan
from .records import (
    BundleExplanation,
    BundleRow,
    Configuration,
    DeviceSummary,
    Exported,
    HubCheck,
    HubListing,
    HubState,
    Imported,
    LayerState,
    Pulled,
    Pushed,
    PushedAll,
    Refusal,
    Removed,
    SessionStatus,
    Setting,
    StoreStatistics,
    SwitchScope,
    TimeSaved,
    VersionFit,
    WarmTemplate,
)
from .store_session import StoreSession
from .version_rows import bundle_row, functions_against, hub_where, store_where, version_named

if TYPE_CHECKING:
    from ..torch_adapter import layers
    from . import notebook
    from .session import CompileCacheSession

# What a command can fail with, for a front end to tell in one line: bad input (ValueError), a store or file that
# cannot be read or written (OSError), a bundle file that is not one (BundleError, TarError), a hub that fails.
COMMAND_ERRORS: tuple[type[Exception], ...] = (ValueError, OSError, BundleError, tarfile.TarError, HubError)


class Commands:
    """Over the kernel's session, or over a `StoreSession` alone where no cell runs (the CLI's listings): what is
    asked of the compiler (`status`, the layer switches, `device`) needs the kernel's session and imports torch's
    side only then, so a listing imports nothing of torch_adapter/ but the machine's fingerprint."""

    def __init__(self, session: StoreSession) -> None:
        self.session = session
        self.settings = session.settings

    @property
    def kernel(self) -> CompileCacheSession:
        """The kernel's session, for the commands that ask the compiler."""
        from .session import CompileCacheSession

        if not isinstance(self.session, CompileCacheSession):
            raise TypeError("this command needs the kernel's session (CompileCacheSession), not StoreSession alone")
        return self.session

    # -- views ----------------------------------------------------------------------------------------------------
    def status(self, wait: bool = False, ping_hub: bool = True) -> SessionStatus:
        """Per-layer state: switch, env var, entries and bytes in torch's cache dir and in the local store, this
        kernel's hits / misses / bypasses. While torch's compiler still loads in the background, it answers at once
        with what is on disk (`wait`: for the whole picture); importing the compiler from two threads at once can
        break torch's imports. `ping_hub` False: the hub's state as last known, nothing asked of it."""
        from ..torch_adapter import capture, cell_snapshot, compiler, layers

        session = self.kernel
        loading = None if wait else session.prewarm.loading()
        if loading is None:
            session.prewarm.join()
        roots = capture.cache_roots()
        usage = layers.disk_usage(roots["inductor"])
        store = session.store()
        stored = store.bundles()
        in_store = layers.bundle_usage([(m.name, m.size) for b in stored for m in b.manifest.members])
        totals = cell_snapshot.session_counts() if loading is None else {}
        layer_states = []
        for layer in layers.LAYERS:
            counts = totals.get(layer.name, {})
            scope = self.switch_scope(layer) if loading is None else SwitchScope.LOADING
            on_disk = usage.get(layer.name, {})
            layer_states.append(
                LayerState(
                    layer=layer.name,
                    title=layer.title,
                    scope=scope,
                    enabled=scope not in ("off", "n/a", "loading"),
                    supported=layer.supported() if loading is None else True,
                    switch=".".join(layer.switch) if layer.switch else None,
                    env_var=layer.env_var,
                    env_value=os.environ.get(layer.env_var) if layer.env_var else None,
                    place=layer.place,
                    entries=on_disk.get("entries", 0),
                    bytes=on_disk.get("bytes", 0),
                    store_files=in_store[layer.name]["files"],
                    store_bytes=in_store[layer.name]["bytes"],
                    hits=counts.get("hits", 0),
                    misses=counts.get("misses", 0),
                    bypasses=counts.get("bypasses", 0),
                )
            )
        store_bytes = sum(b.manifest.payload_bytes for b in stored)  # as `list`, `stats` and the cap count them
        from ..kernels.kernel_start import this_kernel_start  # here: `list` and the CLI never need the kernels

        return SessionStatus(
            hub=session.hub_policy.state(ping=ping_hub),
            settings=self.settings.resolved(),
            kernel_start=this_kernel_start(),
            cache_dir=roots["inductor"],
            store_dir=store.root,
            store_bytes=store_bytes,
            max_bytes=self.settings.max_bytes,
            precompile_default=session.precompile_default,
            store_other_bytes=store_bytes - sum(state.store_bytes for state in layer_states),
            torch_remote=session.hub_policy.torch_remote,
            stale_rejected=compiler.stale_count() if loading is None else 0,
            precompile_fallbacks=compiler.fallback_count() if loading is None else 0,
            layers=layer_states,
            cells=list(session.history),
            compiler_loading=loading,
            notebook=session.notebook.plan,
            notebook_path=session.notebook.path,
            notebook_fetched=len(session.notebook.fetched),
            notebook_error=session.notebook.error,
        )

    def config(self, store_dir: str | None = None) -> Configuration:
        """Every setting in force and where it came from, the store (STORE_DIR's, or the session's) against its cap,
        the warm templates running."""
        from ..kernels import launcher, runtime_dir

        settings = self.session.settings
        rows = []
        for name, value in settings.resolved().items():
            shown = ("set" if value else "") if name == "secret" else redact(value) if name == "hub" else str(value)
            rows.append(Setting(name, shown, settings.origin(name)))
        store = self.session.store(store_dir)
        directory = runtime_dir.runtime_dir()
        templates = []
        for info in launcher.templates(directory) if directory else []:
            kernels = sum(runtime_dir.process_alive(pid) for pid in info.holders)
            age = time.time() - info.started
            rss, lifetime = runtime_dir.rss_bytes(info.pid), (info.idle_seconds, info.grace_seconds)
            templates.append(WarmTemplate(info.pid, info.python, rss, age, kernels, *lifetime))
        return Configuration(rows, store.root, store.usage()[0], settings.max_bytes, templates, directory)

    def hub_check(self, hub: HubSource) -> HubCheck:
        """HUB tried as a cell uses it: its answer, reading (every version listed, signatures checked against the
        team secret), and writing (a lease taken and given back at once, as a cell's single flight does)."""
        from ..storage.signing import SignatureError, check_signature

        state = HubState(url=hub.display_url, namespace=hub.namespace, signed=bool(hub.hub.config.secret))
        check = HubCheck(state, getattr(hub.hub.backend, "credential", None))
        try:
            state.latency_ms = hub.hub.ping() * 1000
            state.reachable, state.kind = True, hub.hub.backend.kind
            self.session.hub_policy.answered(hub.url)
            manifests, _refused = hub.hub.listing()
        except HubError as exc:
            state.reachable = state.reachable or False
            if isinstance(exc, HubRefused):
                check.read = str(exc)
            else:
                state.reachable, state.error = False, str(exc)
            return check
        check.versions = len(manifests)
        if hub.hub.config.secret is not None:
            good = 0
            for manifest in manifests:
                with contextlib.suppress(SignatureError):
                    check_signature(manifest, hub.hub.config.secret)
                    good += 1
            check.verified, check.unverified = good, len(manifests) - good
        lease = hub.hub.lease("jcc-check", "0" * 12, writer())
        try:
            if lease.acquire() is None:
                lease.release()
        except HubRefused as exc:
            check.write = str(exc)
        except HubError as exc:
            check.write = f"the lease was not taken: {exc}"
        return check

    def hub_state(self) -> HubState:
        """The hub, pinged now even if it failed a moment ago (`%compile_cache hub status`)."""
        return self.session.hub_policy.state(force=True)

    def bundles(
        self, store_dir: str | None = None, hub: bool = True, hub_url: str | None = None, namespace: str | None = None
    ) -> list[BundleRow]:
        """Local bundles, then the hub's (the configured one, or HUB_URL and NAMESPACE, when it answers; `hub`
        False: local ones only)."""
        local = list(self.session.store(store_dir).bundles())
        remote: list[Manifest] = []
        policy = self.session.hub_policy
        hub_source = policy.for_cell(CellOptions(hub=hub_url, namespace=namespace)) if hub else None
        if hub_source is not None:
            try:
                remote = self._hub_versions(hub_source)
            except HubError as exc:
                policy.failed(hub_source, exc, None)
        if not local and not remote:
            return []  # nothing to compare with this machine: torch is not imported (1.4 s)
        fit = MachineFit()  # the GPU is only asked (importing torch, 1.5 s) when a bundle holds GPU kernels
        rows = [bundle_row(b.manifest, fit, b.last_used, "local") for b in local]
        return rows + [bundle_row(m, fit, None, "hub") for m in remote]

    def explain(self, name: str, store_dir: str | None = None) -> BundleExplanation:
        """Field by field why each version of NAME would or would not restore here, and the last run's layers."""
        check_name(name)
        store = self.session.store(store_dir)
        manifests = store.versions(name)
        if not manifests:
            raise NotFound(name, store_where(store))
        fit = MachineFit()
        versions = []
        compiled = self.session.compiled_code()
        for m in manifests:
            verdict = fit.of(m)
            versions.append(
                VersionFit(
                    version=m.version,
                    bytes=m.payload_bytes,
                    files=len(m.members),
                    created=m.created,
                    writer=m.writer,
                    mismatches=verdict.mismatches,
                    fields=verdict.checks,
                    short_id=short_id(m.version),
                    functions=functions_against(m, compiled),
                )
            )
        return BundleExplanation(name, store.root, versions, store.last_run(name))

    def notebook_plan(self, path: str, parse: notebook.LineParser) -> NotebookPlan:
        """Cell by cell, whether Run All of the notebook at PATH (as last saved) will restore its bundles here, and
        why not; PARSE reads a `%%compile_cache` line (the magic's parser)."""
        if not os.path.isfile(path):
            raise ValueError(f"no notebook at {path}")
        from . import notebook

        cells, problems = notebook.read_cells(path, parse)
        return notebook.plan(self.session, os.path.abspath(path), cells, problems)

    def stats(self, store_dir: str | None = None, zero: bool = False) -> StoreStatistics:
        """The store's cumulative statistics with its size against the cap; `zero` starts them again (the returned
        figures are those before zeroing)."""
        store = self.session.store(store_dir)
        current = store.zero_stats() if zero else store.read_stats()
        size, versions, names = store.usage()
        return StoreStatistics(
            store_dir=store.root,
            since=current.since or None,
            counts=dict(current.counts),
            hit_rate=current.hit_rate,
            store_bytes=size,
            max_bytes=self.settings.max_bytes,
            versions=versions,
            bundles=names,
            zeroed=zero,
        )

    def device(self) -> DeviceSummary:
        """This kernel's GPU (name, compute capability, memory in use / total) or CPU (model, ISA)."""
        import torch

        from ..torch_adapter import fingerprint

        fp = fingerprint.current()
        versions = {"torch": fp["torch"], "triton": fp["triton"], "cuda": fp["cuda"], "hip": fp["hip"]}
        if torch.cuda.is_available():
            free, total = torch.cuda.mem_get_info()
            return DeviceSummary(
                "gpu", fp["gpu_name"], **versions, capability=fp["gpu_capability"], memory_used=total - free,
                memory_total=total,
            )  # fmt: skip
        return DeviceSummary("cpu", fp["cpu_model"] or platform.processor(), **versions, isa=fp["cpu_isa"])

    def time_saved(self) -> TimeSaved:
        """Estimated compile time saved: per restored cell (cold time in the bundle minus this run), per layer."""
        from ..torch_adapter import layers

        per_layer = {layer.name: 0.0 for layer in layers.LAYERS}
        cells = []
        for report in self.session.history:
            saving = report.saving()
            if saving is None:
                continue
            cells.append(saving)
            saved = saving.saved
            hits = {name: counts.get("hits", 0) for name, counts in report.layers.items()}
            total_hits = sum(hits.values())
            for name, count in hits.items():
                if total_hits:
                    per_layer[name] = per_layer.get(name, 0.0) + saved * count / total_hits
        return TimeSaved(per_layer, cells, sum(c.saved for c in cells))

    # -- changes --------------------------------------------------------------------------------------------------
    def push(
        self, name: str, hub: HubSource | None = None, progress: Progress | None = None, store_dir: str | None = None
    ) -> Pushed:
        """The newest local version of NAME onto HUB (default: the session's); NoHub, NotFound, or the HubError."""
        hub = hub or self.session.hub_policy.for_cell(CellOptions())
        if hub is None:
            raise NoHub()
        store = self.session.store(store_dir)
        versions = store.versions(check_name(name))
        if not versions:
            raise NotFound(name, store_where(store))
        start = time.perf_counter()
        pushed = hub.push(versions[0], store, progress)
        return Pushed(pushed, hub_where(hub), time.perf_counter() - start)

    def push_all(
        self, hub: HubSource, progress: Callable[[str], Progress] | None = None, store_dir: str | None = None
    ) -> PushedAll:
        """The newest local version of every name onto HUB, where the hub lacks it (a bundle saved before the hub was
        set, or while it was down); `progress(name)` gives each push's progress. A HubError stops it: what went up
        stays up."""
        store = self.session.store(store_dir)
        pushed, present = [], []
        for name in store.names():
            versions = store.versions(name)
            if not versions:
                continue
            if versions[0].version in {m.version for m in hub.versions(name)}:
                present.append(name)
                continue
            start = time.perf_counter()
            manifest = hub.push(versions[0], store, progress(name) if progress else None)
            pushed.append(Pushed(manifest, hub_where(hub), time.perf_counter() - start))
        return PushedAll(pushed, present, hub_where(hub))

    def publish(
        self, folder: str, progress: Callable[[str], Progress] | None = None, store_dir: str | None = None
    ) -> PushedAll:
        """The newest local version of every name into FOLDER (made if absent), laid out as a folder hub, with the
        listing a static server cannot make: served as it is, FOLDER is a read-only https:// hub. Signed with the
        team secret where one is set; kept for good."""
        folder = os.path.abspath(folder)
        os.makedirs(folder, exist_ok=True)
        hub = self.session.hub_policy.for_command(f"file://{folder}")
        if hub is None:  # a URL was named: never
            raise NoHub()
        published = self.push_all(hub, progress, store_dir)
        write_index(folder)
        published.listing = os.path.join(folder, INDEX)
        return published

    def remove(self, opts: RemoveOptions, hub: HubSource | None = None, yes: bool = True) -> Removed:
        """Delete NAME (one version, by an id or a prefix of one, or all) from the local store, or from HUB. On the
        team's hub, removing every version of NAME needs `yes`: without it, `refused` says so and nothing goes."""
        check_name(opts.name)
        if hub is not None:
            where = hub_where(hub)
            versions = [m.version for m in hub.versions(opts.name)]
            if not versions:
                raise NotFound(opts.name, where)
            version = version_named(opts.name, versions, opts.version, where)
            plan = hub.remove(opts.name, version, dry_run=True)
            if not (opts.dry_run or yes) and len(plan) >= len(versions):
                return Removed(where, plan, dry_run=True, refused=Refusal.EVERY_HUB_VERSION)
            return Removed(where, plan if opts.dry_run else hub.remove(opts.name, version), opts.dry_run)
        store = self.session.store(opts.store_dir)
        versions = [m.version for m in store.versions(opts.name)]
        if not versions:
            raise NotFound(opts.name, store_where(store))
        version = version_named(opts.name, versions, opts.version, store_where(store))
        return Removed(store_where(store), LocalSource(store).remove(opts.name, version, opts.dry_run), opts.dry_run)

    def gc(self, opts: GcOptions) -> Removed:
        """Evict versions unused for more than `older_than` seconds, those that cannot restore on this machine
        (`incompatible`: another torch, Python, GPU...), then the least recently used down to `max_size` (the
        default cap CompileCache.max_size when no other rule is given). A gc that would empty the store without
        `yes` removes nothing: `refused` says so, and `removals` is the plan."""
        store = self.session.store(opts.store_dir)
        max_size = opts.max_size
        if max_size is None and opts.older_than is None and not opts.incompatible:
            max_size = self.settings.max_bytes
        unusable = None
        if opts.incompatible:
            unusable = lambda m, fit=MachineFit(): not fit.fits(m)  # noqa: E731
        plan = store.gc(max_size, dry_run=True, older_than=opts.older_than, unusable=unusable)
        if opts.dry_run or not plan:
            return Removed(store_where(store), plan, opts.dry_run)
        if len(plan) == store.version_count() and not opts.yes:
            return Removed(store_where(store), plan, dry_run=True, refused=Refusal.EMPTIES_STORE)
        return Removed(
            store_where(store), store.gc(max_size, older_than=opts.older_than, unusable=unusable), dry_run=False
        )

    def export(self, name: str, path: str, store_dir: str | None = None) -> Exported:
        """The newest local version of NAME written to one file (storage/bundle_file.py)."""
        store = self.session.store(store_dir)
        versions = store.versions(check_name(name))
        if not versions:
            raise NotFound(name, store_where(store))
        from ..storage import bundle_file

        bundle_file.export_bundle(store, versions[0], path)
        return Exported(versions[0], path)

    def import_file(self, path: str, store_dir: str | None = None) -> Imported:
        """The version in a file made by `export`, into the local store (every member verified)."""
        from ..storage import bundle_file

        return Imported(*bundle_file.import_bundle(self.session.store(store_dir), path))

    # -- the hub's own commands (the CLI's `hub ...`: failures are raised as HubError, for the command to report) --
    def hub(self, url: str | None = None, namespace: str | None = None, ttl: int | None = None) -> HubSource | None:
        """The hub these options name, or the configured one; None when there is none."""
        return self.session.hub_policy.for_command(url, namespace, ttl)

    def _hub_versions(self, hub: HubSource) -> list[Manifest]:
        """The hub's versions this user may read; the names it may not are said once, never an error."""
        manifests, refused = hub.hub.listing()
        if refused:
            self.session.tell(events.NotListed(hub.where, tuple(refused)))
        return manifests

    def hub_bundles(self, hub: HubSource) -> HubListing:
        manifests = self._hub_versions(hub)
        fit = MachineFit()
        rows = [bundle_row(m, fit, None, "hub") for m in manifests]
        for row, manifest in zip(rows, manifests):  # a version whose chunks were evicted cannot be pulled: say so
            row.missing_chunks = hub.hub.missing_chunks(manifest)
        return HubListing(hub_where(hub), rows)

    def hub_pull(
        self,
        hub: HubSource,
        name: str,
        progress: Callable[[Source, Manifest], Progress | None] | None = None,
        store_dir: str | None = None,
    ) -> Pulled:
        """The newest version of NAME on HUB that fits this machine, into the local store (verified); NothingFits
        (why each version was skipped, and whether they were signed with another secret) when there is none."""
        store = self.session.store(store_dir)
        search = self.session.search
        found = search.newest(check_name(name), store, hub, local=False, progress=progress, on_down="raise")
        if found.manifest is None:
            raise NothingFits(name, hub_where(hub), list(found.skipped), bool(found.wrong_signatures))
        # the speed of the transfer itself (the search's fetch of this version), not of listing and checking first
        return Pulled(found.manifest, store.root, found.fetch_seconds, list(found.skipped))

    def hub_gc(self, hub: HubSource, keep: int, dry_run: bool = False) -> Removed:
        """Keep the newest KEEP versions of each name and machine on HUB; delete the rest."""
        return Removed(hub_where(hub), hub.gc(keep, dry_run=dry_run), dry_run)

    # -- layer switches -------------------------------------------------------------------------------------------
    def set_layer(self, layer_name: str, enabled: bool) -> layers.Layer:
        """Switch one of torch's cache layers. Dynamo precompile drops identity guards that only our cells put
        back, so it is switched for `%%compile_cache` cells alone (CompileCache.precompile) and torch's global
        `caching_precompile` is never left on; the other layers are torch's own switches for the whole kernel."""
        from ..torch_adapter import layers
        from ..torch_adapter.precompile import PrecompileGuard

        self.kernel.prewarm.join()
        layer = layers.resolve(layer_name)
        if layer.name == "dynamo_precompile":
            if enabled and not PrecompileGuard.available():  # disabling it is always allowed: a no-op there
                raise ValueError(
                    "Dynamo precompile is not used with this torch (it needs torch's caching_precompile switch "
                    "and torch 2.11 or newer)"
                )
            self.settings.precompile = enabled
        else:
            layer.set_switch(enabled)
        return layer

    def layer_names(self) -> list[str]:
        from ..torch_adapter import layers

        return [layer.name for layer in layers.LAYERS]

    def switch_scope(self, layer: layers.Layer) -> SwitchScope:
        """Where LAYER applies now."""
        if not layer.supported():
            return SwitchScope.NOT_AVAILABLE
        if layer.name == "dynamo_precompile":
            if layer.switch_value():  # torch's own switch, set outside us (TORCH_CACHING_PRECOMPILE=1, say)
                return SwitchScope.EVERYWHERE
            return SwitchScope.CELLS if self.kernel.precompile_default else SwitchScope.OFF
        if layer.switch is None:
            return SwitchScope.KERNEL
        return SwitchScope.KERNEL if layer.switch_value() else SwitchScope.OFF
