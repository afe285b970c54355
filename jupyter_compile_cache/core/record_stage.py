"""A cell's record stage, after a body that ran to its end: what it compiled and used, from the snapshot taken
before it (torch's counters, its precompile entries written with their records) and the files it wrote or read
(what a save bundles); why a restored cell compiled; what torch would not package."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..torch_adapter import capture, layers
from ..torch_adapter.miss_reasons import MissCause, MissReason
from ..torch_adapter.precompile import PrecompileGuard
from . import events
from .options import CellOptions
from .records import CellReport
from .run_stage import Watch

Tell = Callable[..., None]  # StoreSession.tell


@dataclass
class Recorded:
    """What the save stage bundles: the cell's files, its precompile entries' keys, and whether it compiled
    anything new (files of a graph loaded from a cache are no new work)."""

    files: capture.CellFiles
    precompile_keys: set[str]
    compiled_new: bool
    precompile: bool  # whether the cell ran with precompile (its entries' records name their code)
    # restored nothing, and its graphs came from torch's own cache: a first version of NAME if it has none
    used_warm_cache: bool = False


def record(report: CellReport, opts: CellOptions, watched: Watch, guard: PrecompileGuard, tell: Tell) -> Recorded:
    """The report's counts per layer (the processes it started included), why it compiled after a restore, and the
    files the cell and its processes wrote or used, with its precompile entries' keys."""
    restored = report.restore is not None and report.restore.restored
    if restored:  # a cold cell's misses need no reason
        report.miss_reasons = guard.take_miss_reasons()
    share = watched.before.share()
    keys = share.precompile_keys
    if opts.whole_cache:
        keys |= capture.all_precompile_keys(watched.roots)
        share.record_files += capture.all_files(watched.roots)
    watched.watcher.add_restored(watched.installed_beside)  # another version's, installed while the body ran
    processes = report.processes_share
    used_elsewhere = processes.used if processes is not None else set()
    cell_files = watched.watcher.collect(keys if watched.precompile else None, [*share.record_files, *used_elsewhere])
    for layer_name, counts in processes.layers.items() if processes is not None else ():
        mine = share.layers.setdefault(layer_name, {})  # their hits and misses are the cell's
        for kind, number in counts.items():
            mine[kind] = mine.get(kind, 0) + number
    for layer_name, counts in share.layers.items():
        counts["written"] = cell_files.new_by_layer.get(layer_name, 0)
    report.layers = share.layers
    report.processes = cell_files.processes
    report.compiled_elsewhere = cell_files.compiled_elsewhere()
    if restored and report.compiled_elsewhere and not cell_files.created_graphs:  # no graph compiled: re-tuned
        report.kernels_retuned, report.compiled_elsewhere = report.compiled_elsewhere, 0
    misses = sum(counts.get("misses", 0) for counts in share.layers.values())
    if report.miss_reasons == [] and misses and restored:
        # torch named no function (no precompile here, or a graph's files were missing): still, say so
        report.miss_reasons = _unnamed_misses(share.layers, misses)
    report.stale_rejected += share.stale_rejected  # the processes' own, if carried, are counted already
    report.precompile_fallbacks = share.fallbacks
    for reason in guard.new_bypass_reasons() if watched.precompile else ():
        tell(events.PrecompileBypassed(reason), report, opts.quiet)
    for function in guard.new_unpackaged() if watched.precompile else ():
        tell(events.CompiledOutsideCell(function), report, opts.quiet)
    # A cell with no bundle yet in which Dynamo traced a frame whose graphs all came from the caches (the same model
    # under inference_mode after a plain call, in another cell): its new precompile entry is new work all the same.
    # Not after a restore: a function torch will not package is traced again there at every restore.
    traced = not restored and bool(share.frames and share.traced_keys & keys)
    compiled_new = cell_files.compiled_new(report.layers, share.frames, restored) or traced
    warm = not restored and any(report.layers.get(layer, {}).get("hits", 0) for layer in layers.GRAPH_LAYERS)
    return Recorded(cell_files, keys, compiled_new, watched.precompile, warm)


def _unnamed_misses(counts: dict[str, dict[str, int]], misses: int) -> list[MissReason]:
    """Graphs missed after a restore where torch named no function: AOTAutograd's over FX graph hits are a forward
    with no backward yet (torch writes their entry only with the backward), the rest graphs not in the bundle."""
    fx, aot = counts.get("fx_graph", {}), counts.get("aot_autograd", {}).get("misses", 0)
    no_backward = aot if aot and not fx.get("misses", 0) and fx.get("hits", 0) >= aot else 0
    reasons = [MissReason(MissCause.NO_BACKWARD, count=no_backward)] if no_backward else []
    if misses > no_backward:
        reasons.append(MissReason(MissCause.NEW_GRAPHS, count=misses - no_backward))
    return reasons
