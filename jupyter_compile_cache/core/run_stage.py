"""A cell's run stage: right before the body, the cache files and torch's counters as they are (the `Watch` the
record stage compares against); then the body, timed, its cache files watched."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ..torch_adapter import capture
from ..torch_adapter.cell_snapshot import CellSnapshot
from ..torch_adapter.precompile import PrecompileGuard
from .records import CellReport
from .restore_stage import CellRestore


@dataclass
class Watch:
    """What the record stage compares the body's work against: the cache files and torch's counters as they were
    before it, and what the restore stage installed beside the restored version while it ran."""

    watcher: capture.CellCapture
    before: CellSnapshot
    roots: dict[str, str]
    precompile: bool
    installed_beside: list[str]


def watch(restored: CellRestore, guard: PrecompileGuard, precompile: bool, refresh: Callable[[], None]) -> Watch:
    """Right before the body: the cache files and torch's counters as they are, then what was restored loaded
    (`refresh`: this cell's hits)."""
    capture.export_cache_dirs()  # processes the cell starts use, and fill, the same caches
    roots = capture.cache_roots()
    watcher = capture.CellCapture(roots, restored.files)
    before = CellSnapshot.take(guard if precompile else None)
    guard.take_miss_reasons()  # what happened outside this cell is not its to tell
    refresh()
    return Watch(watcher, before, roots, precompile, restored.installed_beside)


@contextlib.contextmanager
def run(
    report: CellReport,
    restored: CellRestore | None,
    guard: PrecompileGuard,
    precompile: bool,
    refresh: Callable[[], None],
    stand_aside: Callable[[Exception], None],
) -> Iterator[Watch | None]:
    """The body, timed, its cache files watched (none when `restored` is None: the cell runs without its stages); a
    body that raises leaves the report not ok. A watch that fails is handed to `stand_aside`, and the body runs
    unwatched."""
    watched = None
    if restored is not None:
        guard.set_find_elsewhere(restored.find_elsewhere)  # for the length of the body (and the restore's refresh)
        try:
            watched = watch(restored, guard, precompile, refresh)
            watched.watcher.start()
        except Exception as exc:  # ours failed before the body: it runs without the cache around it
            watched = None
            guard.set_find_elsewhere(None)
            stand_aside(exc)
    start = time.perf_counter()
    try:
        yield watched
    except BaseException:
        report.ok = False
        raise
    finally:
        report.body_seconds = time.perf_counter() - start
        if watched is not None:  # the recorder's wrappers live exactly as long as the body
            watched.watcher.stop()
        guard.set_find_elsewhere(None)
