"""How the precompile guard's steps fall back and tell: a failure of torch's precompile machinery puts that function
on the plain path (never saved again) with one line; a failure that costs time later but changes no answer is told
once; why functions missed is kept for the cell's line."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable

from ..failure import Failure
from .installed_entries import set_aside
from .layers import COUNTER_GROUP
from .miss_reasons import MissReason, PrecompileStep, PrecompileTrouble
from .torch_logs import FILTERED_LOGGERS, TorchLogFilter

# The whole traceback of a failure told in one line, for a bug report: logging.getLogger(LOGGER).setLevel("DEBUG")
LOGGER = "jupyter_compile_cache.precompile"


class Troubles:
    """What went wrong under the guard's steps, told once each; the functions refused; torch's log lines filtered."""

    def __init__(self, warn: Callable[[PrecompileTrouble], None] | None = None) -> None:
        # told what failed under us; by default, as a warning of Python's
        self.warn: Callable[[PrecompileTrouble], None] = warn or (
            lambda trouble: warnings.warn(repr(trouble), stacklevel=2)
        )
        self.refused_keys: set[str] = set()  # keys whose precompile failed in torch: plain path, never saved again
        self.miss_reasons: list[MissReason] = []  # why functions looked up since `take_miss_reasons` missed
        self._told: set[str] = set()  # one line per function
        self.log_filter = TorchLogFilter()
        self.loggers = [logging.getLogger(f"torch.{name}") for name in FILTERED_LOGGERS]

    def once(self, items: list[str], prefix: str = "") -> list[str]:
        """ITEMS not told before this session (each once), PREFIX taken off."""
        fresh = [item for item in dict.fromkeys(items) if item not in self._told]
        self._told.update(fresh)
        return [item[len(prefix) :] for item in fresh]

    def take_miss_reasons(self) -> list[MissReason]:
        """Why functions were not restored since the last call, each once."""
        reasons, self.miss_reasons = self.miss_reasons, []
        return list(dict.fromkeys(reasons))

    def fallback(self, key: str | None, step: PrecompileStep, exc: BaseException) -> None:
        """torch's precompile failed for one function: plain path for it, its entry set aside, one line."""
        from torch._dynamo.utils import counters

        counters[COUNTER_GROUP]["precompile_fallback"] += 1
        logging.getLogger(LOGGER).debug("precompile fell back at %s for %s", step.value, key, exc_info=exc)
        if key:
            self.refused_keys.add(key)
            set_aside(key)
            if key in self._told:
                return
            self._told.add(key)
        self.warn(PrecompileTrouble(step, Failure.of(exc), fallback=True))

    def tell(self, key: str, step: PrecompileStep, exc: BaseException) -> None:
        """Once per function and step, a failure that costs time later but changes no answer."""
        if f"{key}:{step.value}" not in self._told:
            self._told.add(f"{key}:{step.value}")
            self.warn(PrecompileTrouble(step, Failure.of(exc), fallback=False))

    def filtering(self, on: bool) -> None:
        """torch's log lines about precompile go through our filter while the guard is installed."""
        for logger in self.loggers:
            (logger.addFilter if on else logger.removeFilter)(self.log_filter)
