"""The line each of the session's events is told in (the magic's lines, the CLI's stderr, the panel's warnings), and
a restore's: one sentence per kind, so the same result reads the same everywhere; the records' smaller phrases
(skips, mismatches, a kernel's start) are wording.py's."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from ..core import events
from ..core.records import RestoreResult, UnreadableManifest
from ..units import count, human_bytes, speed
from .wording import (
    OS_ERRORS,
    cell_summary,
    cold_start_line,
    failure_text,
    place_text,
    skip_line,
    skip_warning,
)

if TYPE_CHECKING:  # the torch adapter's records, imported when a reason is worded: a listing imports none of it
    from ..torch_adapter.compiler import TorchProblem


@functools.singledispatch
def event_text(event: events.Event) -> str:
    """EVENT's one sentence. An event kind without one (a test holds that there is none) is shown as its record:
    a reporter never raises into the cell."""
    return repr(event)


@event_text.register
def _(event: events.CacheWarning) -> str:
    return event.message


@event_text.register
def _(event: events.PlainKernel) -> str:
    if event.start.how == "cold":
        return f"this kernel started cold ({cold_start_line(event.start)}); torch's compiler loads now"
    return (
        "a plain kernel: torch's compiler loads now, as at every start of such a kernel; `jupyter-compile-cache "
        "install-kernel` installs a kernel whose every start has it loaded"
    )


@event_text.register
def _(event: events.HubUnavailable) -> str:
    return f"{event.reason.rstrip('. ')}; carrying on without the hub (the local store is unaffected)"


@event_text.register
def _(event: events.NoTorchRemote) -> str:
    return (
        f"--torch-remote: torch's own remote caches speak to a single Redis server, and the hub {event.hub} is "
        f"{event.kind!s} storage; torch's caches stay on this machine (our bundles still use the hub)"
    )


@event_text.register
def _(event: events.HubRefusal) -> str:
    reason = event.reason.rstrip(". ")
    if event.action == "write":
        return f"{reason}; bundles stay in the local store (restoring from the hub is unaffected)"
    return f"{reason}; carrying on with the local store"


@event_text.register
def _(event: events.NoTeamSecret) -> str:
    return "no team secret (JUPYTER_COMPILE_CACHE_SECRET): hub bundles are neither signed nor verified"


@event_text.register
def _(event: events.Restored) -> str:
    rate = f" ({speed(event.bytes, event.seconds)})" if event.seconds >= 1 else ""
    pulled = f", pull {event.pull_seconds:.2f} s" if event.source == "hub" else ""
    if event.retries:
        broke = "once" if event.retries == 1 else count(event.retries, "time")
        pulled += f" (the hub's connection broke {broke}: pulled again on a fresh one)"
    if event.source == "hub":
        where = f"the hub {event.hub}"
    else:
        where = "the local store" + (", pulled from the hub when the kernel started" if event.fetched_at_start else "")
    return (
        f"restored {event.name!r} from {where} ({count(event.files, 'file')}, {human_bytes(event.bytes)}) "
        f"in {event.seconds:.2f} s{rate}{pulled}"
    )


def unreadable_manifest_text(problem: UnreadableManifest) -> str:
    return f"bundle {problem.name!r} version {problem.version}: unreadable manifest, quarantined ({problem.error})"


@event_text.register
def _(event: events.ManifestQuarantined) -> str:
    return unreadable_manifest_text(event.problem)


def torch_problem_text(problem: TorchProblem) -> str:
    """Why `%load_ext` cannot go on: torch missing or too old."""
    if problem.found is None:
        return "jupyter_compile_cache needs PyTorch: pip install torch (2.9 or newer)"
    return f"jupyter_compile_cache needs PyTorch 2.9 or newer with torch.compiler caches; found {problem.found}"


_LOAD_FIX = {  # by kernel_load_fixes.LoadFix's values: a listing imports nothing of the torch adapter
    "long_name_launcher": "kept torch's launcher for a long-named Triton kernel ({error})",
    "autotune_recheck": "kept torch's autotune recheck ({error})",
    "built_kernel_header": "made torch's precompiled header for a C++ kernel already built ({error})",
}


@event_text.register
def _(event: events.LoadFixFailed) -> str:
    return _LOAD_FIX[event.trouble.fix].format(error=failure_text(event.trouble.error))


@event_text.register
def _(event: events.CachingPrecompileEverywhere) -> str:
    return (
        "TORCH_CACHING_PRECOMPILE=1 turns torch's Dynamo precompile on outside %%compile_cache cells too, where it "
        "drops identity guards and no guard of ours checks edits: plain torch.compile may return stale results after "
        "a helper is redefined. Unset it: our cells switch precompile on themselves"
    )


@event_text.register
def _(event: events.NotRestored) -> str:
    reasons = [unreadable_manifest_text(problem) for problem in event.problems]
    if event.pinned is not None:
        reasons.append(
            f"no version {event.pinned!r} of {event.name!r} (`%compile_cache list {event.name}` shows its ids)"
        )
    reasons += [skip_line(skip) for skip in event.skipped]
    return f"{event.name!r} not restored: " + "; ".join(reasons)


@event_text.register
def _(event: events.SkippedVersion) -> str:
    return skip_warning(event.name, event.skip)


@event_text.register
def _(event: events.CollaboratorCompiling) -> str:
    busy = f"{event.name!r} is being compiled by {event.holder} (for {event.for_seconds:.0f} s)"
    if event.wait_seconds <= 0:
        return f"{busy}; compiling here too (use --wait SECONDS to wait for it)"
    return f"{busy}; waiting up to {event.wait_seconds:.0f} s for that bundle"


@event_text.register
def _(event: events.NoBundleArrived) -> str:
    return f"no bundle for {event.name!r} arrived; compiling"


@event_text.register
def _(event: events.StoodAside) -> str:
    if event.before_body:
        return (
            f"the cache stood aside for {event.name!r} ({failure_text(event.error)}); plain torch.compile runs it, "
            "nothing is saved"
        )
    return f"what {event.name!r} compiled was not saved ({failure_text(event.error)}); the cell's result stands"


def _bypass_reason(reason: str) -> str:
    """torch's reason for leaving a function out of precompile, explained where it says too little."""
    from ..torch_adapter.miss_reasons import NO_GRAPH_REASON

    if not reason.startswith(NO_GRAPH_REASON):
        return reason
    function = reason.removeprefix(NO_GRAPH_REASON).strip()
    return (
        f"it holds no compiled graph of {function}: one run with gradients on is kept once its backward compiles "
        "(under torch.no_grad() it restores whole), one of a backend other than inductor never"
    )


@event_text.register
def _(event: events.PrecompileBypassed) -> str:
    reason = _bypass_reason(event.reason)
    if event.in_processes:
        return (
            f"torch does not package a function of the processes this cell started for precompile ({reason}); "
            "a restored run traces it again, its compiled graph still from torch's AOTAutograd and FX graph caches"
        )
    return (
        f"torch does not package a function of this cell for precompile ({reason}); a restored kernel traces "
        "it again, its compiled graph still from torch's AOTAutograd and FX graph caches"
    )


@event_text.register
def _(event: events.CompiledOutsideCell) -> str:
    what = f"`{event.function}`" if event.function else "a model"
    return (
        f"{what} was given to torch.compile outside a %%compile_cache cell, so torch made it no precompile "
        "package: a restored kernel traces it again (its compiled graph still from torch's caches); call "
        "torch.compile in the cell to restore it without tracing"
    )


@event_text.register
def _(event: events.Evicted) -> str:
    return (
        f"store over {human_bytes(event.cap_bytes)}: evicted {event.count} least recently used "
        f"version{'s' if event.count != 1 else ''} ({', '.join(event.names)})"
    )


@event_text.register
def _(event: events.BuildAidsRemoved) -> str:
    return (
        f"the local store held torch's precompiled headers in {event.count} version"
        f"{'s' if event.count != 1 else ''}, which are no compile result: removed them, freeing "
        f"{human_bytes(event.freed_bytes)}"
    )


@event_text.register
def _(event: events.CompiledWhileLoading) -> str:
    if event.watched:
        ran = "so it compiled as plain torch.compile does, from torch's own caches, without precompile"
    else:
        ran = "so it ran without the cache this time (nothing saved)"
    return (
        f"{event.name!r} compiled while torch's compiler was still loading in the background, {ran}; a cell that "
        "says `torch.compile` or `.compile(` waits for the compiler"
    )


@event_text.register
def _(event: events.NotPushedSignedElsewhere) -> str:
    return (
        f"not pushed {event.name!r} to the hub: its versions there are signed with another secret (is "
        "JUPYTER_COMPILE_CACHE_SECRET the team's?); saved to the local store only"
    )


@event_text.register
def _(event: events.NotListed) -> str:
    names = ", ".join(event.names[:5]) + (" ..." if len(event.names) > 5 else "")
    them = "it" if len(event.names) == 1 else "them"
    return (
        f"{count(len(event.names), 'bundle')} on {place_text(event.where)} not listed: this user is not permitted to "
        f"read {them} ({names})"
    )


@event_text.register
def _(event: events.BadEnvironment) -> str:
    problem = event.problem
    using = "no hub" if problem.using is None else f"using {problem.using}"
    return f"{problem.variable}: {problem.error}; {using}"


_STEP_FAILED = {
    events.Step.SAVE: "could not save bundle {name!r} to {where}: {error}; the cell's result stands",
    events.Step.EVICT: "could not evict old bundles from {where}: {error}",
    events.Step.RUN_BUILDS: (
        "the kernels built at run time for {name!r} were not kept or installed ({error}); the cell's result stands"
    ),
    events.Step.STATISTICS: "the store's statistics were not updated ({error}); the cell's result stands",
    events.Step.PROBE_RESTORE: "the CPU probe programs were not restored ({error})",
    events.Step.PROBE_SAVE: "could not save the CPU probe programs to {where}: {error}",
    events.Step.HEADER_CALLS: (
        "could not keep torch's C++ header checks for the warm kernels to come ({error}); they make them again"
    ),
    events.Step.PREWARM: (
        "preparing torch's compiler in the background stopped ({error}); cells run as they would without it"
    ),
    events.Step.FIND_ELSEWHERE: "looking for another version of {name!r} for a function's code failed ({error})",
    events.Step.VIEW: "a view of this session stopped updating ({error})",
    events.Step.RESTORE_BESIDE: (
        "restoring {name!r} while the job started failed ({error}); its processes compile as without the cache"
    ),
    events.Step.PROCESS_HOOK: (
        "our hook could not be handed to the processes {name!r} starts ({error}); they compile as without it: "
        "their cache hits and misses are not counted, and they trace their code as without --precompile-processes"
    ),
}


# What a failed write of ours met, in the user's words (the library's are "[Errno 28] No space left on device: ...")


@event_text.register
def _(event: events.StepFailed) -> str:
    error = OS_ERRORS.get(event.errno or 0) or failure_text(event.error)
    return _STEP_FAILED[event.step].format(name=event.name, where=event.where, error=error)


_PRECOMPILE_STEP = {
    "record_function": "recording the compiled function",
    "record_sources": "recording the sources it inlined",
    "build_guards": "building the guards to save",
    "load": "loading the saved entry",
    "install": "installing the saved entry",
    "collect": "collecting the entries to save",
    "save": "saving the entry",
    "start_in_process": "starting it in a process the cell started",
    "keep_sizes": "the input sizes of a compiled function cannot be kept ({error})",
    "find_by_code": "looking for a compiled function's entry by its code failed ({error})",
    "use_saved_sizes": "the saved input sizes of a restored function were not used ({error})",
    "save_sizes": "the input sizes of a compiled function were not saved ({error})",
    "merge": "only the last instance of a function compiled several times is saved ({error})",
}


@event_text.register
def _(event: events.PrecompileFailed) -> str:
    trouble = event.trouble
    words, error = _PRECOMPILE_STEP[trouble.step.value], failure_text(trouble.error)
    if trouble.fallback:
        return (
            f"Dynamo precompile failed while {words} ({error}); this function runs the plain torch.compile "
            "way (FX graph and AOTAutograd caches still apply)"
        )
    return words.format(error=error)


@event_text.register
def _(event: events.CellFinished) -> str:
    return cell_summary(event.report)


def restore_line(result: RestoreResult) -> str:
    """What a restore did, in the words the cell's line uses."""
    if result.restored:
        return event_text(events.Restored.of(result))
    if result.skipped:
        return event_text(events.NotRestored(result.name, tuple(result.skipped)))
    return f"{result.name!r} not restored: no bundle of that name fits this machine"


_MOVING = {
    events.Moving.PULL: "pulling {name!r} from the hub",
    events.Moving.RESTORE: "restoring {name!r}",
    events.Moving.SAVE: "saving {name!r}",
    events.Moving.PUSH: "pushing {name!r} to the hub",
}


def transfer_label(moving: events.Moving, name: str) -> str:
    """A transfer's progress bar label."""
    return _MOVING[moving].format(name=name)
