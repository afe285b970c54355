"""The session's state in words, once for every front end: `status` prints each fact as "label: full", the panel shows
"short" with "full" on hover, and the cell's last line words precompile's refusals the same way."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from ..core.plans import NotebookPlan
from ..core.records import HubState, SessionStatus
from ..units import count, human_bytes
from . import wording


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
    kernel = wording.kernel_start_line(s.kernel_start)
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
        short, error = "its bundles were not fetched ahead", wording.failure_text(s.notebook_error)
        full = f"{s.notebook_path}: {short} ({error}); each cell fetches its own"
        facts.append(Fact("notebook", f"{short}: {error}", full))
    elif s.notebook_path is not None:
        short = "its bundles are still being fetched"
        facts.append(Fact("notebook", short, f"{s.notebook_path}: {short} (status again)"))
    refusals = wording.precompile_refusals(s.stale_rejected, s.precompile_fallbacks)
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
        return f"none ({wording.NO_HUB_HINT})"
    kinds = {"redis cluster": "Redis Cluster", "folder": "shared folder", "s3": "S3", "gcs": "Google Cloud Storage",
             "azure": "Azure Blob Storage"}  # fmt: skip
    kind = f"{kinds[hub.kind]}, " if hub.kind in kinds else ""
    error = (hub.error or "").removeprefix(f"hub {hub.url}: ")  # the line names the hub already
    state = f"reachable ({kind}{hub.latency_ms:.1f} ms)" if hub.reachable else f"failed: {error}"
    signed = "bundles signed with the team secret" if hub.signed else "no team secret: pulled bundles trusted"
    return f"{hub.url} namespace {hub.namespace!r}: {state}; {signed}"
