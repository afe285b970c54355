"""prewarm.py: the background start of torch's compiler stack, in this process. What failed in it is told once, by
the next cell, which runs as it would without the prewarm."""

from __future__ import annotations

from jupyter_compile_cache.core.records import CellOptions
from jupyter_compile_cache.core.session import CompileCacheSession
from jupyter_compile_cache.kernels.prewarm import Prewarm


def _unreadable_toolchain() -> None:
    raise PermissionError("[Errno 13] Permission denied: 'toolchain'")


def test_a_failure_in_the_background_is_kept_for_the_next_cell_once():
    prewarm = Prewarm()
    prewarm.before_probe = _unreadable_toolchain
    prewarm.run_here()
    assert prewarm.imported.is_set()  # the imports were done before it failed: cells need not wait
    assert prewarm.take_error() == "PermissionError: [Errno 13] Permission denied: 'toolchain'"
    assert prewarm.take_error() is None


def test_the_next_cell_tells_it_once_and_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))
    from jupyter_compile_cache.frontends.reporter import TextReporter

    session = CompileCacheSession(store_dir=str(tmp_path / "store"), reporter=TextReporter())
    try:
        session.prewarm.before_probe = _unreadable_toolchain
        session.prewarm.run_here()
        ran = []
        for _ in range(2):
            with session.cell("plain", CellOptions(save=False)):
                ran.append(True)
        err = capsys.readouterr().err
        assert ran == [True, True]
        assert err.count("preparing torch's compiler in the background stopped (PermissionError") == 1, err
    finally:
        session.close()
