"""records.py: a cell's report is kept with the store as JSON (its last run), warnings and miss reasons included."""

from __future__ import annotations

import json

from jupyter_compile_cache.core import events
from jupyter_compile_cache.core.records import CellReport, RestoreResult
from jupyter_compile_cache.core.settings import EnvProblem
from jupyter_compile_cache.failure import Failure
from jupyter_compile_cache.storage.sources import Place, Skip, SkipKind
from jupyter_compile_cache.torch_adapter.miss_reasons import (
    MissCause,
    MissReason,
    PrecompileStep,
    PrecompileTrouble,
)


def test_a_report_with_every_kind_of_warning_and_miss_reason_is_kept_as_json_and_read_back():
    hub = Place("hub", "redis://h:1/0")
    skip = Skip("v2", hub, SkipKind.WRONG_SIGNATURE, "bundle 'net' version v2 has a wrong signature")
    warnings = [
        events.CacheWarning("a message"),
        events.HubUnavailable("redis://h:1/0", "timed out"),
        events.HubRefusal("redis://h:1/0", "not permitted", "write"),
        events.SkippedVersion("net", skip),
        events.StoodAside("net", True, Failure("OSError", "disk full")),
        events.CompiledWhileLoading("net"),
        events.NotPushedSignedElsewhere("net"),
        events.NotListed(hub, ("a", "b")),
        events.BadEnvironment(EnvProblem("JUPYTER_COMPILE_CACHE_HUB_TTL", "not a number", "0")),
        events.PrecompileFailed(PrecompileTrouble(PrecompileStep.LOAD, Failure("IndexError", "3"), True)),
        *[events.StepFailed(step, Failure("OSError", "disk full"), "net", "/s", 28) for step in events.Step],
    ]
    assert all(event.level == "warning" for event in warnings)
    report = CellReport(
        "net",
        restore=RestoreResult("net", skipped=[Skip("v1", Place("local", "/s"), SkipKind.INCOMPATIBLE)]),
        miss_reasons=[MissReason(cause, "f", "d", ("g",), 2) for cause in MissCause],
        warnings=warnings,
    )
    kept = json.loads(json.dumps(report.to_json()))
    assert [w["event"] for w in kept["warnings"]] == [type(event).__name__ for event in warnings]
    assert kept["warnings"][-1] == {
        "event": "StepFailed",
        "step": "view",
        "error": {"kind": "OSError", "message": "disk full"},
        "name": "net",
        "where": "/s",
        "errno": 28,
    }
    assert [MissReason.from_json(r) for r in kept["miss_reasons"]] == report.miss_reasons
    assert kept["restore"]["skipped"][0]["kind"] == SkipKind.INCOMPATIBLE.value
    outcome = report.stats_outcome()
    assert (outcome["missed_code_changed"], outcome["missed_recompiled"], outcome["missed_no_entry"]) == (2, 2, 1)
