"""A local store's cumulative statistics, kept the way `ccache -s` keeps them.

Every `%%compile_cache` cell (and every script `cell()`) that used a store adds what it did to that store's
`stats.json`: cells run, restores from the local store and from the hub, cells that compiled, torch's cache hits and
misses, bytes restored and saved, stale entries refused, precompile fallbacks, and the compile time the restores
saved. `%compile_cache stats` and `jupyter-compile-cache stats` show them with the store's size against its cap
(`--json` for scripts); `--zero` starts them again.

Time saved is an estimate: for each restored cell, the cold time recorded in the bundle it restored minus the
restored run's time and its restore, never below zero.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

COUNTERS = (
    "cells",
    "cells_failed",
    "restored_local",
    "restored_hub",
    "compiled",
    "hits",
    "misses",
    "stale_rejected",
    "precompile_fallbacks",
    # why functions of restored cells compiled (one per function; torch's own miss counters count graphs)
    "missed_no_entry",
    "missed_code_changed",
    "missed_recompiled",
    "missed_new_graph",
    "missed_no_backward",
    "restored_bytes",
    "saved_bundles",
    "saved_bytes",
    "pushed",
    "seconds_saved",
)


@dataclass
class StoreStats:
    """What the cells that used one store did since `since` (a time.time(); 0: no cell yet)."""

    since: float = 0.0
    counts: dict[str, float] = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StoreStats:
        counts: dict[str, float] = dict.fromkeys(COUNTERS, 0.0)
        for key, value in dict(data.get("counts", {})).items():
            if key in counts and isinstance(value, (int, float)) and not isinstance(value, bool):
                counts[key] = value
        since = data.get("since", 0.0)
        return cls(float(since) if isinstance(since, (int, float)) else 0.0, counts)

    def to_json(self) -> dict[str, Any]:
        return {"since": self.since, "counts": dict(self.counts)}

    def add(self, outcome: Mapping[str, float]) -> None:
        if not self.since:
            self.since = time.time()
        for key, value in outcome.items():
            self.counts[key] = self.counts.get(key, 0) + value

    @property
    def hit_rate(self) -> float | None:
        """torch's cache hits over hits and misses, or None before any."""
        total = self.counts["hits"] + self.counts["misses"]
        return self.counts["hits"] / total if total else None
