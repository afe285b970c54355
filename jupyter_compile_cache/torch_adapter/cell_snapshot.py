"""What torch had counted and compiled before a cell, taken once, so the cell's own share is one difference."""

from __future__ import annotations

from dataclasses import dataclass, field

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

    def save_precompile_entries(self) -> set[str]:
        """Write the Dynamo precompile entries to the cache dir; return the keys this cell compiled or restored."""
        guard = self.guard
        if guard is None:
            return set()
        try:
            from torch._dynamo.precompile_context import PrecompileContext
        except ImportError:
            return set()
        entries = getattr(PrecompileContext, "_dynamo_cache_entries", {})
        compiled = {key for key, entry in entries.items() if self.context.get(key) != id(entry)}
        # torch rewrites every entry of the process when saving (with new bytes each time): only save when this
        # cell compiled something, or a warm re-run would look like new work.
        if compiled:
            guard.save_entries(PrecompileContext)
        # Entries whose precompile failed in torch stay out of bundles (and out of the cache dir).
        return (compiled | (guard.loaded_keys - self.loaded)) - guard.refused_keys

    def empty_functions(self) -> set[str]:
        """Functions wrapped in this cell of which Dynamo traced nothing (no entry to save, yet no miss)."""
        if self.guard is None:
            return set()
        try:
            return self.guard.empty_keys(self.guard.lookups[self.lookups :])
        except ImportError:
            return set()


def session_counts() -> dict[str, dict[str, int]]:
    """Per layer, the hits, misses and bypasses torch counted in this process."""
    return layers.counter_delta({}, layers.counter_snapshot())


def _precompile_context() -> dict[str, int]:
    try:
        from torch._dynamo.precompile_context import PrecompileContext
    except ImportError:
        return {}
    return {key: id(entry) for key, entry in getattr(PrecompileContext, "_dynamo_cache_entries", {}).items()}
