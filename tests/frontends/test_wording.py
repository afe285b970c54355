"""wording.py: every event and a cell's report in one sentence each, without the front end's prefix, with figures
said one way; the golden lines below hold the wording (other tests assert the records' fields)."""

from __future__ import annotations

import json

import pytest

from jupyter_compile_cache.core import events
from jupyter_compile_cache.core.records import CellReport, RestoreResult
from jupyter_compile_cache.core.settings import EnvProblem
from jupyter_compile_cache.frontends import wording
from jupyter_compile_cache.kernels.kernel_start import Cold, KernelStart, Next
from jupyter_compile_cache.kernels.protocol import TemplateProblem, TemplateTrouble
from jupyter_compile_cache.storage import sources
from jupyter_compile_cache.storage.bundle import FieldMismatch
from jupyter_compile_cache.storage.store import UnreadableManifest
from jupyter_compile_cache.torch_adapter.kernel_load_fixes import LoadFix, LoadFixTrouble
from jupyter_compile_cache.torch_adapter.miss_reasons import (
    MissCause,
    MissReason,
    PrecompileStep,
    PrecompileTrouble,
)

OMP_DIFFERS = TemplateProblem(TemplateTrouble.VARIABLE_DIFFERS, "OMP_NUM_THREADS")
IDLE = TemplateProblem(TemplateTrouble.IDLE)
UNREADABLE = UnreadableManifest("net", "v3", "Expecting value")
LOCAL = sources.Place("local", "/s")
HUB = sources.Place("hub", "redis://h:1/0")
TORCH_DIFFERS = (FieldMismatch("torch", "2.9", "2.13"),)
INCOMPATIBLE = sources.Skip("v1", LOCAL, sources.SkipKind.INCOMPATIBLE, mismatches=TORCH_DIFFERS)
SIGNED = sources.Skip("v2", HUB, sources.SkipKind.WRONG_SIGNATURE, "bundle 'net' version v2 has a wrong signature")

ALL = [
    events.CacheWarning("a message of torch's own"),
    events.PlainKernel(KernelStart("plain")),
    events.PlainKernel(KernelStart("cold", 1.5, cold=Cold.NO_FIT, problem=OMP_DIFFERS, next=Next.STARTED)),
    events.HubUnavailable("redis://h:1/0", "hub redis://h:1/0: Error 111 connecting. Connection refused."),
    events.NoTorchRemote("s3://b/p", "s3"),
    events.HubRefusal("redis://h:1/0", "user alice may not write to namespace team.", "write"),
    events.HubRefusal("redis://h:1/0", "wrong password.", "log in"),
    events.NoTeamSecret(),
    events.Restored("net", "hub", "file:///share", False, 8, 376_627, 1.5, 0.4),
    events.Restored("net", "local", None, True, 8, 376_627, 0.2),
    events.NotRestored("net", (INCOMPATIBLE, SIGNED)),
    events.NotRestored("net", (), (), "abc"),
    events.SkippedVersion("net", SIGNED),
    events.CollaboratorCompiling("net", "bob@b", 12.0, 0.0),
    events.CollaboratorCompiling("net", "bob@b", 12.0, 30.0),
    events.NoBundleArrived("net"),
    events.StoodAside("net", True, "OSError: disk full"),
    events.StoodAside("net", False, "OSError: disk full"),
    events.PrecompileBypassed("Graph contains named parameters"),
    events.CompiledOutsideCell("Net.forward"),
    events.CompiledOutsideCell(""),
    events.Evicted(1, ("old",), 20 << 30),
    events.CompiledWhileLoading("net"),
    events.NotPushedSignedElsewhere("net"),
    events.BadEnvironment(EnvProblem("JUPYTER_COMPILE_CACHE_HUB_TTL", "not a number of seconds: 'x'", "0")),
    events.NotListed(sources.Place("hub", "redis://h:1/0"), ("secret-cnn", "secret-net")),
    events.ManifestQuarantined(UNREADABLE),
    events.NotRestored("net", (), (UNREADABLE,)),
    events.CachingPrecompileEverywhere(),
    *[events.LoadFixFailed(LoadFixTrouble(fix, "RuntimeError: x")) for fix in LoadFix],
    *[events.StepFailed(step, "disk full", "net", "/s") for step in events.Step],
    *[events.PrecompileFailed(PrecompileTrouble(step, "OSError: disk full", True)) for step in PrecompileStep],
    *[events.PrecompileFailed(PrecompileTrouble(step, "disk full", False)) for step in PrecompileStep],
    events.CompiledWhileLoading("net", watched=True),
    events.CellFinished(CellReport("net", body_seconds=0.5)),
    events.CellFinished(CellReport("net", ok=False, body_seconds=0.5)),
]


@pytest.mark.parametrize("event", ALL, ids=lambda e: type(e).__name__)
def test_every_event_is_one_line_without_a_prefix_or_doubled_punctuation(event):
    text = wording.event_text(event)
    assert text and "\n" not in text and not text.startswith("compile_cache:"), text
    assert ".;" not in text and ";;" not in text and "  " not in text and "None" not in text, text


def test_every_kind_of_event_has_its_sentence():
    kinds = {type(event) for event in ALL}
    found = [getattr(events, name) for name in dir(events)]
    declared = {k for k in found if isinstance(k, type) and issubclass(k, events.Event)} - {events.Event}
    assert declared <= kinds
    unworded = {k.__name__ for k in declared if wording.event_text.dispatch(k) is wording.event_text.dispatch(object)}
    assert not unworded, unworded


def test_the_golden_lines():
    said = [wording.event_text(event) for event in ALL]
    assert said[3] == (
        "hub redis://h:1/0: Error 111 connecting. Connection refused; carrying on without the hub (the local store "
        "is unaffected)"
    )
    assert (
        said[8] == "restored 'net' from the hub file:///share (8 files, 367.8 KB) in 1.50 s (245.2 KB/s), pull 0.40 s"
    )
    assert said[9] == (
        "restored 'net' from the local store, pulled from the hub when the kernel started (8 files, 367.8 KB) in 0.20 s"
    )
    assert said[10] == (
        "'net' not restored: version v1: incompatible (torch: bundle '2.9' vs this kernel '2.13'); "
        "hub version v2: bundle 'net' version v2 has a wrong signature"
    )
    assert said[11] == "'net' not restored: no version 'abc' of 'net' (`%compile_cache list net` shows its ids)"
    assert "compiling here too" in said[13] and "waiting up to 30 s" in said[14]
    assert said[21] == "store over 20.0 GB: evicted 1 least recently used version (old)"
    assert wording.event_text(events.Evicted(2, ("a", "b"), 1 << 30)).endswith("2 least recently used versions (a, b)")
    assert said[24] == "JUPYTER_COMPILE_CACHE_HUB_TTL: not a number of seconds: 'x'; using 0"
    assert said[25] == (
        "2 bundles on the hub redis://h:1/0 not listed: this user is not permitted to read them (secret-cnn, "
        "secret-net)"
    )
    assert said[26] == "bundle 'net' version v3: unreadable manifest, quarantined (Expecting value)"
    assert said[27] == "'net' not restored: " + said[26]
    assert said[28].startswith("TORCH_CACHING_PRECOMPILE=1 turns torch's Dynamo precompile on outside")
    assert said[29:31] == [
        "kept torch's launcher for a long-named Triton kernel (RuntimeError: x)",
        "kept torch's autotune recheck (RuntimeError: x)",
    ]
    broke = events.Restored("net", "hub", "h", False, 3, 1 << 20, 0.5, 0.4, 2)
    assert "connection broke 2 times: pulled again on a fresh one" in wording.event_text(broke)
    assert said[-1] == "'net' raised after 0.50 s: nothing saved (what a failed cell compiled is not bundled)"
    assert said[-2] == "'net' ran in 0.50 s, 0 cache hits, 0 misses; nothing new to save"
    assert said[-3] == (
        "'net' compiled while torch's compiler was still loading in the background, so it compiled as plain "
        "torch.compile does, from torch's own caches, without precompile; a cell that says `torch.compile` or "
        "`.compile(` waits for the compiler"
    )
    trouble = PrecompileTrouble(PrecompileStep.LOAD, "IndexError: 3", True)
    assert wording.event_text(events.PrecompileFailed(trouble)) == (
        "Dynamo precompile failed while loading the saved entry (IndexError: 3); this function runs the plain "
        "torch.compile way (FX graph and AOTAutograd caches still apply)"
    )
    saved = wording.event_text(events.StepFailed(events.Step.SAVE, "disk full", "net", "/s"))
    assert saved == "could not save bundle 'net' to /s: disk full; the cell's result stands"


def test_a_function_compiled_outside_the_cell_is_named_and_a_module_through_torchs_wrapper_is_a_model():
    named, model = (wording.event_text(events.CompiledOutsideCell(f)) for f in ("Net.forward", ""))
    assert named.startswith("`Net.forward` was given to torch.compile outside a %%compile_cache cell")
    assert model.startswith("a model was given to torch.compile") and "call torch.compile in the cell" in model


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
    ]
    assert [wording.miss_line(r) for r in reasons] == [
        "no saved entry for `Net.forward`",
        "the saved entry of `Net.forward` was compiled for other code: it differs at `Net.forward`, `helper`",
        "torch refused the saved entry of `f` (IndexError: list index out of range)",
        "Dynamo compiled `f` again: a guard of its restored entry failed (GLOBAL_STATE changed: grad_mode)",
        "Dynamo compiled `f` again: torch gave no reason",
        "2 graphs not in the bundle, no function named by torch",
    ]
    assert [r.kind for r in reasons] == [
        "no_entry",
        "code_changed",
        "code_changed",
        "recompiled",
        "recompiled",
        "new_graph",
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


def test_the_panel_and_the_cell_say_a_restore_in_the_same_words():
    result = RestoreResult("net", "hub", "v", 8, 376_627, 1.5, hub_url="file:///share", pull_seconds=0.4)
    assert wording.restore_line(result) == wording.event_text(ALL[8])
    refused = RestoreResult("net", skipped=[INCOMPATIBLE, SIGNED])
    assert wording.restore_line(refused) == wording.event_text(ALL[10])


def test_each_transfer_is_labelled():
    labels = [wording.transfer_label(moving, "net") for moving in events.Moving]
    assert labels == ["pulling 'net' from the hub", "restoring 'net'", "saving 'net'", "pushing 'net' to the hub"]


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
            start = KernelStart("cold", 1.0, cold=cold, detail="d", next=next_, next_detail="e", retired=IDLE)
            line = wording.kernel_start_line(start)
            assert "None" not in line and "{" not in line and "(the last one retired: idle)" in line, line
            assert KernelStart.from_json(json.loads(json.dumps(start.to_json()))) == start
    said = wording.event_text(ALL[2])
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


def test_why_torch_cannot_be_used_is_said_with_what_was_found():
    from jupyter_compile_cache.torch_adapter.compiler import TorchProblem

    assert wording.torch_problem_text(TorchProblem(None)).endswith("pip install torch (2.9 or newer)")
    assert wording.torch_problem_text(TorchProblem("2.3.1")).endswith("torch.compiler caches; found 2.3.1")


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
