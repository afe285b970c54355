"""What the front ends do besides running a cell: `status`, `list`, `explain`, `stats`, `push`, `rm`, `gc`, the hub's
own commands and the layer switches, over one session. The magics, the panel, the CLI and the Python API all call
these, and get typed records (records.py, errors.py) to show as they like.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tarfile
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..storage.backends.https import INDEX, write_index
from ..storage.backends.url import redact
from ..storage.bundle import BundleError, Manifest, check_name, short_id
from ..storage.hub import HubError, HubRefused
from ..storage.sources import HubSource, LocalSource, Progress, Source
from ..storage.store import Removal
from . import events
from .compiler_commands import CompilerCommands
from .errors import NoHub, NotANotebook, NotFound, NothingFits
from .machine_fit import MachineFit
from .options import CellOptions, GcOptions, RemoveOptions, writer
from .plans import NotebookPlan, PlanTrouble
from .records import (
    BundleExplanation,
    BundleRow,
    Configuration,
    Exported,
    HubCheck,
    HubListing,
    HubState,
    Imported,
    Pulled,
    Pushed,
    PushedAll,
    Refusal,
    Removed,
    Setting,
    StoreStatistics,
    VersionFit,
    WarmingTemplate,
    WarmTemplate,
)
from .version_rows import bundle_row, functions_against, hub_where, store_where, version_named

if TYPE_CHECKING:
    from . import notebook

# What a command can fail with, for a front end to tell in one line: bad input (ValueError), a store or file that
# cannot be read or written (OSError), a bundle file that is not one (BundleError, TarError), a hub that fails.
COMMAND_ERRORS: tuple[type[Exception], ...] = (ValueError, OSError, BundleError, tarfile.TarError, HubError)


class Commands(CompilerCommands):
    """Over the kernel's session, or over a `StoreSession` alone where no cell runs (the CLI's listings): what is
    asked of the compiler (compiler_commands.py) needs the kernel's session, so a listing imports nothing of
    torch_adapter/ but the machine's fingerprint."""

    # -- views ----------------------------------------------------------------------------------------------------
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
        warming = [
            WarmingTemplate(w.pid, runtime_dir.rss_bytes(w.pid), time.time() - w.since, w.step.value, w.quiet_wait)
            for w in (launcher.warming_templates(directory) if directory else [])
        ]
        return Configuration(rows, store.root, store.usage()[0], settings.max_bytes, templates, directory, warming)

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
            raise NotFound(name, store_where(store), store.names())
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
            raise FileNotFoundError(errno.ENOENT, "no notebook at this path", path)
        from . import notebook

        cells, problems = notebook.read_cells(path, parse)
        unreadable = [p for p in problems if p.trouble is PlanTrouble.UNREADABLE_NOTEBOOK]
        if unreadable:  # its plan of nothing would be no answer
            raise NotANotebook(path, unreadable[0].detail)
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
            raise NotFound(name, store_where(store), store.names())
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
                raise NotFound(opts.name, where, hub.names())
            version = version_named(opts.name, versions, opts.version, where)
            plan = hub.remove(opts.name, version, dry_run=True)
            if not (opts.dry_run or yes) and len(plan) >= len(versions):
                return Removed(where, plan, dry_run=True, refused=Refusal.EVERY_HUB_VERSION)
            return Removed(where, plan if opts.dry_run else hub.remove(opts.name, version), opts.dry_run)
        store = self.session.store(opts.store_dir)
        versions = [m.version for m in store.versions(opts.name)]
        if not versions:
            raise NotFound(opts.name, store_where(store), store.names())
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

        from ..torch_adapter import layers  # here: `list` and the other commands import none of the torch adapter

        def gc(dry_run: bool) -> list[Removal]:
            return store.gc(max_size, dry_run, opts.older_than, unusable, keep=layers.is_compile_result)

        plan = gc(dry_run=True)
        if opts.dry_run or not plan:
            return Removed(store_where(store), plan, opts.dry_run)
        if sum(r.kept is None for r in plan) == store.version_count() and not opts.yes:
            return Removed(store_where(store), plan, dry_run=True, refused=Refusal.EMPTIES_STORE)
        return Removed(store_where(store), gc(dry_run=False), dry_run=False)

    def export(self, name: str, path: str, store_dir: str | None = None) -> Exported:
        """The newest local version of NAME written to one file (storage/bundle_file.py)."""
        store = self.session.store(store_dir)
        versions = store.versions(check_name(name))
        if not versions:
            raise NotFound(name, store_where(store), store.names())
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
        if found.manifest is None and not found.skipped and not found.wrong_signatures:
            raise NotFound(name, hub_where(hub), hub.names())
        if found.manifest is None:
            raise NothingFits(name, hub_where(hub), list(found.skipped), bool(found.wrong_signatures))
        # the speed of the transfer itself (the search's fetch of this version), not of listing and checking first
        return Pulled(found.manifest, store.root, found.fetch_seconds, list(found.skipped))

    def hub_gc(
        self, hub: HubSource, keep: int, dry_run: bool = False, progress: Callable[[Manifest], Progress] | None = None
    ) -> Removed:
        """Keep the newest KEEP versions of each name and machine on HUB; delete the rest, and torch's build aids
        from those kept (bundles saved before they were left out; each rewrite shown by `progress(manifest)`)."""
        from ..torch_adapter import layers

        return Removed(hub_where(hub), hub.gc(keep, dry_run, layers.is_compile_result, progress), dry_run)
