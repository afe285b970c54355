"""stats.py and the store's stats.json: what the cells that used a store did, summed as `ccache -s` sums it.

Real cells adding to a store, end to end through the CLI, are in test_cli_and_api.py; here the store's side: two
processes adding at once, a damaged file, zeroing, and the text a user reads."""

from __future__ import annotations

import multiprocessing
import re

from jupyter_compile_cache.core.commands import Commands
from jupyter_compile_cache.core.records import CellReport, RestoreResult
from jupyter_compile_cache.core.session import CompileCacheSession
from jupyter_compile_cache.frontends import tables
from jupyter_compile_cache.storage.store import LocalStore


def _cold_cell() -> CellReport:
    cell = CellReport("net", saved_version="v1", saved_bytes=4096, saved_files=3, body_seconds=12.0)
    cell.layers = {"fx_graph": {"hits": 0, "misses": 2}, "aot_autograd": {"hits": 0, "misses": 2}}
    return cell


def _restored_cell(source: str) -> CellReport:
    restore = RestoreResult("net", source=source, version="v1", bytes=4096, cold_seconds=12.0)
    cell = CellReport("net", body_seconds=0.5, restore=restore)
    cell.layers = {"dynamo_precompile": {"hits": 1, "misses": 0}}
    return cell


def test_cells_add_up_and_zero_starts_again_showing_what_it_zeroed(tmp_path):
    store = LocalStore(str(tmp_path))
    store.add_stats(_cold_cell().stats_outcome())
    store.add_stats(_restored_cell("local").stats_outcome())
    store.add_stats(_restored_cell("hub").stats_outcome())
    failed = CellReport("net", ok=False)
    store.add_stats(failed.stats_outcome())
    counts = store.read_stats().counts
    assert (counts["cells"], counts["cells_failed"], counts["compiled"]) == (4, 1, 1)
    assert (counts["restored_local"], counts["restored_hub"], counts["hits"], counts["misses"]) == (1, 1, 2, 4)
    assert counts["seconds_saved"] == 2 * 11.5 and counts["restored_bytes"] == 2 * 4096
    assert (counts["saved_bundles"], counts["saved_bytes"]) == (1, 4096)

    data = Commands(CompileCacheSession(store_dir=str(tmp_path))).stats(zero=True)
    assert data.counts["cells"] == 4 and data.zeroed and data.hit_rate == 2 / 6
    assert store.read_stats().counts["cells"] == 0 and store.read_stats().since > 0


def _add_many(root: str, n: int) -> None:
    store = LocalStore(root)
    for _ in range(n):
        store.add_stats({"cells": 1, "hits": 2})


def test_two_processes_adding_at_once_lose_nothing(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    workers = [ctx.Process(target=_add_many, args=(str(tmp_path), 40)) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
        assert w.exitcode == 0
    counts = LocalStore(str(tmp_path)).read_stats().counts
    assert (counts["cells"], counts["hits"]) == (80, 160)


def test_a_damaged_stats_file_reads_as_none_and_the_next_cell_rewrites_it(tmp_path):
    store = LocalStore(str(tmp_path))
    (tmp_path / "stats.json").write_text('{"counts": {"cells": "many", "hits": 3, "bogus": 1}, "since": "x"')
    assert store.read_stats().counts["cells"] == 0  # not JSON: none
    (tmp_path / "stats.json").write_text('{"counts": {"cells": "many", "hits": 3, "bogus": 1}, "since": "x"}')
    damaged = store.read_stats()
    assert damaged.counts["cells"] == 0 and damaged.counts["hits"] == 3 and "bogus" not in damaged.counts
    store.add_stats({"cells": 1})
    assert store.read_stats().counts["cells"] == 1 and store.read_stats().since > 0


def test_the_view_shows_rates_time_saved_and_the_store_against_its_cap(tmp_path):
    store = LocalStore(str(tmp_path))
    store.add_stats(_cold_cell().stats_outcome())
    store.add_stats(_restored_cell("local").stats_outcome())
    text = repr(tables.StatsView(Commands(CompileCacheSession(store_dir=str(tmp_path))).stats()))
    assert text.startswith(f"statistics of {tmp_path} since 20"), text
    assert re.search(r"^  restored a bundle +1  50\.0 %$", text, re.M), text
    assert re.search(r"^torch cache hits / misses +1 / 4  20\.0 % hits$", text, re.M), text
    assert re.search(r"^compile time saved \(estimate\) +11\.5 s", text, re.M), text
    assert re.search(r"^store size +0 B  0\.0 % of the 20\.0 GB cap; 0 versions of 0 bundles$", text, re.M), text
