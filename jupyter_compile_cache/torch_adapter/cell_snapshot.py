"""What torch had counted and compiled before a cell, taken once, so the cell's own share is one difference."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import compiler, layers
from .precompile import PrecompileGuard


@dataclass
class CellSnapshot:
    counters: dict[str, dict[str, int]]
    stale: int
    fallbacks: int
    guard: PrecompileGuard | None = None  # set when the cell uses precompile
    context: dict[str, int] = field(default_factory=dict)  # precompile entries in torch's context -> id(entry)
    loaded: set[str] = field(default_factory=set)  # precompile entries the guard had loaded
    lookups: int = 0  # how many functions the guard had looked up
    frames: int = 0  # frames Dynamo had compiled in this process

    @classmethod
    def take(cls, guard: PrecompileGuard | None) -> CellSnapshot:
        """Before the cell; `guard` when the cell uses precompile."""
        return cls(
            layers.counter_snapshot(),
            compiler.stale_count(),
            compiler.fallback_count(),
            guard,
            _precompile_context() if guard is not None else {},
            set(guard.loaded_keys) if guard is not None else set(),
            len(guard.lookups) if guard is not None else 0,
            compiler.frames_compiled(),
        )

    def layer_counts(self) -> dict[str, dict[str, int]]:
        """Per layer, the hits, misses and bypasses torch counted since."""
        return layers.counter_delta(self.counters, layers.counter_snapshot())

    def frames_compiled(self) -> int:
        """Frames Dynamo compiled in this process since."""
        return compiler.frames_compiled() - self.frames

    def stale_rejected(self) -> int:
        return compiler.stale_count() - self.stale

    def precompile_fallbacks(self) -> int:
        return compiler.fallback_count() - self.fallbacks

    def share(self) -> CellShare:
        """The cell's share, after its body: what torch counted and compiled since, and (with precompile) its
        entries written to the cache dir with their records."""
        share = CellShare(
            frames=self.frames_compiled(), stale_rejected=self.stale_rejected(), fallbacks=self.precompile_fallbacks()
        )
        guard = self.guard
        context = _precompile_context_class() if guard is not None else None
        if guard is not None and context is not None:
            entries = getattr(context, "_dynamo_cache_entries", {})
            compiled = {key for key, entry in entries.items() if self.context.get(key) != id(entry)}
            share.traced_keys = {key for key in compiled if _has_compiled_code(entries[key])}
            looked_up = guard.lookups[self.lookups :]
            share.precompile_keys, share.record_files = guard.save_cell_entries(
                context, compiled, guard.loaded_keys - self.loaded, looked_up
            )
        share.layers = layers.counter_delta(self.counters, layers.counter_snapshot())  # after the save: as before
        return share


@dataclass
class CellShare:
    """What a cell did, from its snapshot: per layer, the hits, misses and bypasses torch counted; the frames
    Dynamo compiled; stale graphs rejected and precompile fallbacks; its precompile entries' keys (what its bundle
    carries of them) and the record files written beside them."""

    frames: int = 0
    stale_rejected: int = 0
    fallbacks: int = 0
    precompile_keys: set[str] = field(default_factory=set)
    traced_keys: set[str] = field(default_factory=set)  # of those, entries holding code Dynamo traced in the cell
    record_files: list[str] = field(default_factory=list)
    layers: dict[str, dict[str, int]] = field(default_factory=dict)


def _has_compiled_code(entry: Any) -> bool:
    """Whether torch's dynamo entry holds a compiled frame it will install (not one it left out: a bypass)."""
    codes = getattr(entry, "codes", None) or ()
    return any(getattr(code, "guarded_codes", None) and not getattr(code, "bypassed", False) for code in codes)


def session_counts() -> dict[str, dict[str, int]]:
    """Per layer, the hits, misses and bypasses torch counted in this process."""
    return layers.counter_delta({}, layers.counter_snapshot())


def _precompile_context_class() -> Any:
    """torch's PrecompileContext, or None where this torch has none."""
    try:
        from torch._dynamo.precompile_context import PrecompileContext
    except ImportError:
        return None
    return PrecompileContext


def _precompile_context() -> dict[str, int]:
    """The entries in torch's precompile context now, each by its object's id."""
    context = _precompile_context_class()
    return {key: id(entry) for key, entry in getattr(context, "_dynamo_cache_entries", {}).items()}
