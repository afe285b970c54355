"""A cell's run stage: right before the body, the cache files and torch's counters as they are (`watch`); then the
body, timed, its cache files watched (`run`)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass

from ..torch_adapter import capture
from ..torch_adapter.cell_snapshot import CellSnapshot
from ..torch_adapter.precompile import PrecompileGuard
from .records import CellOptions, CellReport
from .restore_stage import RestoreStage


@dataclass
class Watch:
    """What the record stage compares the body's work against: the cache files and torch's counters as they were
    before it."""

    watcher: capture.CellCapture
    before: CellSnapshot
    roots: dict[str, str]
    precompile: bool


def watch(
    name: str,
    opts: CellOptions,
    report: CellReport,
    restore_stage: RestoreStage,
    guard: PrecompileGuard,
    precompile: bool,
) -> Watch:
    """Right before the body: the cache files and torch's counters as they are, the guard set to find another
    version of NAME for a function whose code the restored one does not hold, and what was restored loaded (this
    cell's hits)."""
    capture.export_cache_dirs()  # processes the cell starts use, and fill, the same caches
    roots = capture.cache_roots()
    watcher = capture.CellCapture(roots, restore_stage.restored_paths.get(name, ()))
    before = CellSnapshot.take(guard if precompile else None)
    guard.take_miss_reasons()  # what happened outside this cell is not its to tell
    installed = report.restore.version if report.restore is not None else None
    if installed is not None:  # nothing fitted at all: no other version of NAME will
        guard.find_elsewhere = lambda digest: restore_stage.install_version_with(name, digest, installed, opts, watcher)
    restore_stage.refresh_loaded()
    return Watch(watcher, before, roots, precompile)


@contextlib.contextmanager
def run(report: CellReport, watched: Watch | None, guard: PrecompileGuard) -> Iterator[None]:
    """The body, timed, its cache files watched; a body that raises leaves the report not ok."""
    if watched is not None:
        watched.watcher.start()
    start = time.perf_counter()
    try:
        yield
    except BaseException:
        report.ok = False
        if watched is not None:
            watched.watcher.stop()
        raise
    finally:
        report.body_seconds = time.perf_counter() - start
        guard.find_elsewhere = None
