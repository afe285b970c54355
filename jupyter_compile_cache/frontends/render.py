"""Every record a command returns, in words: one renderer per record type, shared by the magic (text and HTML), the
CLI (text) and `--json` (the same data in both). A front end asks `view` for what to show, `refusal` for a change
that did nothing and says why, `as_json` for `--json`, and tells a NotFound (`wording.not_found_text`) as its errors."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..core.errors import NoSuchVersion, NotFound, NothingFits
from ..core.plans import NotebookPlan
from ..core.records import (
    BundleExplanation,
    BundleRow,
    Configuration,
    Exported,
    HubCheck,
    HubListing,
    HubState,
    Imported,
    Pulled,
    Pushed,
    PushedAll,
    Refusal,
    Removed,
    SessionStatus,
    StoreStatistics,
    SwitchScope,
    short_id,
)
from ..units import count, human_bytes, speed
from . import tables, wording
from .wording import hub_line

if TYPE_CHECKING:
    from ..torch_adapter.layers import Layer

# What a command returns: a table or a few lines.
Record = (
    SessionStatus | list[BundleRow] | HubListing | BundleExplanation | NotebookPlan | StoreStatistics | Removed
    | Pushed | PushedAll | Pulled | Exported | Imported | HubState | Configuration | HubCheck
)  # fmt: skip


def switch_line(layer: Layer, scope: SwitchScope) -> str:
    """What `enable` / `disable` changed: LAYER, on where `Commands.switch_scope` says now; for the magic and the
    panel."""
    if layer.name == "dynamo_precompile":
        if scope is SwitchScope.EVERYWHERE:
            return (
                f"{layer.title}: torch's own caching_precompile is on, so plain torch.compile outside our cells "
                "drops identity guards too; unset TORCH_CACHING_PRECOMPILE (our cells switch it on themselves)"
            )
        if scope is SwitchScope.OFF:
            return f"{layer.title} off (CompileCache.precompile = False)"
        return (
            f"{layer.title} on in %%compile_cache cells only (CompileCache.precompile = True; torch's "
            "caching_precompile is on only while such a cell runs)"
        )
    switch = ".".join(layer.switch) if layer.switch else "always on"
    state = "off" if scope is SwitchScope.OFF else "on"
    return f"{layer.title} {state} in this kernel ({switch} = {layer.switch_value()})"


def _removed(r: Removed) -> list[str]:
    lines = tables.removal_lines(r.removals, r.where, r.dry_run)
    return lines[:-1] if r.refused else lines  # refused: the plan, without "dry run" (refusal says it)


def _pushed(r: Pushed) -> list[str]:
    m = r.manifest
    return [
        f"pushed {m.name!r} version {short_id(m.version)} ({human_bytes(m.payload_bytes)}, "
        f"{count(len(m.chunk_sha256 or []), 'chunk')}) to {wording.place_text(r.where)} in {r.seconds:.2f} s "
        f"({speed(m.payload_bytes, r.seconds)})"
    ]


def _pushed_all(r: PushedAll) -> list[str]:
    lines = [line for pushed in r.pushed for line in _pushed(pushed)]
    if r.present:
        lines.append(f"already on {wording.place_text(r.where)}: {', '.join(repr(name) for name in r.present)}")
    if not lines:
        lines.append(f"nothing to push: the local store is empty ({wording.place_text(r.where)} unchanged)")
    if r.listing is not None:
        folder = os.path.dirname(r.listing)
        lines.append(f"wrote the listing {r.listing}: serve {folder} as static files, and its URL is a read-only hub")
    return lines


_ORIGINS = {"config": "%config or ipython_config.py", "set": "set here (--store, %compile_cache hub, the API)"}


def _configuration(r: Configuration) -> list[str]:
    width = max(len(s.name) for s in r.settings)
    values = [s.value or "(none)" for s in r.settings]
    value_width = min(60, max(len(v) for v in values))
    lines = [f"{'setting'.ljust(width)}  {'value'.ljust(value_width)}  from"]
    for setting, value in zip(r.settings, values):
        origin = _ORIGINS.get(setting.origin, setting.origin)
        lines.append(f"{setting.name.ljust(width)}  {value.ljust(value_width)}  {origin}")
    lines.append(f"local store: {human_bytes(r.store_bytes)} of the {human_bytes(r.max_bytes)} cap in {r.store_dir}")
    if not r.templates and not r.warming:
        where = f" ({r.runtime_dir})" if r.runtime_dir else ""
        lines.append(f"warm kernel templates: none running{where}")
    for w in r.warming:
        memory = human_bytes(w.rss_bytes) if w.rss_bytes is not None else "memory unknown"
        doing = {
            "quiet": f"waiting for a quiet machine (at most {_minutes(w.quiet_wait)}), then importing torch and its "
            "compiler",
            "importing": "importing torch and its compiler on idle CPU time",
        }.get(w.step, "importing torch and its compiler at a low priority (the machine stayed busy)")
        lines.append(
            f"warm kernel template warming up: pid {w.pid}, {memory}, for {w.age_seconds:.0f} s, {doing}; "
            "kernels started meanwhile start cold, the next one after it is ready is forked"
        )
    for t in r.templates:
        memory = human_bytes(t.rss_bytes) if t.rss_bytes is not None else "memory unknown"
        lines.append(
            f"warm kernel template: pid {t.pid}, {memory}, up {t.age_seconds / 60:.0f} min, "
            f"{count(t.kernels, 'kernel')} forked from it running ({t.python}); it stays {_minutes(t.grace_seconds)} "
            f"after the last process that started kernels from it ends, "
            f"{_minutes(t.idle_seconds) if t.idle_seconds > 0 else 'with no limit'} without a start"
        )
    return lines


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:g} min" if seconds >= 60 else f"{seconds:g} s"


def _hub_check(r: HubCheck) -> list[str]:
    lines = [f"hub {hub_line(r.state)}"]
    if r.credential is not None:
        lines.append(f"credential: from {r.credential}")
    if r.state.reachable is False:
        return lines
    if r.read is not None:
        return [*lines, f"read: refused: {r.read}"]
    if r.verified is None:
        signed = "no team secret set: pulled bundles are trusted unverified"
    elif not r.unverified:
        signed = "every one signed with the team secret" if r.versions else "none to check against the team secret"
    else:
        signed = (
            f"{r.unverified} of {r.versions} not signed with the team secret (another team's secret, or made before "
            "it was set): they will not restore here"
        )
    lines.append(f"read: permitted, {count(r.versions, 'version')} listed; {signed}")
    lines.append(f"write: refused: {r.write}" if r.write else "write: permitted (a lease taken and given back)")
    return lines


def _pulled(r: Pulled) -> list[str]:
    m = r.manifest
    return [f"skipped {wording.skip_line(skip)}" for skip in r.skipped] + [
        f"pulled {m.name!r} version {short_id(m.version)} ({human_bytes(m.payload_bytes)}) into {r.store_dir} in "
        f"{r.seconds:.2f} s ({speed(m.payload_bytes, r.seconds)})"
    ]


def _imported(r: Imported) -> list[str]:
    m = r.manifest
    state = "imported" if r.new else "already in the store:"
    return [f"{state} {m.name!r} version {short_id(m.version)} ({human_bytes(m.payload_bytes)})"]


def _exported(r: Exported) -> list[str]:
    return [f"exported {r.manifest.name!r} version {short_id(r.manifest.version)} to {r.path}"]


def _hub_listing(r: HubListing) -> Any:
    view = tables.BundleTable(r.rows)
    view.title = wording.place_text(r.where).removeprefix("the ")
    return view


_VIEWS: dict[type, Callable[[Any], Any]] = {
    SessionStatus: tables.StatusView,
    HubListing: _hub_listing,
    BundleExplanation: tables.Explanation,
    NotebookPlan: tables.NotebookPlanView,
    StoreStatistics: tables.StatsView,
}
_LINES: dict[type, Callable[[Any], list[str]]] = {
    Removed: _removed,
    Pushed: _pushed,
    PushedAll: _pushed_all,
    Configuration: _configuration,
    HubCheck: _hub_check,
    Pulled: _pulled,
    Imported: _imported,
    Exported: _exported,
    HubState: lambda h: [f"hub {hub_line(h)}" if h.url else f"no hub ({wording.NO_HUB_HINT})"],
}


def view(record: Record) -> Any:
    """What shows RECORD: a table view, or `tables.Lines` (both: text by `repr`, HTML by `_repr_html_`)."""
    if isinstance(record, list):
        return tables.BundleTable(record)
    kind = type(record)
    if kind in _VIEWS:
        return _VIEWS[kind](record)
    return tables.Lines(_LINES[kind](record), record)


def not_found(exc: NotFound) -> str:
    """A NotFound in words that say what to do next: the names it may have meant, else where to see them."""
    import difflib

    text = wording.not_found_text(exc)
    if isinstance(exc, NothingFits):
        return text + "".join(f"\n  {wording.skip_line(skip)}" for skip in exc.skipped)
    if isinstance(exc, NoSuchVersion) or exc.name in exc.names:
        return text
    near = difflib.get_close_matches(exc.name, exc.names, n=3, cutoff=0.6)
    if near:
        return f"{text}; did you mean {' or '.join(repr(n) for n in near)}?"
    if exc.names:
        listing = "`hub ls`" if exc.where.kind == "hub" else "`list`"
        return f"{text}; {listing} shows the {count(len(exc.names), 'bundle')} there"
    return f"{text}, which holds no bundle yet"


def refusal(record: Record) -> str | None:
    """For a change that did nothing on purpose (a gc that would empty the store, a hub rm of every version without
    --yes): why, and how to go on. The front end tells it as an error, after the plan `view` shows."""
    if isinstance(record, Removed) and record.refused is not None:
        if record.refused is Refusal.EMPTIES_STORE:
            why = "this empties the store"
        else:
            names = sorted({removal.name for removal in record.removals})
            why = f"this removes every version of {', '.join(map(repr, names))} from the team's hub"
        return f"{why}: nothing removed; run again with --yes"
    return None


def as_json(record: Record) -> Any:
    """RECORD as JSON-ready data (dicts and lists): what `--json` prints, and what the magic returns with it."""
    if isinstance(record, list):
        return [dataclasses.asdict(r) for r in record]
    if isinstance(record, HubListing):
        return [dataclasses.asdict(r) for r in record.rows]
    if isinstance(record, StoreStatistics):  # statistics flatten their counters
        return record.to_json()
    data = dataclasses.asdict(record)
    if isinstance(record, Removed):  # each removal as an object, not a bare list
        data["removals"] = [r._asdict() for r in record.removals]
    return data
