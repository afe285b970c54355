"""nbval does not fail a cell whose magic raised UsageError (nbval#147): IPython prints it to stderr, with no
error output. This hook fails any notebook cell whose outputs hold an error or a UsageError, checked or not."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    if call.when != "call" or not report.passed:
        return
    for output in getattr(item, "test_outputs", None) or []:
        text = output.get("text", "") if output.get("output_type") == "stream" else ""
        if output.get("output_type") == "error" or "UsageError:" in text:
            report.outcome = "failed"
            report.longrepr = f"notebook cell reported an error:\n{text or output.get('ename')}\n--- cell ---\n" + (
                getattr(item, "cell", {}).get("source", "")
            )
            return
