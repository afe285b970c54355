"""What the session tells the user, as typed records handed to a reporter that the front end supplies.

Events carry data only. The front ends word them (frontends/event_wording.py: one sentence per kind of event, so the
magic's line, the CLI's stderr and the panel say the same thing with the same figures). Core and storage never
print: with no front end attached (a library user's script), events go to the `jupyter_compile_cache` logger as
records.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Protocol

from ..failure import Failure
from ..storage.sources import Place, Skip
from ..storage.store import UnreadableManifest
from .records import CellReport, RestoreResult
from .settings import EnvProblem

if TYPE_CHECKING:  # the launcher's and the torch adapter's records: a listing imports neither
    from ..kernels.kernel_start import KernelStart
    from ..torch_adapter.kernel_load_fixes import LoadFixTrouble
    from ..torch_adapter.miss_reasons import PrecompileTrouble


class Event:
    level: ClassVar[str] = "info"  # "info": left out of --quiet cells; "warning": always told


@dataclass(frozen=True)
class CacheWarning(Event):
    message: str
    level: ClassVar[str] = "warning"


@dataclass(frozen=True)
class ManifestQuarantined(Event):
    """A manifest the local store could not read, moved to quarantine, beside a version that restored."""

    problem: UnreadableManifest
    level: ClassVar[str] = "warning"


@dataclass(frozen=True)
class LoadFixFailed(Event):
    """One of our fixes to torch's loading of cached Triton kernels failed: torch's own way was kept."""

    trouble: LoadFixTrouble
    level: ClassVar[str] = "warning"


@dataclass(frozen=True)
class CachingPrecompileEverywhere(Event):
    """TORCH_CACHING_PRECOMPILE=1 in the kernel's environment: torch's Dynamo precompile is on outside our cells too,
    where no guard of ours checks edits."""

    level: ClassVar[str] = "warning"


@dataclass(frozen=True)
class PlainKernel(Event):
    """Told once, at `%load_ext` in a kernel that did not start warm: a plain kernel, or one of the warm kernel's
    spec that its launcher started cold (and why)."""

    start: KernelStart


@dataclass(frozen=True)
class HubUnavailable(Event):
    hub: str  # redacted URL
    reason: str
    level: ClassVar[str] = "warning"


@dataclass(frozen=True)
class NoTorchRemote(Event):
    """`--torch-remote` on a hub torch's own remote caches cannot use: they speak to one Redis server only."""

    hub: str  # redacted URL
    kind: str  # the hub's backend: "s3", "gcs", "azure", "folder", "redis cluster"
    level: ClassVar[str] = "warning"


@dataclass(frozen=True)
class HubRefusal(Event):
    """The hub answered and refused (the user's permissions, a wrong password, a full hub): what still works is
    said, and the hub is not left alone as one that is down."""

    hub: str  # redacted URL
    reason: str
    action: str  # "read", "write" or "log in"
    level: ClassVar[str] = "warning"


@dataclass(frozen=True)
class NoTeamSecret(Event):
    level: ClassVar[str] = "warning"


@dataclass(frozen=True)
class Restored(Event):
    name: str
    source: str  # "local" or "hub"
    hub: str | None  # the hub's redacted URL, when it came from there
    fetched_at_start: bool  # from the local store, pulled from the hub when the kernel started
    files: int
    bytes: int
    seconds: float
    pull_seconds: float = 0.0
    retries: int = 0  # connections to the hub that broke and were opened again on the way

    @classmethod
    def of(cls, result: RestoreResult, fetched_at_start: bool = False) -> Restored:
        """What a restore that restored did."""
        return cls(
            result.name,
            result.source or "",
            result.hub_url,
            fetched_at_start,
            result.files,
            result.bytes,
            result.seconds,
            result.pull_seconds,
            result.retries,
        )


@dataclass(frozen=True)
class NotRestored(Event):
    name: str
    skipped: tuple[Skip, ...]  # the versions passed over, and why
    problems: tuple[UnreadableManifest, ...] = ()  # what else went wrong: a manifest the store could not read
    pinned: str | None = None  # the version asked for, when no version of NAME had that id


@dataclass(frozen=True)
class SkippedVersion(Event):
    """A version passed over that a user should hear of even when a later one restored: a wrong secret, a damaged
    bundle, a transfer that failed."""

    name: str
    skip: Skip
    level: ClassVar[str] = "warning"


@dataclass(frozen=True)
class CompiledWhileLoading(Event):
    """A cell compiled while torch's compiler was still loading in the background, through code out of its sight:
    without the cache (nothing saved), or, `watched`, restored and saved but as plain torch.compile (no precompile)."""

    name: str
    watched: bool = False
    level: ClassVar[str] = "warning"


@dataclass(frozen=True)
class NotPushedSignedElsewhere(Event):
    """NAME's versions on the hub are signed with another secret: a version signed with ours would be refused by
    the team in turn, so it stays in the local store."""

    name: str
    level: ClassVar[str] = "warning"


@dataclass(frozen=True)
class NotListed(Event):
    """Bundles on the hub this user may not read: left out of a listing, never an error."""

    where: Place
    names: tuple[str, ...]
    level: ClassVar[str] = "warning"


@dataclass(frozen=True)
class PrecompileFailed(Event):
    """A step of torch's precompile failed under us for one function (told once per function)."""

    trouble: PrecompileTrouble
    level: ClassVar[str] = "warning"


@dataclass(frozen=True)
class BadEnvironment(Event):
    """An environment variable of ours could not be read (told once, when the session starts)."""

    problem: EnvProblem
    level: ClassVar[str] = "warning"


class Step(str, enum.Enum):
    """A step of ours around a cell that can fail without touching the cell's result."""

    SAVE = "save"  # saving the cell's bundle to the local store
    RUN_BUILDS = "run_builds"  # keeping or installing the kernels built at run time after a restore
    EVICT = "evict"  # evicting old bundles over the store's cap
    STATISTICS = "statistics"  # updating the store's statistics
    PROBE_RESTORE = "probe_restore"  # restoring the CPU probe programs
    PROBE_SAVE = "probe_save"  # saving the CPU probe programs
    HEADER_CALLS = "header_calls"  # keeping torch's header checks for the warm templates
    PREWARM = "prewarm"  # loading torch's compiler in the background
    FIND_ELSEWHERE = "find_elsewhere"  # looking in other versions for a function's entry
    RESTORE_BESIDE = "restore_beside"  # restoring the bundle while the block's processes start
    PROCESS_HOOK = "process_hook"  # handing the hook (counting; precompile) to the processes the block starts
    VIEW = "view"  # a view of the session (the panel) stopped updating


@dataclass(frozen=True)
class StepFailed(Event):
    step: Step
    error: Failure
    name: str | None = None  # the bundle
    where: str | None = None  # the store's folder
    errno: int | None = None  # an OSError's: the front end says the usual ones in its words
    level: ClassVar[str] = "warning"


@dataclass(frozen=True)
class CollaboratorCompiling(Event):
    name: str
    holder: str
    for_seconds: float
    wait_seconds: float  # 0: compiling here too


@dataclass(frozen=True)
class NoBundleArrived(Event):
    name: str


@dataclass(frozen=True)
class StoodAside(Event):
    """A stage of ours failed around a cell's body: before it (the body runs as plain torch.compile, nothing is
    saved) or after it (the body's result stands, what it compiled is not saved)."""

    name: str
    before_body: bool
    error: Failure
    level: ClassVar[str] = "warning"


@dataclass(frozen=True)
class PrecompileBypassed(Event):
    reason: str
    in_processes: bool = False  # in a process the cell started (--precompile-processes)


@dataclass(frozen=True)
class CompiledOutsideCell(Event):
    function: str  # its qualified name; "" for a module compiled through torch's own wrapper


@dataclass(frozen=True)
class Evicted(Event):
    count: int
    names: tuple[str, ...]
    cap_bytes: int


@dataclass(frozen=True)
class BuildAidsRemoved(Event):
    """Versions of the store that held torch's build aids (precompiled headers: bundled by versions before 0.3),
    written again without them."""

    count: int
    freed_bytes: int


@dataclass(frozen=True)
class CellFinished(Event):
    report: CellReport


class Moving(str, enum.Enum):
    """What a transfer of bundle NAME does."""

    PULL = "pull"  # from the hub into the local store
    RESTORE = "restore"  # from the local store into torch's caches
    SAVE = "save"  # from torch's caches into the local store
    PUSH = "push"  # from the local store to the hub


class Transfer(Protocol):
    """Progress of one transfer (save, restore, pull, push): called with (bytes done, bytes total), then closed."""

    def __call__(self, done: int, total: int) -> None: ...

    def close(self) -> None: ...


class Reporter(Protocol):
    def __call__(self, event: Event) -> None: ...

    def transfer(self, moving: Moving, name: str) -> Transfer: ...


class _NoTransfer:
    def __call__(self, done: int, total: int) -> None:
        pass

    def close(self) -> None:
        pass


NO_TRANSFER = _NoTransfer()


class LoggingReporter:
    """Events to the `jupyter_compile_cache` logger, as records: what a session says with no front end attached."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self.logger = logger or logging.getLogger("jupyter_compile_cache")

    def __call__(self, event: Event) -> None:
        self.logger.log(logging.WARNING if event.level == "warning" else logging.INFO, "%r", event)

    def transfer(self, moving: Moving, name: str) -> Transfer:
        return NO_TRANSFER
