"""run_stage.py: the body timed, and a body that raises leaves its report not ok, its exception its own, and the
guard set for the cell no longer asking for other versions."""

from __future__ import annotations

import pytest

from jupyter_compile_cache.core import run_stage
from jupyter_compile_cache.core.records import CellReport
from jupyter_compile_cache.torch_adapter.precompile import PrecompileGuard


def _nothing(*_args) -> None:
    pass


def test_a_body_is_timed_and_one_that_raises_is_not_ok_and_keeps_its_exception():
    guard = PrecompileGuard(warn=lambda trouble: None)
    report = CellReport("net")
    with run_stage.run(report, None, guard, False, _nothing, _nothing):
        sum(range(1000))
    assert report.ok and report.body_seconds > 0
    failed = CellReport("net")
    guard.set_find_elsewhere(lambda digest: False)  # as a restore that may find another version's entries sets it
    with pytest.raises(ZeroDivisionError), run_stage.run(failed, None, guard, False, _nothing, _nothing):
        1 / 0  # noqa: B018
    assert not failed.ok and failed.body_seconds > 0 and guard.loader.find_elsewhere is None
