"""What a `%%compile_cache` cell and the commands did, and the state they show: the plain records the session hands
to the magics, the panel, the CLI and scripts (what they are asked: options.py; a bundle not found: errors.py;
what Run All will do: plans.py). No behaviour, so every layer can import it."""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from ..failure import Failure

# The records of the layers below that the front ends word, handed on here: a front end imports core only.
from ..kernels.kernel_start import Cold as Cold
from ..kernels.kernel_start import KernelStart
from ..kernels.kernel_start import Next as Next
from ..kernels.protocol import FIT_TROUBLES as FIT_TROUBLES
from ..kernels.protocol import TemplateProblem as TemplateProblem
from ..kernels.protocol import TemplateTrouble as TemplateTrouble
from ..storage.backends.url import redact as redact
from ..storage.bundle import FieldMismatch, Manifest
from ..storage.bundle import short_id as short_id
from ..storage.sources import Place, Skip
from ..storage.sources import SkipKind as SkipKind
from ..storage.store import RUN_BUILDS as RUN_BUILDS  # a Removal of kernels built at run time
from ..storage.store import Removal
from ..storage.store import UnreadableManifest as UnreadableManifest
from .plans import NotebookPlan

if TYPE_CHECKING:  # the torch adapter's records: not imported for a listing
    from ..torch_adapter.miss_reasons import MissReason
    from ..torch_adapter.process_hook import ProcessesShare


class Refusal(str, enum.Enum):
    """A removal left undone until the user says --yes."""

    EMPTIES_STORE = "empties_store"  # a gc would remove every version in the store
    EVERY_HUB_VERSION = "every_hub_version"  # removing every version of a name from the team's hub


@dataclass
class Removed:
    """What a delete removed (with `dry_run`, would remove) from `where`; `refused`: why it removed nothing."""

    where: Place
    removals: list[Removal]
    dry_run: bool
    refused: Refusal | None = None


@dataclass
class Imported:
    manifest: Manifest
    new: bool  # False: the store held this version already


@dataclass
class Exported:
    manifest: Manifest
    path: str


@dataclass
class Pushed:
    """A version put on the hub `where`, and how long the transfer took."""

    manifest: Manifest
    where: Place
    seconds: float


@dataclass
class PushedAll:
    """`hub push --all`: the newest local version of each name that the hub `where` lacked, put there, and the names
    whose newest version it had already."""

    pushed: list[Pushed]
    present: list[str]
    where: Place
    listing: str | None = None  # `hub publish`: the listing written for a static server


@dataclass
class Pulled:
    """The newest version that fits this machine, pulled from the hub into the local store `store_dir` (`seconds`: the
    transfer itself); `skipped`: why newer versions were not taken."""

    manifest: Manifest
    store_dir: str
    seconds: float
    skipped: list[Skip] = field(default_factory=list)


@dataclass
class RestoreResult:
    name: str
    source: str | None = None  # "local", "hub"; None when nothing was restored
    version: str | None = None
    files: int = 0
    bytes: int = 0
    seconds: float = 0.0
    skipped: list[Skip] = field(default_factory=list)  # the versions not used, and why
    uses_cpu_kernels: bool = False
    hub_url: str | None = None  # redacted
    pull_seconds: float = 0.0
    cold_seconds: float | None = None  # the cold run's time, recorded in the restored version
    hub_signed_elsewhere: bool = False  # every hub version seen was refused as signed with another secret
    retries: int = 0  # hub connections that broke on the way and were opened again (the restore went on)
    run_builds: int = 0  # files of kernels built at run time after earlier restores, installed from this machine

    @property
    def restored(self) -> bool:
        return self.source is not None


@dataclass
class CellReport:
    name: str
    ok: bool = True
    job_status: int | None = None  # `run`'s command exited with this status (not 0: the cell is not ok)
    restore: RestoreResult | None = None
    saved_version: str | None = None
    saved_bytes: int = 0
    saved_files: int = 0
    save_seconds: float = 0.0  # writing the bundle into the local store
    save_failed: bool = False  # a save was due and failed (the warning says why)
    pushed: bool = False
    push_seconds: float = 0.0
    # who held NAME's lease on the hub while this cell compiled it too: their bundle goes to the hub, not this one
    push_left_to: str | None = None
    body_seconds: float = 0.0
    # waiting for torch's compiler stack to import (and, for C++ kernels, the CPU probe): once per process
    waited_seconds: float = 0.0
    staged_wait_seconds: float = 0.0  # waiting for this cell's own bundle, fetched from the hub at kernel start
    source_digest: str | None = None  # the cell body's identity, when a notebook's magic ran it
    layers: dict[str, dict[str, int]] = field(default_factory=dict)  # hits/misses/bypasses/written per layer
    stale_rejected: int = 0
    precompile_fallbacks: int = 0  # functions whose precompile failed in torch and ran the plain way
    processes: int = 0  # processes the cell started (torchrun, a launcher, `!cmd`)
    compiled_elsewhere: int = 0  # new files those processes (or theirs) compiled into the caches
    # what the processes it started counted and, with --precompile-processes, did with precompile (their own records)
    processes_share: ProcessesShare | None = None
    kernels_retuned: int = 0  # after a restore, new kernel builds of theirs that torch's run-time tuning made
    run_builds_kept: int = 0  # of their Triton folders, those kept on this machine for NAME's next restore
    miss_reasons: list[MissReason] = field(default_factory=list)  # after a restore, why functions compiled
    warnings: list[Any] = field(default_factory=list)  # the warning events (core.events) told during the cell
    finished: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """The report as JSON data (kept with the store as the cell's last run): each warning with its event's
        type."""
        data = asdict(self)
        if data["processes_share"] is not None:  # the files they read are the bundle's, not the run's
            data["processes_share"]["used"] = len(data["processes_share"]["used"])
        data["miss_reasons"] = [reason.to_json() for reason in self.miss_reasons]
        data["warnings"] = [{"event": type(event).__name__, **asdict(event)} for event in self.warnings]
        return data

    def saving(self) -> CellSaving | None:
        """A restored cell's compile time saved: the cold time recorded in its bundle against this run, the restore
        (and its pull) included; None when the cell restored nothing, failed, or its bundle recorded no cold time."""
        restore = self.restore
        if not (self.ok and restore and restore.restored) or restore.cold_seconds is None:
            return None
        restored = self.body_seconds + restore.seconds + restore.pull_seconds
        return CellSaving(self.name, restore.cold_seconds, restored, max(0.0, restore.cold_seconds - restored))

    def stats_outcome(self) -> dict[str, float]:
        """What one cell adds (the cold time of a restored bundle comes with its restore record)."""
        restore = self.restore if self.ok and self.restore is not None and self.restore.restored else None
        hits = sum(counts.get("hits", 0) for counts in self.layers.values())
        misses = sum(counts.get("misses", 0) for counts in self.layers.values())
        saving = self.saving()
        saved = saving.saved if saving is not None else 0.0
        return {
            "cells": 1,
            "cells_failed": 0 if self.ok else 1,
            "restored_local": 1 if restore is not None and restore.source == "local" else 0,
            "restored_hub": 1 if restore is not None and restore.source == "hub" else 0,
            "compiled": 1 if misses else 0,
            "hits": hits,
            "misses": misses,
            "stale_rejected": self.stale_rejected,
            "precompile_fallbacks": self.precompile_fallbacks,
            **{f"missed_{kind}": n for kind, n in Counter(reason.kind for reason in self.miss_reasons).items()},
            "restored_bytes": restore.bytes if restore is not None else 0,
            "saved_bundles": 1 if self.saved_version else 0,
            "saved_bytes": self.saved_bytes if self.saved_version else 0,
            "pushed": 1 if self.pushed else 0,
            "seconds_saved": saved,
        }


# -- what the front ends show: status, list, explain, stats ---------------------------------------------------------
class SwitchScope(str, enum.Enum):
    """Where one of torch's cache layers applies now."""

    OFF = "off"
    NOT_AVAILABLE = "n/a"  # this torch has no such layer
    CELLS = "cells"  # only while a %%compile_cache cell runs (Dynamo precompile)
    KERNEL = "kernel"  # this kernel
    EVERYWHERE = "everywhere"  # torch's own switch, set outside us
    LOADING = "loading"  # torch's compiler is still loading: not asked yet


@dataclass
class LayerState:
    """One of torch's cache layers in this kernel: its switch, what is on disk, what this kernel counted."""

    layer: str
    title: str
    scope: SwitchScope
    enabled: bool
    supported: bool
    switch: str | None  # torch's config switch, dotted; None when always on
    env_var: str | None
    env_value: str | None
    place: str
    entries: int = 0
    bytes: int = 0  # in torch's cache dir, this layer's folders
    store_files: int = 0  # in the local store's bundles (every version), each file in one layer
    store_bytes: int = 0
    hits: int = 0
    misses: int = 0
    bypasses: int = 0


@dataclass
class HubState:
    """The session's hub, as `status` and the panel show it; url None: no hub configured."""

    url: str | None = None  # redacted
    namespace: str | None = None
    signed: bool = False
    reachable: bool | None = None
    kind: str | None = None  # the backend: "redis", "redis cluster", "folder"
    latency_ms: float | None = None
    error: str | None = None


@dataclass
class HubCheck:
    """`hub check` (and `hub status`): the hub tried as a cell would use it. `read` and `write`: None where allowed,
    else the refusal's words (write: not asked where reading failed); `verified` and `unverified`: of the versions
    listed, how many carry the team secret's signature and how many do not (None: no secret set)."""

    state: HubState
    credential: str | None = None  # what supplied the credential (an object store's), None where the URL does
    versions: int = 0
    read: str | None = None
    write: str | None = None
    verified: int | None = None
    unverified: int | None = None


@dataclass
class SessionStatus:
    hub: HubState
    settings: dict[str, Any]
    kernel_start: KernelStart  # forked from a warm template, or cold and why
    cache_dir: str
    store_dir: str
    store_bytes: int
    max_bytes: int
    precompile_default: bool
    store_other_bytes: int  # the store's bytes no layer holds (bookkeeping files): layers + this = the total
    torch_remote: str | None  # the hub torch's own Redis caches use since a --torch-remote cell
    stale_rejected: int
    precompile_fallbacks: int
    layers: list[LayerState]
    cells: list[CellReport]
    # Seconds torch's compiler has been loading in the background, when `status` answered without waiting for it:
    # the layers then show what is on disk only (switches and counters need the compiler; nothing compiled yet).
    compiler_loading: float | None = None
    notebook: NotebookPlan | None = None  # the kernel's notebook, once its bundles are staged
    notebook_path: str | None = None  # known, though its plan may still be in the making
    notebook_fetched: int = 0  # bundles pulled from the hub ahead of their cells
    notebook_error: Failure | None = None  # why the staging stopped early (its cells fetch their own bundles)
    time_saved: TimeSaved | None = None  # this kernel's estimate


@dataclass
class Setting:
    """One setting in force: its value as shown (the secret never: "set" or ""; a hub's password hidden) and where it
    came from (`CompileCache.origin`)."""

    name: str
    value: str
    origin: str


@dataclass
class WarmTemplate:
    """A warm kernel template running for this user: its process, memory, age and the kernels forked from it that
    still run."""

    pid: int
    python: str
    rss_bytes: int | None
    age_seconds: float
    kernels: int
    idle_seconds: float = 0.0  # it retires after this long without a start (0: never)
    grace_seconds: float = 0.0  # and this long after the last process that launched from it ended


@dataclass
class Configuration:
    """`config` (the CLI's `status`): every setting in force and where it came from, the local store's size against
    its cap, and the warm templates running."""

    settings: list[Setting]
    store_dir: str
    store_bytes: int
    max_bytes: int
    templates: list[WarmTemplate]
    runtime_dir: str | None
    warming: list[WarmingTemplate] = field(default_factory=list)


@dataclass
class WarmingTemplate:
    """A warm kernel template still warming up: kernels started meanwhile start cold, and the next one after it is
    ready is forked. `step`: "quiet" (waiting for a quiet machine, at most `quiet_wait` s), "importing" (on idle CPU
    time) or "importing_busy" (at a low priority: the machine stayed busy)."""

    pid: int
    rss_bytes: int | None
    age_seconds: float
    step: str
    quiet_wait: float


@dataclass
class HubListing:
    """The hub's versions (`hub ls`), with where they are: the hub's URL and namespace."""

    where: Place
    rows: list[BundleRow]


@dataclass
class BundleRow:
    """One version of a bundle, in the local store or on the hub (`where`: 'local' or 'hub')."""

    name: str
    version: str
    short_id: str  # what people see and type (storage.bundle.short_id)
    bytes: int
    files: int
    created: float
    last_used: float | None
    writer: str
    where: str
    compatible: bool  # restores on this machine (same torch, Python, GPU...)
    fingerprint_id: str
    mismatches: tuple[FieldMismatch, ...] = ()  # why it does not restore here (none: it does)
    missing_chunks: int = 0  # a hub version's chunks that are gone (evicted, expired): it cannot be pulled


@dataclass
class VersionFit:
    """Field by field, whether one version would restore here (no `mismatches`: it would)."""

    version: str
    bytes: int
    files: int
    created: float
    writer: str
    mismatches: tuple[FieldMismatch, ...]  # why it would not restore here (none: it would)
    fields: list[Any]  # fingerprint.FieldCheck
    short_id: str = ""
    # The functions its precompile entries are for, each with "this kernel's code", "other code than this kernel's"
    # or "not compiled in this kernel yet"; None: saved before versions listed them.
    functions: list[tuple[str, str]] | None = None

    @property
    def other_code(self) -> list[str]:
        """Functions this kernel compiled whose code differs from the version's entries (and none of them matches)."""
        verdicts = dict(self.functions or ())
        if THIS_CODE in verdicts.values():
            return []
        return [function for function, verdict in verdicts.items() if verdict == OTHER_CODE]


THIS_CODE, OTHER_CODE, NOT_COMPILED = "this kernel's code", "other code than this kernel's", "not compiled here yet"


@dataclass
class BundleExplanation:
    name: str
    store_dir: str
    versions: list[VersionFit]
    last_run: dict[str, Any] | None  # the last run's CellReport, as saved with the store


@dataclass
class StoreStatistics:
    """A store's cumulative statistics (storage/stats.py) with its size against the cap."""

    store_dir: str
    since: float | None
    counts: dict[str, float]
    hit_rate: float | None
    store_bytes: int
    max_bytes: int
    versions: int
    bundles: int
    zeroed: bool

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        return {**{k: v for k, v in data.items() if k != "counts"}, **data["counts"]}


@dataclass
class DeviceSummary:
    """The GPU (name, compute capability, memory in use) or the CPU (model, vector ISA), with the versions."""

    kind: str  # 'gpu' or 'cpu'
    name: str | None
    torch: str
    triton: str | None
    cuda: str | None
    hip: str | None
    capability: str | None = None
    memory_used: int = 0
    memory_total: int = 0
    isa: str | None = None


@dataclass
class CellSaving:
    """One restored cell: its cold time (recorded in the bundle) against this run, the restore included."""

    name: str
    cold: float
    restored: float
    saved: float


@dataclass
class TimeSaved:
    """Estimated compile time saved this session, per restored cell and split over the layers that hit."""

    per_layer: dict[str, float]
    cells: list[CellSaving]
    total: float
