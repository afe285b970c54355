"""events.py: the session's events are records (the front ends word them: tests/frontends/test_event_wording.py);
with no front end attached they go to the logger, warnings as warnings."""

from __future__ import annotations

import dataclasses
import logging

from jupyter_compile_cache.core import events
from jupyter_compile_cache.failure import Failure


def test_a_session_without_a_front_end_logs_its_events_as_records_warnings_as_warnings(caplog):
    reporter = events.LoggingReporter()
    warning = events.StepFailed(events.Step.SAVE, Failure("OSError", "disk full"), "net", "/s")
    restored = events.Restored("net", "hub", "file:///share", False, 8, 376_627, 1.5, 0.4)
    with caplog.at_level(logging.INFO, logger="jupyter_compile_cache"):
        reporter(warning)
        reporter(restored)
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.WARNING, repr(warning)),
        (logging.INFO, repr(restored)),
    ]
    assert reporter.transfer(events.Moving.SAVE, "net") is events.NO_TRANSFER


def test_every_event_is_a_frozen_record_and_each_warning_says_so_by_its_level():
    records = [kind for kind in vars(events).values() if isinstance(kind, type) and issubclass(kind, events.Event)]
    assert len(records) >= 20
    for kind in records:
        if kind is events.Event:
            continue
        assert dataclasses.is_dataclass(kind) and kind.__dataclass_params__.frozen, kind  # type: ignore[attr-defined]
        assert kind.level in ("info", "warning") and not hasattr(kind, "text"), kind
