"""wording.py: a cell's report, skips, mismatches, miss reasons, a kernel's start and where a command looked, each in
its words, with figures said one way (the events' sentences: test_event_wording.py); the session's state worded once
for `status` (the CLI's and the magic's text), the panel's header and the cell's last line, from a real session's
status record."""

from __future__ import annotations

import dataclasses
import html
import json

from helpers.worded import HUB, IDLE, INCOMPATIBLE, LOCAL, OMP_DIFFERS, SIGNED

from jupyter_compile_cache.core import events
from jupyter_compile_cache.core.commands import Commands
from jupyter_compile_cache.core.records import CellReport
from jupyter_compile_cache.core.session import CompileCacheSession
from jupyter_compile_cache.failure import Failure
from jupyter_compile_cache.frontends import event_wording, wording
from jupyter_compile_cache.frontends.panel import Panel, short_path
from jupyter_compile_cache.frontends.tables import StatusView
from jupyter_compile_cache.kernels.kernel_start import Cold, KernelStart, Next
from jupyter_compile_cache.kernels.protocol import TemplateProblem, TemplateTrouble
from jupyter_compile_cache.storage import sources
from jupyter_compile_cache.storage.bundle import FieldMismatch
from jupyter_compile_cache.torch_adapter.miss_reasons import (
    MissCause,
    MissReason,
)


def test_a_skipped_version_is_worded_once_each_kind_in_its_own_words():
    """Storage hands over typed skips; the line a user reads names the cause once (a wrong signature's own message
    already says "wrong signature")."""
    assert wording.skip_line(SIGNED).count("wrong signature") == 1
    assert wording.skip_warning("net", SIGNED).endswith("; refused")
    assert wording.skip_line(INCOMPATIBLE) == "version v1: incompatible (torch: bundle '2.9' vs this kernel '2.13')"
    assert not INCOMPATIBLE.worth_telling and SIGNED.worth_telling
    not_asked = sources.Skip("v3", LOCAL, sources.SkipKind.NOT_WANTED)
    assert wording.skip_line(not_asked) == "version v3: not the version asked for" and not not_asked.worth_telling
    two = (FieldMismatch("torch", "2.9", "2.13"), FieldMismatch("gpu_name", "NVIDIA H100", None))
    assert (
        wording.mismatch_text(two)
        == "torch: bundle '2.9' vs this kernel '2.13'; gpu_name: bundle 'NVIDIA H100' vs this kernel None"
    )
    damaged = sources.Skip("V", LOCAL, sources.SkipKind.DAMAGED, "member k0.so: sha256 differs", "/q/net/V")
    assert wording.skip_line(damaged) == "version V: damaged: member k0.so: sha256 differs; moved to /q/net/V"
    assert (
        wording.skip_warning("net", damaged)
        == "bundle 'net' version V is damaged: member k0.so: sha256 differs; moved to /q/net/V"
    )
    unsafe = sources.Skip("V", LOCAL, sources.SkipKind.UNSAFE, "member ../x escapes", "/q/net/V")
    assert wording.skip_line(unsafe) == "version V: refused (unsafe): member ../x escapes; moved to /q/net/V"
    pulled = sources.Skip("V", HUB, sources.SkipKind.TRANSFER_FAILED, "timed out", tries=3)
    assert wording.skip_warning("net", pulled) == (
        "could not pull 'net' from the hub redis://h:1/0: timed out (tried 3 times, each on a fresh connection)"
    )


def test_why_a_restored_function_compiled_each_cause_in_one_line():
    reasons = [
        MissReason(MissCause.NO_ENTRY, "Net.forward"),
        MissReason(MissCause.OTHER_CODE, "Net.forward", changed=("Net.forward", "helper")),
        MissReason(MissCause.REFUSED, "f", "IndexError: list index out of range"),
        MissReason(MissCause.RESTORED_GUARD_FAILED, "f", "GLOBAL_STATE changed: grad_mode"),
        MissReason(MissCause.GUARD_FAILED, "f"),
        MissReason(MissCause.NEW_GRAPHS, count=2),
        MissReason(MissCause.NO_BACKWARD, count=1),
    ]
    assert [wording.miss_line(r) for r in reasons] == [
        "no saved entry for `Net.forward`",
        "the saved entry of `Net.forward` was compiled for other code: it differs at `Net.forward`, `helper`",
        "torch refused the saved entry of `f` (IndexError: list index out of range)",
        "Dynamo compiled `f` again: a guard of its restored entry failed (GLOBAL_STATE changed: grad_mode)",
        "Dynamo compiled `f` again: torch gave no reason",
        "2 graphs not in the bundle, no function named by torch",
        "1 AOTAutograd graph made again over the restored FX graph: torch saves one only once its backward compiles "
        "(a forward with gradients on; torch's own warm cache misses it too)",
    ]
    assert [r.kind for r in reasons] == [
        "no_entry",
        "code_changed",
        "code_changed",
        "recompiled",
        "recompiled",
        "new_graph",
        "no_backward",
    ]
    # as a run's record keeps them, and as older records kept them: [kind, line]
    kept = [r.to_json() for r in reasons] + [["no_entry", "no saved entry for `g`"], {"cause": "unknown"}]
    assert wording.miss_lines(kept) == [wording.miss_line(r) for r in reasons] + ["no saved entry for `g`"]


def test_a_cells_line_says_its_misses_why_its_push_and_its_save():
    report = CellReport("net", body_seconds=1.25, layers={"fx_graph": {"hits": 3, "misses": 1}})
    report.miss_reasons = [MissReason(MissCause.NO_ENTRY, "Net.forward")]
    assert wording.cell_summary(report) == (
        "'net' ran in 1.25 s, 3 cache hits, 1 miss (no saved entry for `Net.forward`); nothing new to save"
    )
    report.saved_version, report.saved_files, report.saved_bytes, report.pushed = "v", 3, 1 << 20, True
    report.push_seconds = 0.3
    assert "push" not in wording.cell_summary(report)  # a quick push adds nothing to the line
    report.push_seconds = 2.0
    assert "to the local store and the hub (push 2.0 s, 512.0 KB/s)" in wording.cell_summary(report)
    job = CellReport("job", body_seconds=30.0, processes=2, kernels_retuned=40)
    assert wording.cell_summary(job) == (
        "'job' ran in 30.00 s, 0 cache hits, 0 misses; the processes it started re-tuned kernels at run time "
        "(40 new builds, as with torch's own warm cache: not in the bundle); nothing new to save"
    )


def test_what_a_notebooks_plan_could_not_read():
    from jupyter_compile_cache.core.plans import PlanProblem, PlanTrouble

    lines = [wording.plan_problem_line(PlanProblem(trouble, "W", "D")) for trouble in PlanTrouble]
    assert lines == [
        "could not read the notebook W: D",
        "cell W: D",
        "the hub W did not answer (D): only local bundles were looked at",
    ]


def test_how_a_kernel_started():
    assert (
        wording.kernel_start_line(KernelStart("forked", 0.31, 42)) == "forked from a warm template (pid 42) in 0.31 s"
    )
    assert wording.kernel_start_line(KernelStart("cold", 2.0, cold=Cold.NONE_YET)) == (
        "started cold in 2.00 s: no warm template for this environment yet"
    )
    assert wording.kernel_start_line(KernelStart("plain")).startswith("a plain kernel (not the warm kernel spec); ")
    # every reason and every next step has its words, and the launcher's record reads back as it was written
    for cold in Cold:
        for next_ in (*Next, None):
            start = KernelStart(
                "cold", 1.0, cold=cold, detail="d", next=next_, next_failure=Failure("E", "e"), retired=IDLE
            )
            line = wording.kernel_start_line(start)
            assert "None" not in line and "{" not in line and "(the last one retired: idle)" in line, line
            assert KernelStart.from_json(json.loads(json.dumps(start.to_json()))) == start
    said = event_wording.event_text(
        events.PlainKernel(KernelStart("cold", 1.5, cold=Cold.NO_FIT, problem=OMP_DIFFERS, next=Next.STARTED))
    )
    assert said == (
        "this kernel started cold (no warm template fits this launch (OMP_NUM_THREADS differs); one is warming up "
        "for the next kernel); torch's compiler loads now"
    )


def test_every_template_trouble_has_its_words_and_a_refusal_of_fit_says_it_did_not_fit():
    for trouble in TemplateTrouble:
        text = wording.template_problem_text(TemplateProblem(trouble, "D"))
        assert text and "{" not in text, trouble
    shadow = TemplateProblem(TemplateTrouble.SHADOWED, "sympy.py")
    refused = KernelStart("cold", 1.0, cold=Cold.REFUSED, problem=shadow)
    assert wording.cold_start_line(refused) == (
        "the warm template refused: sympy.py in the kernel's folder would shadow a module the template imported"
    )
    unfit = KernelStart("cold", 1.0, cold=Cold.REFUSED, problem=OMP_DIFFERS)
    assert (
        wording.cold_start_line(unfit)
        == "the warm template refused: the template does not fit (OMP_NUM_THREADS differs)"
    )
    assert (
        wording.cold_start_line(KernelStart("cold", 1.0, cold=Cold.REFUSED)) == "the warm template refused: no answer"
    )


def test_where_a_command_looked_and_what_it_did_not_find():
    """Storage and core hand over places and typed errors; each front end words them the same way."""
    from jupyter_compile_cache.core.errors import NoHub, NoSuchVersion, NotFound, NothingFits

    assert wording.place_text(LOCAL) == "the local store /s"
    assert wording.place_text(HUB) == "the hub redis://h:1/0"
    team = sources.Place("hub", "redis://h:1/0", "team")
    assert wording.place_text(team) == "the hub redis://h:1/0 namespace 'team'"
    assert wording.error_text(NotFound("net", LOCAL)) == "no bundle named 'net' in the local store /s"
    assert wording.error_text(NoSuchVersion("net", LOCAL, "zz", "abc1234")) == (
        "'net' has no version 'zz' in the local store /s; its versions: abc1234"
    )
    assert wording.error_text(NothingFits("net", team, [INCOMPATIBLE], False)) == (
        "no version of 'net' in the hub redis://h:1/0 namespace 'team' fits this machine"
    )
    assert wording.error_text(NothingFits("net", HUB, [SIGNED], True)).startswith("wrong signature (another team")
    assert wording.error_text(NoHub()).startswith("no hub: pass --hub URL in a shell; in a notebook %compile_cache hub")
    assert wording.error_text(ValueError("invalid bundle name")) == "invalid bundle name"


def test_where_a_layer_applies_is_worded_once_for_the_table_the_panel_and_the_switch():
    from jupyter_compile_cache.core.records import SwitchScope

    texts = [wording.scope_text(scope) for scope in SwitchScope]
    assert len(set(texts)) == len(texts) and all(texts)  # each scope said, and said apart
    assert (wording.scope_text(SwitchScope.CELLS), wording.scope_text(SwitchScope.KERNEL)) == (
        "%%compile_cache cells",
        "this kernel",
    )


def test_a_layer_and_a_bundle_version_read_alike_in_the_panel_and_the_clis_tables(tmp_path):
    """The panel's grid and `status` / `list` word a layer's switch and whether a version fits with one phrase each
    (the panel's cell short, the whole on hover)."""
    import dataclasses
    import html
    import re

    from jupyter_compile_cache.core.commands import Commands
    from jupyter_compile_cache.core.records import BundleRow, SwitchScope
    from jupyter_compile_cache.core.session import CompileCacheSession
    from jupyter_compile_cache.frontends.panel import Panel
    from jupyter_compile_cache.frontends.tables import BundleTable, StatusView

    session = CompileCacheSession(store_dir=str(tmp_path / "store"))
    try:
        commands = Commands(session)
        status = commands.status(wait=True)
        layer = dataclasses.replace(status.layers[0], scope=SwitchScope.CELLS, switch="a.b.switch")
        status = dataclasses.replace(status, layers=[layer])
        mismatch = (FieldMismatch("torch", "2.9", "2.13"),)
        row = BundleRow("net", "v" * 40, "vvvv", 2048, 3, 0.0, None, "me@box", "hub", False, "fp", mismatch, 2)
        fits = "no; INCOMPLETE: 2 chunks gone from the hub; torch: bundle '2.9' vs this kernel '2.13'"
        assert wording.fits_text(row) == fits
        assert (wording.enabled_text(layer), wording.switch_text(layer)) == ("on (%%compile_cache cells)", "a.b.switch")

        panel = Panel(session)
        panel._layers(status)
        panel._bundles([row], hub=True)
        shown = html.unescape(" ".join(str(c.value) for c in [*panel.layer_box.children, *panel.bundle_box.children]
                                       if isinstance(getattr(c, "value", None), str)))  # fmt: skip
        assert f'title="{layer.title}: on (%%compile_cache cells)"' in shown and 'title="a.b.switch"' in shown
        assert f'title="{fits}"' in shown

        status_text = re.sub(r"\s+", " ", repr(StatusView(status)))
        assert "on (%%compile_cache cells)" in status_text and "a.b.switch" in status_text
        assert fits in html.unescape(BundleTable([row])._repr_html_())
    finally:
        session.close()


def test_status_the_panel_and_the_cell_line_word_each_fact_alike(tmp_path):
    session = CompileCacheSession(store_dir=str(tmp_path / "store"))
    try:
        commands = Commands(session)
        status = dataclasses.replace(
            commands.status(wait=True),
            stale_rejected=2,
            precompile_fallbacks=1,
            torch_remote="redis://cache:6379/0",
            compiler_loading=1.5,
            notebook_path=str(tmp_path / "team.ipynb"),
            notebook_error=Failure("PermissionError", "the notebook went away"),
        )
        facts = wording.status_facts(status, short_path)  # the panel's paths from ~, their middles left out
        assert [f.label for f in facts] == [
            "torch's cache", "local store", "hub", "kernel", "torch's remote caches", "torch's compiler", "notebook",
            "precompile", "time saved",
        ]  # fmt: skip

        text = repr(StatusView(status))  # `status` says each fact whole
        assert [f"{f.label}: {f.full}" for f in wording.status_facts(status)] == text.split("\n")[: len(facts)]
        header = html.unescape(Panel(session)._header_html(status))
        for fact in facts:
            assert f">{fact.label}<" in header and f">{fact.short}<" in header and f"title='{fact.full}'" in header

        refusals = "2 stale precompile entries refused (code changed); 1 function fell back from precompile to plain "
        refusals += "torch.compile"
        assert facts[-2].short == refusals
        cell_line = wording.cell_summary(CellReport("net", stale_rejected=2, precompile_fallbacks=1))
        assert refusals in cell_line, cell_line
    finally:
        session.close()
