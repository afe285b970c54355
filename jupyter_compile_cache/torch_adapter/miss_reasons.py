"""What the precompile guard has to say, as data: why a function of a restored cell compiled (the cell's report
keeps it), and a step of torch's precompile that failed under us (told once). The front ends word both. No torch
import."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from ..failure import Failure

# The bypass reason (torch's words, then the function) of an entry the save left out for want of its compiled graph.
NO_GRAPH_REASON = "Backend not found for"


class MissCause(str, enum.Enum):
    NO_ENTRY = "no_entry"  # no entry was saved for the function
    OTHER_CODE = "other_code"  # its saved entry was compiled for other code (`changed`: where the code differs)
    REFUSED = "refused"  # torch refused to load the saved entry (`detail`: torch's words)
    RESTORED_GUARD_FAILED = "restored_guard_failed"  # a guard of the restored entry failed (`detail`, when torch says)
    GUARD_FAILED = "guard_failed"  # Dynamo recompiled it (`detail`: the failed guard, when torch says)
    NEW_GRAPHS = "new_graphs"  # graphs missed and torch named no function (`count`: how many)
    # AOTAutograd graphs made again over an FX graph hit: torch writes their entry only once a backward compiles, so a
    # forward run with gradients on and no backward misses at every run, with torch's own warm cache too (`count`)
    NO_BACKWARD = "no_backward"

    @property
    def kind(self) -> str:
        """The statistics' category (the store counts `missed_<kind>`)."""
        return _KIND[self]


_KIND = {
    MissCause.NO_ENTRY: "no_entry",
    MissCause.OTHER_CODE: "code_changed",
    MissCause.REFUSED: "code_changed",
    MissCause.RESTORED_GUARD_FAILED: "recompiled",
    MissCause.GUARD_FAILED: "recompiled",
    MissCause.NEW_GRAPHS: "new_graph",
    MissCause.NO_BACKWARD: "no_backward",
}


@dataclass(frozen=True)
class MissReason:
    cause: MissCause
    function: str = ""  # the function's qualified name
    detail: str = ""  # torch's own words, one line, when it gave any
    changed: tuple[str, ...] = ()  # OTHER_CODE: the names whose code differs
    count: int = 0  # NEW_GRAPHS, NO_BACKWARD: how many graphs

    @property
    def kind(self) -> str:
        return self.cause.kind

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "cause": self.cause.value,
            "function": self.function,
            "detail": self.detail,
            "changed": list(self.changed),
            "count": self.count,
        }

    @classmethod
    def from_json(cls, data: Any) -> MissReason | None:
        """A reason as a run's record kept it; None for one this version cannot read (older records kept a line)."""
        try:
            return cls(
                MissCause(data["cause"]),
                str(data.get("function") or ""),
                str(data.get("detail") or ""),
                tuple(str(name) for name in data.get("changed") or ()),
                int(data.get("count") or 0),
            )
        except (TypeError, KeyError, ValueError, AttributeError):
            return None


class PrecompileStep(str, enum.Enum):
    """A step of precompile that can fail for one function without changing its answer."""

    RECORD_FUNCTION = "record_function"  # recording the compiled function
    RECORD_SOURCES = "record_sources"  # recording the sources it inlined
    BUILD_GUARDS = "build_guards"  # building the guards to save
    LOAD = "load"  # loading the saved entry
    INSTALL = "install"  # installing the saved entry
    COLLECT = "collect"  # collecting the entries to save
    SAVE = "save"  # saving the entry
    START_IN_PROCESS = "start_in_process"  # starting precompile in a process the cell started
    # the failures below cost time later, and the function still restores or compiles the usual way
    KEEP_SIZES = "keep_sizes"  # taking the function's input sizes to carry them
    FIND_BY_CODE = "find_by_code"  # looking for the function's entry by its code
    USE_SAVED_SIZES = "use_saved_sizes"  # using a restored function's saved input sizes
    SAVE_SIZES = "save_sizes"  # saving the function's input sizes
    MERGE = "merge"  # putting what several instances of one code compiled into one entry


@dataclass(frozen=True)
class PrecompileTrouble:
    """STEP failed for one function; `fallback`: it runs the plain torch.compile way (else only time is lost)."""

    step: PrecompileStep
    error: Failure
    fallback: bool
