"""The words of a cell's report, of the session's state and of the records' parts (a skipped version, a mismatch, a
miss reason, a kernel's start, where a command looked): one phrase per kind, shared by the magic's lines, the CLI and
the panel, so the same result reads the same everywhere. Core, storage, the kernel machinery and the torch adapter
hand over data; only the front ends turn it into words (event_wording.py the events, render.py and tables.py the
commands' records).

The session's state is a list of `Fact`s: `status` prints each as "label: full", the panel shows "short" with "full"
on hover."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.errors import NoHub, NoSuchVersion, NotANotebook, NotFound, NothingFits
from ..core.plans import CellPlan, NotebookPlan, NotRestoring, PlanProblem, PlanTrouble
from ..core.records import (
    FIT_TROUBLES,
    BundleRow,
    CellReport,
    Cold,
    FieldMismatch,
    HubState,
    KernelStart,
    LayerState,
    Next,
    Place,
    SessionStatus,
    Skip,
    SkipKind,
    SwitchScope,
    TemplateProblem,
    TemplateTrouble,
    redact,
)
from ..failure import Failure
from ..units import count, human_bytes, speed

if TYPE_CHECKING:  # the torch adapter's records, imported when a reason is worded: a listing imports none of it
    from ..torch_adapter.miss_reasons import MissReason

INSTALL_HINT = "`jupyter-compile-cache install-kernel` installs a kernel that starts with torch and its compiler loaded"


def mismatch_text(mismatches: Iterable[FieldMismatch]) -> str:
    """The fields on which a version does not fit this machine: "torch: bundle '2.9' vs this kernel '2.13'"."""
    return "; ".join(f"{m.field}: bundle {m.saved!r} vs this kernel {m.current!r}" for m in mismatches)


_SCOPE = {
    SwitchScope.OFF: "off",
    SwitchScope.NOT_AVAILABLE: "n/a",
    SwitchScope.CELLS: "%%compile_cache cells",
    SwitchScope.KERNEL: "this kernel",
    SwitchScope.EVERYWHERE: "everywhere",
    SwitchScope.LOADING: "loading",
}


def scope_text(scope: SwitchScope) -> str:
    """Where a cache layer applies now: 'off', '%%compile_cache cells', 'this kernel'..."""
    return _SCOPE[scope]


def enabled_text(layer: LayerState) -> str:
    """Whether and where a cache layer is on: 'on (this kernel)', 'off', 'n/a', 'loading'."""
    off = layer.scope in (SwitchScope.NOT_AVAILABLE, SwitchScope.OFF, SwitchScope.LOADING)
    return scope_text(layer.scope) if off else f"on ({scope_text(layer.scope)})"


def switch_text(layer: LayerState) -> str:
    """torch's switch of a layer, dotted, or that it has none."""
    return layer.switch or "always on (no switch)"


def fits_text(row: BundleRow) -> str:
    """Whether a version restores here, first, then what stops it, the worst first (a narrow column keeps the start):
    'yes', 'no; INCOMPLETE: 2 chunks gone from the hub; torch: bundle '2.9' vs this kernel '2.13''."""
    parts = ["yes" if row.compatible else "no"]
    parts += [f"INCOMPLETE: {count(row.missing_chunks, 'chunk')} gone from the hub"] if row.missing_chunks else []
    parts += [mismatch_text(row.mismatches)] if row.mismatches and not row.compatible else []
    return "; ".join(parts)


def place_text(place: Place) -> str:
    """Where versions are, as the lines name it: 'the local store /path', 'the hub redis://h:6379/0' (with the
    namespace where a command names the one it works on)."""
    if place.kind == "local":
        return f"the local store {place.location}"
    namespace = f" namespace {place.namespace!r}" if place.namespace is not None else ""
    return f"the hub {place.location}{namespace}"


def not_found_text(exc: NotFound) -> str:
    """No bundle NAME, or no version of it, where a command looked."""
    where = place_text(exc.where)
    if isinstance(exc, NothingFits) and exc.wrong_signatures:
        return (
            f"wrong signature (another team's secret?): no version of {exc.name!r} in {where} is signed with this "
            "JUPYTER_COMPILE_CACHE_SECRET"
        )
    if isinstance(exc, NothingFits):  # each version's reason follows, in skip_line's words
        return f"no version of {exc.name!r} in {where} fits this machine"
    if isinstance(exc, NoSuchVersion):
        return f"{exc.name!r} has no version {exc.version!r} in {where}; its versions: {exc.known}"
    return f"no bundle named {exc.name!r} in {where}"


# How to name a hub: the status lines and the error of a hub command without one say it alike.
NO_HUB_HINT = (
    "%compile_cache hub redis://host:port/0, s3://bucket/prefix or file:///shared/folder, "
    "%config CompileCache.hub = ..., or "
    "JUPYTER_COMPILE_CACHE_HUB"
)


def hub_not_set(state: HubState, previous: str) -> str:
    """`%compile_cache hub URL` on a hub that did not answer: not set, and which hub stays."""
    stays = f"the hub stays {redact(previous)}" if previous else "no hub is set"
    error = (state.error or "it did not answer").removeprefix(f"hub {state.url}: ")
    return f"hub {state.url} not set: {error}; {stays} (`%config CompileCache.hub = URL` sets one that is down for now)"


OS_ERRORS = {  # what a failed write says, in words ("[Errno 28] No space left on device" otherwise)
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is exceeded",
    errno.EFBIG: "a file size limit was reached",
    errno.EROFS: "the folder is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.ENOENT: "no such file",
}


def failure_text(failure: Failure) -> str:
    """A failure ours met, in one line: "Type: message" (the message's first line, 200 characters at most)."""
    lines = failure.message.strip().splitlines()
    message = lines[0][:200] if lines else ""
    return ": ".join(part for part in (failure.kind, message) if part) or "no message"


def error_text(exc: BaseException) -> str:
    """An error a command raised, as the front ends tell it: ours in these words, any other in its own."""
    if isinstance(exc, NotFound):
        return not_found_text(exc)
    if isinstance(exc, NoHub):
        return f"no hub: pass --hub URL in a shell; in a notebook {NO_HUB_HINT}"
    if isinstance(exc, NotANotebook):
        return f"not a notebook: {exc.path} ({exc.detail})"
    if isinstance(exc, OSError) and exc.errno in OS_ERRORS:  # "[Errno 30] Read-only file system: '...'"
        return OS_ERRORS[exc.errno] + (f": {exc.filename}" if exc.filename else "")
    return str(exc)


def skip_label(skip: Skip) -> str:
    """'version V', or 'hub version V' for one on the hub."""
    return f"{'hub ' if skip.where.kind == 'hub' else ''}version {skip.version}"


# What a version was found to be, where a line says it in one word or two.
_FOUND = {SkipKind.UNUSABLE: "unusable", SkipKind.DAMAGED: "damaged", SkipKind.UNSAFE: "refused (unsafe)"}


def skip_line(skip: Skip) -> str:
    """Why a version was passed over, in one line: 'hub version V: incompatible (torch: ...)'."""
    label = skip_label(skip)
    if skip.kind == SkipKind.INCOMPATIBLE:
        return f"{label}: incompatible ({mismatch_text(skip.mismatches)})"
    if skip.kind == SkipKind.NOT_WANTED:
        return f"{label}: not the version asked for"
    if skip.kind in (SkipKind.WRONG_SIGNATURE, SkipKind.TRANSFER_FAILED, SkipKind.NOT_INSTALLED):  # its own words
        return f"{label}: {skip.detail}{_tries(skip)}"
    moved = f"; moved to {skip.moved_to}" if skip.moved_to else ""
    return f"{label}: {_FOUND.get(skip.kind, skip.kind.value)}: {skip.detail}{moved}"


def skip_warning(name: str, skip: Skip) -> str:
    """A skip worth telling even when a later version restored, as a warning line."""
    if skip.kind == SkipKind.WRONG_SIGNATURE:
        return f"{skip.detail}; refused"
    if skip.kind == SkipKind.TRANSFER_FAILED:
        return f"could not pull {name!r} from {place_text(skip.where)}: {skip.detail}{_tries(skip)}"
    if skip.kind == SkipKind.NOT_INSTALLED:
        return f"could not restore bundle {name!r}: {skip.detail}"
    if skip.kind == SkipKind.UNUSABLE:
        return f"bundle {name!r} {skip_label(skip)} from {place_text(skip.where)} is unusable: {skip.detail}"
    found = _FOUND.get(skip.kind, skip.kind.value)
    return f"bundle {name!r} {skip_label(skip)} is {found}: {skip.detail}; moved to {skip.moved_to}"


def _tries(skip: Skip) -> str:
    return f" (tried {skip.tries} times, each on a fresh connection)" if skip.tries > 1 else ""


def miss_line(reason: MissReason) -> str:
    """Why one function of a restored cell compiled."""
    from ..torch_adapter.miss_reasons import MissCause

    cause, function = reason.cause, f"`{reason.function}`"
    detail = f" ({reason.detail})" if reason.detail else ""
    if cause is MissCause.NO_ENTRY:
        return f"no saved entry for {function}"
    if cause is MissCause.OTHER_CODE:
        where = f": it differs at {', '.join(f'`{name}`' for name in reason.changed)}" if reason.changed else ""
        return f"the saved entry of {function} was compiled for other code{where}"
    if cause is MissCause.REFUSED:
        return f"torch refused the saved entry of {function}{detail}"
    if cause is MissCause.RESTORED_GUARD_FAILED:
        return f"Dynamo compiled {function} again: a guard of its restored entry failed{detail}"
    if cause is MissCause.GUARD_FAILED:
        return f"Dynamo compiled {function} again: " + (f"a guard failed{detail}" if detail else "torch gave no reason")
    if cause is MissCause.NO_BACKWARD:
        return (
            f"{count(reason.count, 'AOTAutograd graph')} made again over the restored FX "
            f"{'graphs' if reason.count > 1 else 'graph'}: torch saves one only once its backward compiles "
            "(a forward with gradients on; torch's own warm cache misses it too)"
        )
    return f"{count(reason.count, 'graph')} not in the bundle, no function named by torch"


def miss_lines(recorded: Iterable[Any]) -> list[str]:
    """The reasons a run's record kept (MissReason, or their JSON), as lines; an older record's [kind, line] as it
    was said."""
    from ..torch_adapter.miss_reasons import MissReason

    lines = []
    for item in recorded:
        if isinstance(item, MissReason):
            lines.append(miss_line(item))
        elif isinstance(item, dict) and (reason := MissReason.from_json(item)) is not None:
            lines.append(miss_line(reason))
        elif isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[1], str):
            lines.append(item[1])
    return lines


def precompile_refusals(stale: int, fallbacks: int) -> str:
    """What precompile did not restore, worded once for the cell's line, `status` and the panel ('' for nothing)."""
    parts = [f"{count(stale, 'stale precompile entry')} refused (code changed)"] if stale else []
    if fallbacks:
        parts.append(f"{count(fallbacks, 'function')} fell back from precompile to plain torch.compile")
    return "; ".join(parts)


def cell_summary(report: CellReport) -> str:
    """The one line a cell ends with."""
    if not report.ok and report.job_status is not None:
        return (
            f"{report.name!r}: the command exited with status {report.job_status} after {report.body_seconds:.2f} s: "
            "nothing saved (what a failed command compiled is not bundled)"
        )
    if not report.ok:
        return (
            f"{report.name!r} raised after {report.body_seconds:.2f} s: nothing saved "
            "(what a failed cell compiled is not bundled)"
        )
    hits = sum(v.get("hits", 0) for v in report.layers.values())
    misses = sum(v.get("misses", 0) for v in report.layers.values())
    ran = f"{report.name!r}: the command ran" if report.job_status is not None else f"{report.name!r} ran"
    parts = [f"{ran} in {report.body_seconds:.2f} s, {count(hits, 'cache hit')}, {count(misses, 'miss')}"]
    saving = report.saving() if report.job_status is not None else None
    if saving is not None:  # a job has no panel or stats table beside it: its line says what the restore saved
        parts.append(
            f"{saving.saved:.1f} s of compiling saved against its cold run ({saving.cold:.1f} s, estimate)"
            if saving.saved >= 0.05
            else f"no time saved against its cold run ({saving.cold:.1f} s)"
        )
    reasons = miss_lines(report.miss_reasons)
    if reasons and misses:
        parts[0] += f" ({'; '.join(reasons)})"
    elif reasons:  # Dynamo traced again, though every graph came from the caches
        parts.append("traced again from the caches: " + "; ".join(reasons))
    if report.compiled_elsewhere:
        parts.append(f"the processes it started compiled {count(report.compiled_elsewhere, 'new file')}")
    carried = report.processes_share
    if carried is not None and carried.processes:
        parts.append(
            f"{count(carried.processes, 'process')} it started ran with precompile: "
            f"{count(carried.hits, 'entry')} restored, {count(carried.traced, 'frame')} traced by Dynamo"
        )
    elif carried is not None and carried.torch_without_precompile:
        parts.append(
            f"the processes it started run torch {carried.torch_without_precompile}, which has no Dynamo precompile "
            "we can check (2.11 on): they traced as without --precompile-processes"
        )
    elif carried is not None and carried.precompile and not carried.troubles:  # (a failure to start: its own line)
        parts.append(
            "no process it started ran with precompile (none called torch.compile, or none could import "
            "jupyter_compile_cache: another Python, or one that ignores PYTHONPATH)"
        )
    if report.kernels_retuned:
        kept = (
            f"{count(report.run_builds_kept, 'kernel')} kept on this machine for the next restore, not in the bundle"
            if report.run_builds_kept
            else "not in the bundle"
        )
        parts.append(
            f"the processes it started re-tuned kernels at run time ({count(report.kernels_retuned, 'new build')}, "
            f"as with torch's own warm cache: {kept})"
        )
    refusals = precompile_refusals(report.stale_rejected, report.precompile_fallbacks)
    if refusals:
        parts.append(refusals)
    if report.staged_wait_seconds >= 0.5:
        parts.append(f"waited {report.staged_wait_seconds:.1f} s for its bundle, on its way from the hub")
    if report.waited_seconds >= 0.5:
        parts.append(f"waited {report.waited_seconds:.1f} s for torch's compiler to load (once per kernel)")
    if report.saved_version:
        where = "the local store and the hub" if report.pushed else "the local store"
        if report.push_left_to is not None and not report.pushed:
            where += f" (the hub gets {report.push_left_to}'s, compiled at the same time)"
        took = (
            f" in {report.save_seconds:.1f} s ({speed(report.saved_bytes, report.save_seconds)})"
            if report.save_seconds >= 1
            else ""
        )
        if report.pushed and report.push_seconds >= 1:
            took += f" (push {report.push_seconds:.1f} s, {speed(report.saved_bytes, report.push_seconds)})"
        parts.append(f"saved {count(report.saved_files, 'file')} ({human_bytes(report.saved_bytes)}) to {where}{took}")
    elif report.save_failed:
        parts.append("not saved (the warning says why)")
    else:
        parts.append("nothing new to save")
        if report.pushed:  # the version it restored, which the hub lacked
            parts.append("pushed the restored version to the hub, which lacked it")
    return "; ".join(parts)


def why_not_line(cell: CellPlan) -> str:
    """Why a notebook cell will not restore when Run All reaches it ("" when it will)."""
    why = cell.why_not
    if why is None:
        return ""
    if why is NotRestoring.BY_CHOICE:
        return "--no-restore: it compiles cold by choice"
    if why is NotRestoring.NOTHING_SAVED:
        return "no bundle saved yet: it compiles, then saves one"
    if why is NotRestoring.SAVED_ELSEWHERE:
        return f"its bundles were saved elsewhere ({mismatch_text(cell.mismatches)})"
    if why is NotRestoring.CELL_CHANGED:
        return "the cell's code changed since the save: what changed compiles again"
    return (
        f"code it calls changed since the save: its last restore refused {count(cell.refused, 'entry')} "
        "(they compile again)"
    )


_PLAN_TROUBLE = {
    PlanTrouble.UNREADABLE_NOTEBOOK: "could not read the notebook {where}: {detail}",
    PlanTrouble.BAD_CELL_LINE: "cell {where}: {detail}",
    PlanTrouble.HUB_SILENT: "the hub {where} did not answer ({detail}): only local bundles were looked at",
}


def plan_problem_line(problem: PlanProblem) -> str:
    """What a notebook's plan could not read."""
    return _PLAN_TROUBLE[problem.trouble].format(where=problem.where, detail=problem.detail)


def kernel_start_line(start: KernelStart) -> str:
    """How this kernel started, for `status` and the panel."""
    if start.how == "forked":
        return f"forked from a warm template (pid {start.template_pid}) in {start.seconds:.2f} s"
    if start.how == "cold":
        return f"started cold in {start.seconds or 0:.2f} s: {cold_start_line(start)}"
    return f"a plain kernel (not the warm kernel spec); {INSTALL_HINT}"


_COLD = {
    Cold.OFF: "{detail}",
    Cold.NO_FORK: "no warm templates on {detail}",
    Cold.NO_RUNTIME_DIR: "no private runtime folder for templates",
    Cold.LOOKUP_FAILED: "looking for a warm template failed ({detail})",
    Cold.NO_FIT: "no warm template fits this launch ({problem})",
    Cold.REFUSED: "the warm template refused: {problem}",
    Cold.TEMPLATE_SILENT: "the warm template did not answer ({detail})",
    Cold.NONE_YET: "no warm template for this environment yet",
    Cold.KERNEL_SILENT: "the kernel's process did not answer",
}
_NEXT = {
    Next.KEPT: "",
    Next.WARMING: "; the template for it is still warming up, and the first kernel started after it is ready is forked "
    "(`config` says where it is)",
    Next.FAILED: "; the last template for it could not warm up ({detail})",
    Next.NOT_STARTED: "; a template could not be started",
    Next.STARTED: "; one is warming up for the next kernel",
}


_TEMPLATE_TROUBLE = {
    TemplateTrouble.OTHER_PYTHON: "another Python ({detail})",
    TemplateTrouble.PACKAGES_CHANGED: "installed packages changed since it started",
    TemplateTrouble.VARIABLE_DIFFERS: "{detail} differs",
    TemplateTrouble.THREAD_RUNNING: "a thread is running in the template",
    TemplateTrouble.THREADS_AFTER_IMPORT: "threads started in the template after torch's import (a CPU thread pool?): "
    "{detail}",
    TemplateTrouble.CUDA_INITIALIZED: "CUDA was initialized in the template",
    TemplateTrouble.SHADOWED: "{detail} in the kernel's folder would shadow a module the template imported",
    TemplateTrouble.FORK_FAILED: "fork failed ({detail})",
    TemplateTrouble.IDLE: "idle",
    TemplateTrouble.HOLDERS_GONE: "the processes that launched kernels from it are gone",
    TemplateTrouble.FILE_REMOVED: "its file was removed",
}


def template_problem_text(problem: TemplateProblem | None, refused: bool = False) -> str:
    """A template's trouble; as a refusal, one of fit says the template did not fit."""
    if problem is None:
        return "no answer"
    text = _TEMPLATE_TROUBLE[problem.trouble].format(detail=problem.detail)
    return f"the template does not fit ({text})" if refused and problem.trouble in FIT_TROUBLES else text


def cold_start_line(start: KernelStart) -> str:
    """Why the warm kernel's launcher started this kernel cold, and what it did for the next one."""
    problem = template_problem_text(start.problem, refused=start.cold is Cold.REFUSED)
    detail = failure_text(start.failure) if start.failure else start.detail or "no answer"
    why = _COLD[start.cold].format(detail=detail, problem=problem) if start.cold else "not forked"
    if start.retired is not None:
        why += f" (the last one retired: {template_problem_text(start.retired)})"
    if start.next is not None:
        failed = start.next_failure
        why += _NEXT[start.next].format(detail=failure_text(failed) if failed else "no word from it")
    return why


@dataclass(frozen=True)
class Fact:
    label: str
    short: str  # one line of the panel's header
    full: str  # `status`'s line, the panel's hover


def status_facts(status: SessionStatus, short_path: Callable[[str], str] = str) -> list[Fact]:
    """The facts of STATUS that both `status` and the panel show; `short_path` shortens a path for the panel."""
    s = status
    store = f"{human_bytes(s.store_bytes)} of the {human_bytes(s.max_bytes)} cap "
    store += f"({100 * s.store_bytes / max(s.max_bytes, 1):.1f} %) in "
    kernel = kernel_start_line(s.kernel_start)
    facts = [
        Fact("torch's cache", short_path(s.cache_dir), s.cache_dir),
        Fact("local store", store + short_path(s.store_dir), store + s.store_dir),
        Fact("hub", hub_line(s.hub) if s.hub.url else "none: %compile_cache hub URL sets one", hub_line(s.hub)),
        Fact("kernel", kernel.split(";")[0].split(" (")[0], kernel),
    ]
    if s.torch_remote:
        remote = (
            f"torch's own FX graph, AOTAutograd and autotune caches use the hub {s.torch_remote} in this whole kernel, "
            "not only in our cells (--torch-remote; %unload_ext puts them back)"
        )
        facts.append(Fact("torch's remote caches", s.torch_remote, remote))
    if s.compiler_loading is not None:
        loading = f"still loading in the background ({s.compiler_loading:.1f} s so far)"
        after = "the layers show what is on disk, their switches and counters once it has loaded (status again)"
        facts.append(Fact("torch's compiler", loading, f"{loading}; {after}"))
    if s.notebook is not None:
        line = notebook_line(s.notebook, s.notebook_fetched)
        facts.append(Fact("notebook", line.split("; not ")[0], line))
    elif s.notebook_error is not None:
        short, error = "its bundles were not fetched ahead", failure_text(s.notebook_error)
        full = f"{s.notebook_path}: {short} ({error}); each cell fetches its own"
        facts.append(Fact("notebook", f"{short}: {error}", full))
    elif s.notebook_path is not None:
        short = "its bundles are still being fetched"
        facts.append(Fact("notebook", short, f"{s.notebook_path}: {short} (status again)"))
    refusals = precompile_refusals(s.stale_rejected, s.precompile_fallbacks)
    if refusals:
        facts.append(Fact("precompile", refusals, refusals + " this session"))
    if s.time_saved is not None:
        saved = f"{s.time_saved.total:.1f} s of compiling this session (estimate)"
        facts.append(Fact("time saved", saved, saved))
    return facts


def plan_headline(plan: NotebookPlan) -> str:
    return f"Run All will restore {plan.restoring} of {count(len(plan.cells), '%%compile_cache cell')}"


def notebook_line(plan: NotebookPlan, fetched: int = 0) -> str:
    """'Run All will restore 3 of 4 %%compile_cache cells (...)': the headline `status` and the panel show."""
    if not plan.cells:
        return f"notebook {os.path.basename(plan.path)}: no %%compile_cache cells"
    ahead = f", {fetched} fetched from the hub ahead" if fetched else ""
    others = [f"cell {c.index} {c.name!r}" for c in plan.cells if not c.restores]
    why = f"; not {', '.join(others)} (`%compile_cache explain` says why)" if others else ""
    return f"{plan_headline(plan)} of {os.path.basename(plan.path)}{ahead}{why}"


def hub_line(hub: HubState) -> str:
    """'redis://host:6379/0 namespace 'team': reachable (0.4 ms); ...', or 'none (how to set one)'."""
    if not hub.url:
        return f"none ({NO_HUB_HINT})"
    kinds = {"redis cluster": "Redis Cluster", "folder": "shared folder", "s3": "S3", "gcs": "Google Cloud Storage",
             "azure": "Azure Blob Storage"}  # fmt: skip
    kind = f"{kinds[hub.kind]}, " if hub.kind in kinds else ""
    error = (hub.error or "").removeprefix(f"hub {hub.url}: ")  # the line names the hub already
    state = f"reachable ({kind}{hub.latency_ms:.1f} ms)" if hub.reachable else f"failed: {error}"
    signed = "bundles signed with the team secret" if hub.signed else "no team secret: pulled bundles trusted"
    return f"{hub.url} namespace {hub.namespace!r}: {state}; {signed}"
