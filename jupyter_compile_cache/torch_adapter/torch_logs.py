"""torch's log lines about precompile, filtered: the per-guard "dropped" warnings (the guard comes back through
identity_checks.py) are hidden and their guards noted, torch's "Failed to load entry" and guard-building tracebacks
become our one line, and its package bypasses are counted."""

from __future__ import annotations

import logging

from .layers import COUNTER_GROUP

DROPPED_MESSAGE = "is dropped with caching_precompile=True"


FILTERED_LOGGERS = ("_dynamo.guards", "_dynamo.eval_frame", "_dynamo.output_graph", "_guards", "_dynamo.package")


class TorchLogFilter(logging.Filter):
    """Hides torch's per-guard "dropped" warnings (we re-add those guards) and notes which guards they name;
    hides torch's "Failed to load entry" and guard-building tracebacks (we print one line instead) and counts its
    package bypasses."""

    def __init__(self) -> None:
        super().__init__()
        self.dropped_names: list[str] | None = None  # collecting during a precompile guard build
        self.installing = False  # torch is installing a restored entry
        self.bypass_reasons: list[str] = []  # torch's reasons for not packaging a function, not told yet

    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.msg)
        if DROPPED_MESSAGE in message:
            if self.dropped_names is not None and isinstance(record.args, tuple) and len(record.args) >= 2:
                self.dropped_names.append(str(record.args[1]))
            return False
        if "Detected a package bypass" in message:
            # torch saves no entry for this function (e.g. "CLASS_MATCH guard cannot be serialized"): it compiles
            # the plain way, its FX graph and AOTAutograd entries still cached. Counted as a precompile bypass.
            from torch._dynamo.utils import counters

            counters[COUNTER_GROUP]["precompile_bypass"] += 1
            if isinstance(record.args, tuple) and record.args:
                self.bypass_reasons.append(str(record.args[0]))
            return False
        if message == "Backend not found":  # an entry without its compiled graph: the save leaves it out, told
            return False
        building = self.installing or self.dropped_names is not None  # installing an entry, or building one's guards
        if building and record.name == "torch._guards" and record.levelno >= logging.ERROR:
            return False  # a guard failed to build there: we say so in one line and fall back
        return "Failed to load entry from dynamo cache" not in message
