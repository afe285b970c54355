"""events.py: each event is one sentence, without the front end's prefix, with its figures said one way."""

from __future__ import annotations

import logging

from jupyter_compile_cache.core import events
from jupyter_compile_cache.core.records import CellReport

ALL = [
    events.CacheWarning("could not save bundle 'net' to /s: disk full; the cell's result stands"),
    events.HubUnavailable("redis://h:1/0", "hub redis://h:1/0: Error 111 connecting. Connection refused."),
    events.NoTeamSecret(),
    events.Restored("net", "hub", "the hub file:///share", 8, 376_627, 1.5, 0.4),
    events.NotRestored("net", ("version v1: incompatible (torch 2.9 vs 2.13)", "hub version v2: wrong signature")),
    events.CollaboratorCompiling("net", "bob@b", 12.0, 0.0),
    events.CollaboratorCompiling("net", "bob@b", 12.0, 30.0),
    events.NoBundleArrived("net"),
    events.PrecompileBypassed("Graph contains named parameters"),
    events.Evicted(1, ("old",), 20 << 30),
    events.CellFinished(CellReport("net", body_seconds=0.5)),
    events.CellFinished(CellReport("net", ok=False, body_seconds=0.5)),
    events.CompiledOutsideCell("Net.forward"),
    events.CompiledOutsideCell(""),
]


def test_every_event_is_one_line_without_a_prefix_or_doubled_punctuation():
    for event in ALL:
        text = event.text()
        assert text and "\n" not in text and not text.startswith("compile_cache:"), text
        assert ".;" not in text and ";;" not in text and "  " not in text, text


def test_the_figures_read_one_way():
    assert ALL[1].text().startswith("hub redis://h:1/0: Error 111 connecting. Connection refused; carrying on")
    assert ALL[3].text() == (
        "restored 'net' from the hub file:///share (8 files, 367.8 KB) in 1.50 s (245.2 KB/s), pull 0.40 s"
    )
    assert "compiling here too" in ALL[5].text() and "waiting up to 30 s" in ALL[6].text()
    assert ALL[9].text() == "store over 20.0 GB: evicted 1 least recently used version (old)"
    assert events.Evicted(2, ("a", "b"), 1 << 30).text().endswith("2 least recently used versions (a, b)")
    assert ALL[11].text() == "'net' raised after 0.50 s: nothing saved (what a failed cell compiled is not bundled)"


def test_a_session_without_a_front_end_logs_warnings_as_warnings(caplog):
    reporter = events.LoggingReporter()
    with caplog.at_level(logging.INFO, logger="jupyter_compile_cache"):
        reporter(ALL[0])
        reporter(ALL[3])
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.WARNING, ALL[0].text()),
        (logging.INFO, ALL[3].text()),
    ]
    assert reporter.transfer("saving") is events.NO_TRANSFER


def test_a_skipped_version_is_worded_once_each_kind_in_its_own_words():
    """Storage hands over typed skips; the line a user reads names the cause once (a wrong signature's own message
    already says "wrong signature")."""
    from jupyter_compile_cache.core.events import skip_line, skip_warning
    from jupyter_compile_cache.storage import sources

    signed = sources.Skip("hub version V", sources.WRONG_SIGNATURE, "bundle 'net' version V has a wrong signature")
    assert skip_line(signed).count("wrong signature") == 1 and skip_warning("net", signed).endswith("; refused")
    other = sources.Skip("version V", sources.INCOMPATIBLE, "torch: bundle '9.9' vs this kernel '2.15'")
    assert skip_line(other) == "version V: incompatible (torch: bundle '9.9' vs this kernel '2.15')"
    assert not other.worth_telling and signed.worth_telling
    damaged = sources.Skip("version V", sources.DAMAGED, "member k0.so: sha256 differs", "/q/net/V")
    assert skip_line(damaged) == "version V: damaged: member k0.so: sha256 differs; moved to /q/net/V"
    assert (
        skip_warning("net", damaged)
        == "bundle 'net' version V is damaged: member k0.so: sha256 differs; moved to /q/net/V"
    )
    pulled = sources.Skip("hub version V", sources.TRANSFER_FAILED, "timed out", where="the hub redis://h:1/0")
    assert skip_warning("net", pulled) == "could not pull 'net' from the hub redis://h:1/0: timed out"


def test_a_function_compiled_outside_the_cell_is_named_and_a_module_through_torchs_wrapper_is_a_model():
    assert ALL[-2].text().startswith("`Net.forward` was given to torch.compile outside a %%compile_cache cell")
    assert ALL[-1].text().startswith("a model was given to torch.compile") and "call torch.compile in the cell" in (
        ALL[-1].text()
    )
