"""What the session tells the user, as typed records handed to a reporter that the front end supplies.

The magic renders each event as one line, said once; the CLI as text on stderr; the panel takes the same records. An
event's `text()` is its one sentence, written here once, so every front end says the same thing with the same
figures. Core and storage never print: with no front end attached (a library user's script), events go to the
`jupyter_compile_cache` logger.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import ClassVar, Protocol

from ..storage.sources import INCOMPATIBLE, NOT_INSTALLED, TRANSFER_FAILED, UNUSABLE, WRONG_SIGNATURE, Skip
from ..units import count, human_bytes, speed
from .records import CellReport

__all__ = [
    "CellFinished",
    "CollaboratorCompiling",
    "Event",
    "Evicted",
    "HubRefusal",
    "HubUnavailable",
    "LoggingReporter",
    "NoBundleArrived",
    "NoTeamSecret",
    "NotRestored",
    "PrecompileBypassed",
    "Reporter",
    "Restored",
    "StoodAside",
    "Transfer",
    "CacheWarning",
    "PlainKernel",
]


class Event:
    level: ClassVar[str] = "info"  # "info": left out of --quiet cells; "warning": always told

    def text(self) -> str:
        raise NotImplementedError


@dataclass(frozen=True)
class CacheWarning(Event):
    message: str
    level: ClassVar[str] = "warning"

    def text(self) -> str:
        return self.message


@dataclass(frozen=True)
class PlainKernel(Event):
    """Told once, at `%load_ext` in a kernel that did not start warm."""

    why: str  # "a plain kernel", or why the warm kernel's launcher started this one cold
    warm_spec: bool  # the warm kernel's spec: its next start is forked

    def text(self) -> str:
        if self.warm_spec:
            return f"this kernel started cold ({self.why}); torch's compiler loads now"
        return (
            f"{self.why}: torch's compiler loads now, as at every start of such a kernel; `jupyter-compile-cache "
            "install-kernel` installs a kernel whose every start has it loaded"
        )


@dataclass(frozen=True)
class HubUnavailable(Event):
    hub: str  # redacted URL
    reason: str
    level: ClassVar[str] = "warning"

    def text(self) -> str:
        return f"{self.reason.rstrip('. ')}; carrying on without the hub (the local store is unaffected)"


@dataclass(frozen=True)
class NoTorchRemote(Event):
    """`--torch-remote` on a hub torch's own remote caches cannot use: they speak to one Redis server only."""

    hub: str  # redacted URL
    kind: str  # the hub's backend: "s3", "folder", "redis cluster"
    level: ClassVar[str] = "warning"

    def text(self) -> str:
        return (
            f"--torch-remote: torch's own remote caches speak to a single Redis server, and the hub {self.hub} is "
            f"{self.kind!s} storage; torch's caches stay on this machine (our bundles still use the hub)"
        )


@dataclass(frozen=True)
class HubRefusal(Event):
    """The hub answered and refused (the user's permissions, a wrong password, a full hub): what still works is
    said, and the hub is not left alone as one that is down."""

    hub: str  # redacted URL
    reason: str
    action: str  # "read", "write" or "log in"
    level: ClassVar[str] = "warning"

    def text(self) -> str:
        reason = self.reason.rstrip(". ")
        if self.action == "write":
            return f"{reason}; bundles stay in the local store (restoring from the hub is unaffected)"
        return f"{reason}; carrying on with the local store"


@dataclass(frozen=True)
class NoTeamSecret(Event):
    level: ClassVar[str] = "warning"

    def text(self) -> str:
        return "no team secret (JUPYTER_COMPILE_CACHE_SECRET): hub bundles are neither signed nor verified"


@dataclass(frozen=True)
class Restored(Event):
    name: str
    source: str  # "local" or "hub"
    where: str  # "the local store", "the hub redis://..."
    files: int
    bytes: int
    seconds: float
    pull_seconds: float = 0.0
    retries: int = 0  # connections to the hub that broke and were opened again on the way

    def text(self) -> str:
        rate = f" ({speed(self.bytes, self.seconds)})" if self.seconds >= 1 else ""
        pulled = f", pull {self.pull_seconds:.2f} s" if self.source == "hub" else ""
        if self.retries:
            broke = "once" if self.retries == 1 else count(self.retries, "time")
            pulled += f" (the hub's connection broke {broke}: pulled again on a fresh one)"
        return (
            f"restored {self.name!r} from {self.where} ({count(self.files, 'file')}, {human_bytes(self.bytes)}) "
            f"in {self.seconds:.2f} s{rate}{pulled}"
        )


@dataclass(frozen=True)
class NotRestored(Event):
    name: str
    reasons: tuple[str, ...]

    def text(self) -> str:
        return f"{self.name!r} not restored: " + "; ".join(self.reasons)


def skip_line(skip: Skip) -> str:
    """Why a version was passed over, in one line: 'hub version V: incompatible (torch: ...)'."""
    if skip.kind == INCOMPATIBLE:
        return f"{skip.label}: incompatible ({skip.detail})"
    if skip.kind in (WRONG_SIGNATURE, TRANSFER_FAILED, NOT_INSTALLED):  # the error's own words say what it is
        tried = f" (tried {skip.tries} times, each on a fresh connection)" if skip.tries > 1 else ""
        return f"{skip.label}: {skip.detail}{tried}"
    moved = f"; moved to {skip.moved_to}" if skip.moved_to else ""
    return f"{skip.label}: {skip.kind}: {skip.detail}{moved}"


def skip_warning(name: str, skip: Skip) -> str:
    """A skip worth telling even when a later version restored, as a warning line."""
    if skip.kind == WRONG_SIGNATURE:
        return f"{skip.detail}; refused"
    if skip.kind == TRANSFER_FAILED:
        tried = f" (tried {skip.tries} times, each on a fresh connection)" if skip.tries > 1 else ""
        return f"could not pull {name!r} from {skip.where}: {skip.detail}{tried}"
    if skip.kind == NOT_INSTALLED:
        return f"could not restore bundle {name!r}: {skip.detail}"
    if skip.kind == UNUSABLE:
        return f"bundle {name!r} {skip.label} from {skip.where} is unusable: {skip.detail}"
    return f"bundle {name!r} {skip.label} is {skip.kind}: {skip.detail}; moved to {skip.moved_to}"


@dataclass(frozen=True)
class CollaboratorCompiling(Event):
    name: str
    holder: str
    for_seconds: float
    wait_seconds: float  # 0: compiling here too

    def text(self) -> str:
        busy = f"{self.name!r} is being compiled by {self.holder} (for {self.for_seconds:.0f} s)"
        if self.wait_seconds <= 0:
            return f"{busy}; compiling here too (use --wait SECONDS to wait for it)"
        return f"{busy}; waiting up to {self.wait_seconds:.0f} s for that bundle"


@dataclass(frozen=True)
class NoBundleArrived(Event):
    name: str

    def text(self) -> str:
        return f"no bundle for {self.name!r} arrived; compiling"


@dataclass(frozen=True)
class StoodAside(Event):
    """A stage of ours failed around a cell's body: before it (the body runs as plain torch.compile, nothing is
    saved) or after it (the body's result stands, what it compiled is not saved)."""

    name: str
    before_body: bool
    error: str  # the exception, as "Type: message"
    level: ClassVar[str] = "warning"

    def text(self) -> str:
        if self.before_body:
            return (
                f"the cache stood aside for {self.name!r} ({self.error}); plain torch.compile runs it, nothing is saved"
            )
        return f"what {self.name!r} compiled was not saved ({self.error}); the cell's result stands"


@dataclass(frozen=True)
class PrecompileBypassed(Event):
    reason: str

    def text(self) -> str:
        return (
            f"torch does not package a function of this cell for precompile ({self.reason}); a restored kernel traces "
            "it again, its compiled graph still from torch's AOTAutograd and FX graph caches"
        )


@dataclass(frozen=True)
class CompiledOutsideCell(Event):
    function: str  # its qualified name; "" for a module compiled through torch's own wrapper

    def text(self) -> str:
        what = f"`{self.function}`" if self.function else "a model"
        return (
            f"{what} was given to torch.compile outside a %%compile_cache cell, so torch made it no precompile "
            "package: a restored kernel traces it again (its compiled graph still from torch's caches); call "
            "torch.compile in the cell to restore it without tracing"
        )


@dataclass(frozen=True)
class Evicted(Event):
    count: int
    names: tuple[str, ...]
    cap_bytes: int

    def text(self) -> str:
        return (
            f"store over {human_bytes(self.cap_bytes)}: evicted {self.count} least recently used "
            f"version{'s' if self.count != 1 else ''} ({', '.join(self.names)})"
        )


@dataclass(frozen=True)
class CellFinished(Event):
    report: CellReport

    def text(self) -> str:
        if not self.report.ok:
            return (
                f"{self.report.name!r} raised after {self.report.body_seconds:.2f} s: nothing saved "
                "(what a failed cell compiled is not bundled)"
            )
        return self.report.summary()


class Transfer(Protocol):
    """Progress of one transfer (save, restore, pull, push): called with (bytes done, bytes total), then closed."""

    def __call__(self, done: int, total: int) -> None: ...

    def close(self) -> None: ...


class Reporter(Protocol):
    def __call__(self, event: Event) -> None: ...

    def transfer(self, label: str) -> Transfer: ...


class _NoTransfer:
    def __call__(self, done: int, total: int) -> None:
        pass

    def close(self) -> None:
        pass


NO_TRANSFER = _NoTransfer()


class LoggingReporter:
    """Events to the `jupyter_compile_cache` logger: what a session says with no front end attached."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self.logger = logger or logging.getLogger("jupyter_compile_cache")

    def __call__(self, event: Event) -> None:
        self.logger.log(logging.WARNING if event.level == "warning" else logging.INFO, event.text())

    def transfer(self, label: str) -> Transfer:
        return NO_TRANSFER
