"""What Run All will do with a saved notebook's `%%compile_cache` cells, before any of them runs: whether each one's
bundle restores here, and why not."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from ..storage.bundle import FieldMismatch
from .options import CellOptions


@dataclass(frozen=True)
class NotebookCell:
    """A `%%compile_cache` cell of a saved notebook: its place among the code cells (from 1), NAME, options, and
    its body's identity."""

    index: int
    name: str
    options: CellOptions
    digest: str


class NotRestoring(str, enum.Enum):
    """Why a notebook cell will not restore its bundle when Run All reaches it."""

    BY_CHOICE = "by_choice"  # --no-restore
    NOTHING_SAVED = "nothing_saved"  # no bundle of its name yet
    SAVED_ELSEWHERE = "saved_elsewhere"  # its bundles fit another machine (`detail`: how)
    CELL_CHANGED = "cell_changed"  # the cell's code changed since the save
    CALLS_CHANGED = "calls_changed"  # code it calls changed: its last restore refused `refused` entries


@dataclass
class CellPlan:
    """Whether one notebook cell's bundle will restore here; `source` 'local' or 'hub' where one fits, `why_not`
    why it will not restore (None: it will)."""

    index: int
    name: str
    restores: bool
    source: str | None
    why_not: NotRestoring | None
    mismatches: tuple[FieldMismatch, ...] = ()  # SAVED_ELSEWHERE: what differs from this machine
    refused: int = 0  # CALLS_CHANGED: the entries its last restore refused


class PlanTrouble(str, enum.Enum):
    """What a notebook's plan could not read."""

    UNREADABLE_NOTEBOOK = "unreadable_notebook"  # where: the notebook's path
    BAD_CELL_LINE = "bad_cell_line"  # where: the cell's number; detail: what is wrong with its %%compile_cache line
    HUB_SILENT = "hub_silent"  # where: the hub; its bundles were not looked at


@dataclass(frozen=True)
class PlanProblem:
    trouble: PlanTrouble
    where: str
    detail: str  # the error, in its own words


@dataclass
class NotebookPlan:
    """What Run All will do with the notebook's `%%compile_cache` cells, before any of them runs."""

    path: str
    cells: list[CellPlan]
    problems: list[PlanProblem] = field(default_factory=list)  # cells or hubs that could not be read

    @property
    def restoring(self) -> int:
        return sum(1 for cell in self.cells if cell.restores)
