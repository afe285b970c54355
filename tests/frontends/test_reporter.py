"""reporter.py: how the text front ends say the session's events (one line each, warnings on stderr) and show a
transfer's progress (a bar only once it takes a while)."""

from __future__ import annotations

import io
import time

from jupyter_compile_cache.frontends.reporter import TextReporter, TransferBar


def test_a_transfer_bar_appears_only_once_the_transfer_takes_a_while():
    stream = io.StringIO()
    quick = TransferBar("quick", stream=stream)
    quick.DELAY = 60.0  # however slow this machine is now
    quick(5, 10)
    quick(10, 10)
    quick.close()
    assert quick.bar is None and stream.getvalue() == ""  # no bar made, none shown
    slow = TransferBar("slow", stream=stream)
    slow.DELAY = 0.05
    slow(1, 10)
    time.sleep(0.1)
    slow(4, 10)
    slow(10, 10)
    slow.close()
    assert "slow" in stream.getvalue() and "10.0/10.0" in stream.getvalue()  # it ends on its true figures
    silent = TransferBar("silent", quiet=True, stream=stream)
    silent.DELAY = 0.0
    silent(1, 10)
    assert silent.bar is None


def test_each_event_is_one_line_warnings_on_stderr_and_quiet_cells_say_only_warnings(tmp_path):
    from jupyter_compile_cache.core import events
    from jupyter_compile_cache.core.session import CompileCacheSession
    from jupyter_compile_cache.storage.bundle import FieldMismatch
    from jupyter_compile_cache.storage.sources import Place, Skip, SkipKind

    out, err = io.StringIO(), io.StringIO()
    session = CompileCacheSession(store_dir=str(tmp_path), reporter=TextReporter(out, err))
    session.tell(events.Restored("net", "local", None, False, 8, 376_627, 0.01))
    session.tell(events.HubUnavailable("redis://h:1/0", "Error 111 connecting to h:1. Connection refused."))
    mismatches = (FieldMismatch("torch", "2.9", "2.13"),)
    incompatible = Skip("v1", Place("local", str(tmp_path)), SkipKind.INCOMPATIBLE, mismatches=mismatches)
    session.tell(events.NotRestored("net", (incompatible,)), quiet=True)
    assert out.getvalue() == "compile_cache: restored 'net' from the local store (8 files, 367.8 KB) in 0.01 s\n"
    assert err.getvalue() == (
        "compile_cache: warning: Error 111 connecting to h:1. Connection refused; carrying on without the hub "
        "(the local store is unaffected)\n"
    )


def test_a_cells_lines_carry_the_prefix_once(tmp_path, monkeypatch):
    from jupyter_compile_cache.core.options import CellOptions
    from jupyter_compile_cache.core.session import CompileCacheSession

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))
    out, err = io.StringIO(), io.StringIO()
    session = CompileCacheSession(store_dir=str(tmp_path / "store"), reporter=TextReporter(out, err))
    try:
        with session.cell("plain", CellOptions(save=False)):
            pass
    finally:
        session.close()
    said = out.getvalue() + err.getvalue()
    assert out.getvalue().startswith("compile_cache: 'plain' ran in "), said
    assert "compile_cache: compile_cache:" not in said
