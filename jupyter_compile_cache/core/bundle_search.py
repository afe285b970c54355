"""The one search for a bundle: the sources (the local store, then the hub the policy allows), the walk over their
versions newest first (storage/sources.py), the install of the first that fits this machine, and a hub that did not
answer told to the policy once. The cell's restore, a function's other version, the probe programs, the notebook's
fetch ahead of its cells and `hub pull` all search here, so they skip, quarantine and report alike."""

from __future__ import annotations

from collections.abc import Callable
from typing import IO, Any, Literal

from ..storage.bundle import BundleError, Manifest
from ..storage.sources import Found, HubSource, LocalSource, Progress, Source, Walk
from ..storage.store import LocalStore
from .hub_policy import HubPolicy
from .machine_fit import MachineFit
from .records import CellReport

Install = Callable[[Manifest, IO[bytes]], Any]  # extracts a version's payload; returns what it wrote
# A hub that did not answer: told as the cell's warning, kept for the next cell (a background thread), or raised
# (a command reports it).
OnDown = Literal["tell", "quiet", "raise"]


class BundleSearch:
    def __init__(self, hub_policy: HubPolicy) -> None:
        self.hub_policy = hub_policy

    def newest(
        self,
        name: str,
        store: LocalStore,
        hub: HubSource | None,
        *,
        local: bool = True,
        wanted: Callable[[Manifest], bool] | None = None,
        install: Install | None = None,
        progress: Callable[[Source, Manifest], Progress | None] | None = None,
        report: CellReport | None = None,
        on_down: OnDown = "tell",
    ) -> Found:
        """The newest version of NAME that fits this machine, in `store` (fetched from the hub if it was not there)
        and, with `install`, installed. `local`: whether `store` itself is searched first; `wanted(manifest)`: whether
        a version is one asked for (not another pinned version, not for another code digest)."""
        sources: list[Source] = [LocalSource(store)] if local else []
        if hub is not None:
            sources.append(hub)
        walk = Walk(name, sources, store, MachineFit().mismatches, progress, wanted)
        found = install_newest(walk, install) if install is not None else walk.first()
        for source, exc in found.down:
            if hub is None or source is not hub:
                continue
            if on_down == "raise":
                raise exc
            self.hub_policy.failed(hub, exc, report, quiet=on_down == "quiet")
        return found


def install_newest(walk: Walk, install: Install) -> Found:
    """Install each version the walk yields until one installs whole: a damaged or unsafe one is quarantined and the
    next tried; a cache dir that cannot take one ends the search (no older version would fare better)."""
    for candidate in walk:
        try:
            with walk.store.open_payload(candidate.manifest) as payload:
                installed = install(candidate.manifest, payload)
        except FileNotFoundError:  # pruned by another kernel between the fetch and the install
            continue
        except BundleError as exc:
            walk.reject(candidate, exc)
            continue
        except OSError as exc:
            walk.give_up(candidate, exc)
            break
        return walk.take(candidate, installed)
    return walk.found
