"""The stores a session works over: the local store, the hub policy and the one bundle search, with the settings and
the reporter their events go to. What `list`, `explain`, `stats`, `rm`, `gc`, `export`, `import` and the hub's
commands need, and nothing of torch: a command-line listing builds only this (the kernel's session, session.py,
builds on it with the cell flow).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from ..failure import Failure
from ..storage.store import LocalStore
from . import events
from .bundle_search import BundleSearch
from .events import Event, Reporter, Transfer
from .hub_policy import HubPolicy
from .records import CellReport
from .settings import CompileCache


class StoreSession:
    """A session without cells: what the commands of the stores need (the kernel's CompileCacheSession adds the cell
    flow)."""

    def __init__(
        self,
        store_dir: str | None = None,
        settings: CompileCache | None = None,
        reporter: Reporter | None = None,
    ) -> None:
        self.settings = settings or CompileCache()
        if store_dir:
            self.settings.store_dir = os.path.abspath(store_dir)
        # what the session says goes here: the front end's reporter (the magic's lines, the CLI's text, the panel)
        self.reporter: Reporter = reporter or events.LoggingReporter()
        # views beside the reporter (the panel): every event, a quiet cell's too
        self.listeners: list[Callable[[Event], None]] = []
        self.settings.resolved()  # reads every environment variable now, so a bad one is told once, here
        for problem in self.settings.env_problems:
            self.tell(events.BadEnvironment(problem))
        self.hub_policy = HubPolicy(self.settings, self.tell)
        self.search = BundleSearch(self.hub_policy)
        self.history: list[CellReport] = []  # this process's %%compile_cache runs, oldest first

    def tell(self, event: Event, report: CellReport | None = None, quiet: bool = False) -> None:
        """Hand EVENT to the front end's reporter (a quiet cell's info events are left out) and to every listener;
        a warning is also kept in the cell's report."""
        if event.level == "warning" and report is not None:
            report.warnings.append(event)
        if not quiet or event.level == "warning":
            self.reporter(event)
        for listener in list(self.listeners):
            try:
                listener(event)
            except Exception as exc:  # a broken view must never break the cell: told once, then dropped
                self.listeners.remove(listener)
                self.tell(events.StepFailed(events.Step.VIEW, Failure.of(exc)))

    def warn(self, message: str, report: CellReport | None = None) -> None:
        self.tell(events.CacheWarning(message), report)

    def transfer(self, moving: events.Moving, name: str, quiet: bool = False) -> Transfer:
        """The front end's progress display for a transfer (none for a quiet cell)."""
        return events.NO_TRANSFER if quiet else self.reporter.transfer(moving, name)

    def store(self, root: str | None = None) -> LocalStore:
        return LocalStore(root or self.settings.store_dir)

    def compiled_code(self) -> dict[str, str]:
        """{qualified name: code digest} of the functions this process's compiled cells looked up last: none here
        (the kernel's session knows them)."""
        return {}

    def close(self) -> None:
        self.hub_policy.close()
        self.listeners.clear()
