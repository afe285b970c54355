"""precompile_troubles.py: a failure of torch's precompile machinery is one line to the user, the function refused
(never saved again), and its whole traceback on the `jupyter_compile_cache.precompile` logger for a bug report."""

from __future__ import annotations

import logging

import pytest

from jupyter_compile_cache.failure import Failure
from jupyter_compile_cache.torch_adapter.miss_reasons import PrecompileStep
from jupyter_compile_cache.torch_adapter.precompile_troubles import LOGGER, Troubles

pytest.importorskip("torch")


def test_a_fallback_is_told_once_refuses_the_function_and_logs_its_traceback(caplog):
    told = []
    troubles = Troubles(told.append)
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        for _ in range(2):
            try:
                [][1]  # noqa: B018
            except IndexError as exc:
                troubles.fallback("key", PrecompileStep.INSTALL, exc)
    assert [(t.step, t.error, t.fallback) for t in told] == [
        (PrecompileStep.INSTALL, Failure("IndexError", "list index out of range"), True)
    ]
    assert troubles.refused_keys == {"key"}
    (first, _second) = [r for r in caplog.records if r.name == LOGGER]
    assert first.exc_info and first.exc_info[0] is IndexError and "[][1]" in caplog.text
