"""event_wording.py: every event in one sentence, without the front end's prefix, with figures said one way; the
golden lines below hold the wording (other tests assert the records' fields)."""

from __future__ import annotations

import pytest
from helpers.worded import INCOMPATIBLE, OMP_DIFFERS, SIGNED

from jupyter_compile_cache.core import events
from jupyter_compile_cache.core.records import CellReport, RestoreResult
from jupyter_compile_cache.core.settings import EnvProblem
from jupyter_compile_cache.failure import Failure
from jupyter_compile_cache.frontends import event_wording
from jupyter_compile_cache.kernels.kernel_start import Cold, KernelStart, Next
from jupyter_compile_cache.storage import sources
from jupyter_compile_cache.storage.store import UnreadableManifest
from jupyter_compile_cache.torch_adapter.kernel_load_fixes import LoadFix, LoadFixTrouble
from jupyter_compile_cache.torch_adapter.miss_reasons import (
    PrecompileStep,
    PrecompileTrouble,
)

UNREADABLE = UnreadableManifest("net", "v3", "Expecting value")

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
    events.StoodAside("net", True, Failure("OSError", "disk full")),
    events.StoodAside("net", False, Failure("OSError", "disk full")),
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
    *[events.LoadFixFailed(LoadFixTrouble(fix, Failure("RuntimeError", "x"))) for fix in LoadFix],
    *[events.StepFailed(step, Failure("", "disk full"), "net", "/s") for step in events.Step],
    *[
        events.PrecompileFailed(PrecompileTrouble(step, Failure("OSError", "disk full"), True))
        for step in PrecompileStep
    ],
    *[events.PrecompileFailed(PrecompileTrouble(step, Failure("", "disk full"), False)) for step in PrecompileStep],
    events.BuildAidsRemoved(2, 300 << 20),
    events.CompiledWhileLoading("net", watched=True),
    events.CellFinished(CellReport("net", body_seconds=0.5)),
    events.CellFinished(CellReport("net", ok=False, body_seconds=0.5)),
]


@pytest.mark.parametrize("event", ALL, ids=lambda e: type(e).__name__)
def test_every_event_is_one_line_without_a_prefix_or_doubled_punctuation(event):
    text = event_wording.event_text(event)
    assert text and "\n" not in text and not text.startswith("compile_cache:"), text
    assert ".;" not in text and ";;" not in text and "  " not in text and "None" not in text, text


def test_every_kind_of_event_has_its_sentence():
    kinds = {type(event) for event in ALL}
    found = [getattr(events, name) for name in dir(events)]
    declared = {k for k in found if isinstance(k, type) and issubclass(k, events.Event)} - {events.Event}
    assert declared <= kinds
    unworded = {
        k.__name__
        for k in declared
        if event_wording.event_text.dispatch(k) is event_wording.event_text.dispatch(object)
    }
    assert not unworded, unworded


def test_the_golden_lines():
    said = [event_wording.event_text(event) for event in ALL]
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
    assert event_wording.event_text(events.BuildAidsRemoved(2, 300 << 20)) == (
        "the local store held torch's precompiled headers in 2 versions, which are no compile result: removed them, "
        "freeing 300.0 MB"
    )
    assert event_wording.event_text(events.Evicted(2, ("a", "b"), 1 << 30)).endswith(
        "2 least recently used versions (a, b)"
    )
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
    assert "connection broke 2 times: pulled again on a fresh one" in event_wording.event_text(broke)
    assert said[-1] == "'net' raised after 0.50 s: nothing saved (what a failed cell compiled is not bundled)"
    assert said[-2] == "'net' ran in 0.50 s, 0 cache hits, 0 misses; nothing new to save"
    assert said[-3] == (
        "'net' compiled while torch's compiler was still loading in the background, so it compiled as plain "
        "torch.compile does, from torch's own caches, without precompile; a cell that says `torch.compile` or "
        "`.compile(` waits for the compiler"
    )
    trouble = PrecompileTrouble(PrecompileStep.LOAD, Failure("IndexError", "3"), True)
    assert event_wording.event_text(events.PrecompileFailed(trouble)) == (
        "Dynamo precompile failed while loading the saved entry (IndexError: 3); this function runs the plain "
        "torch.compile way (FX graph and AOTAutograd caches still apply)"
    )
    saved = event_wording.event_text(events.StepFailed(events.Step.SAVE, Failure("", "disk full"), "net", "/s"))
    assert saved == "could not save bundle 'net' to /s: disk full; the cell's result stands"


def test_a_function_compiled_outside_the_cell_is_named_and_a_module_through_torchs_wrapper_is_a_model():
    named, model = (event_wording.event_text(events.CompiledOutsideCell(f)) for f in ("Net.forward", ""))
    assert named.startswith("`Net.forward` was given to torch.compile outside a %%compile_cache cell")
    assert model.startswith("a model was given to torch.compile") and "call torch.compile in the cell" in model


def test_the_panel_and_the_cell_say_a_restore_in_the_same_words():
    result = RestoreResult("net", "hub", "v", 8, 376_627, 1.5, hub_url="file:///share", pull_seconds=0.4)
    assert event_wording.restore_line(result) == event_wording.event_text(ALL[8])
    refused = RestoreResult("net", skipped=[INCOMPATIBLE, SIGNED])
    assert event_wording.restore_line(refused) == event_wording.event_text(ALL[10])


def test_each_transfer_is_labelled():
    labels = [event_wording.transfer_label(moving, "net") for moving in events.Moving]
    assert labels == ["pulling 'net' from the hub", "restoring 'net'", "saving 'net'", "pushing 'net' to the hub"]


def test_why_torch_cannot_be_used_is_said_with_what_was_found():
    from jupyter_compile_cache.torch_adapter.compiler import TorchProblem

    assert event_wording.torch_problem_text(TorchProblem(None)).endswith("pip install torch (2.9 or newer)")
    assert event_wording.torch_problem_text(TorchProblem("2.3.1")).endswith("torch.compiler caches; found 2.3.1")
