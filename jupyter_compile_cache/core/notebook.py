"""The notebook a kernel serves: which of its `%%compile_cache` cells Run All will restore, and their bundles fetched
before the cells run.

A kernel can know its notebook: Jupyter servers (JupyterLab, Notebook 7, nbclient through a server) put its path in
the kernel's environment as JPY_SESSION_NAME, and VS Code sets `__vsc_ipynb_file__` in the user namespace. Where it
is known, `%load_ext` reads the saved notebook's `%%compile_cache NAME` cells and `NotebookStage` works through
them in a background thread: the newest version of each NAME that fits this machine is fetched from the hub into
the local store (every chunk verified, as a cell's own pull), so that a cell finds its bundle local and only
installs it. Nothing is installed into torch's caches before a cell asks for it, no cell waits for another cell's
bundle, and a cell whose bundle is still being fetched waits for that fetch alone (it would pull it itself
otherwise). Then `plan` says, cell by cell, whether the bundle will restore and why not: no bundle, the cell's code
changed since the save, or a bundle saved with another torch, Python, GPU or CPU.

The plan reads the notebook as last saved: an edit that is not saved yet is not in it.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from ..failure import Failure
from ..storage.bundle import Manifest
from ..storage.hub import HubError
from .machine_fit import MachineFit
from .options import CellOptions
from .plans import CellPlan, NotebookCell, NotebookPlan, NotRestoring, PlanProblem, PlanTrouble
from .store_session import StoreSession

SESSION_NAME_ENV = "JPY_SESSION_NAME"  # set by Jupyter servers: the notebook's path
VSCODE_NOTEBOOK = "__vsc_ipynb_file__"  # set by VS Code in the user namespace
CELL_MAGIC = "%%compile_cache"

# A cell's magic line (after `%%compile_cache`) into its NAME and options; raises ValueError with the usage.
LineParser = Callable[[str], tuple[str, CellOptions]]


def notebook_path(
    user_ns: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None, cwd: str | None = None
) -> str | None:
    """The .ipynb file this kernel serves, when its front end says so and the file is there; else None. A relative
    JPY_SESSION_NAME (jupyter_server before 2) is also tried by its file name in the kernel's folder, the notebook's."""
    environ = os.environ if environ is None else environ
    cwd = cwd or os.getcwd()
    candidates = [str((user_ns or {}).get(VSCODE_NOTEBOOK) or ""), environ.get(SESSION_NAME_ENV, "")]
    for candidate in candidates:
        if not candidate.endswith(".ipynb"):
            continue
        tries = [candidate] if os.path.isabs(candidate) else [os.path.join(cwd, candidate)]
        tries.append(os.path.join(cwd, os.path.basename(candidate)))
        for path in tries:
            if os.path.isfile(path):
                return os.path.abspath(path)
    return None


def source_digest(body: str) -> str:
    """A cell body's identity, as the magic records it at save and the plan compares it: blank lines and trailing
    spaces do not count."""
    lines = [line.rstrip() for line in body.replace("\r\n", "\n").split("\n")]
    return hashlib.sha256("\n".join(line for line in lines if line).encode()).hexdigest()[:16]


def read_cells(path: str, parse: LineParser) -> tuple[list[NotebookCell], list[PlanProblem]]:
    """The `%%compile_cache` cells of the notebook at PATH, in order, and what could not be read (one line each).
    `index` counts the notebook's code cells from 1, as a reader counts them."""
    problems: list[PlanProblem] = []
    try:
        with open(path, encoding="utf-8") as f:
            notebook = json.load(f)
        raw_cells = notebook["cells"]
        if not isinstance(raw_cells, list):
            raise TypeError("'cells' is not a list")
    except OSError as exc:
        return [], [PlanProblem(PlanTrouble.UNREADABLE_NOTEBOOK, path, str(exc))]
    except ValueError:
        return [], [PlanProblem(PlanTrouble.UNREADABLE_NOTEBOOK, path, "it is not JSON")]
    except (KeyError, TypeError):
        return [], [PlanProblem(PlanTrouble.UNREADABLE_NOTEBOOK, path, "its JSON has no list of cells")]
    cells: list[NotebookCell] = []
    index = 0
    for raw in raw_cells:
        if not isinstance(raw, dict) or raw.get("cell_type") != "code":
            continue
        index += 1
        source = raw.get("source", "")
        source = "".join(source) if isinstance(source, list) else str(source)
        first, _, body = source.lstrip().partition("\n")
        if first.split(maxsplit=1)[:1] != [CELL_MAGIC]:
            continue
        line = first[len(CELL_MAGIC) :].strip()
        try:
            name, options = parse(line)
        except ValueError as exc:
            problems.append(PlanProblem(PlanTrouble.BAD_CELL_LINE, str(index), str(exc).splitlines()[0]))
            continue
        cells.append(NotebookCell(index, name, options, source_digest(body)))
    return cells, problems


def plan(
    session: StoreSession, path: str, cells: list[NotebookCell], problems: list[PlanProblem] | None = None
) -> NotebookPlan:
    """Cell by cell, whether Run All will restore its bundle here, and why not. Hubs are asked (not pulled from);
    one that does not answer is left for a minute and said by the next cell that uses it, as a cell's failure is."""
    problems = list(problems or [])
    versions: dict[tuple[str, str, str | None], list[tuple[str, Manifest]]] = {}
    for cell in cells:
        key = _where(cell)
        if key in versions or not cell.options.restore:
            continue
        found: list[tuple[str, Manifest]] = []
        store = session.store(cell.options.store_dir)
        found += [("local", m) for m in store.versions(cell.name)]
        hub = session.hub_policy.for_cell(cell.options, quiet=True)
        if hub is not None:
            try:
                found += [("hub", m) for m in hub.versions(cell.name)]
            except HubError as exc:
                session.hub_policy.failed(hub, exc, None, quiet=True)
                problems.append(PlanProblem(PlanTrouble.HUB_SILENT, hub.display_url, str(exc)))
        versions[key] = found
    fit = MachineFit()
    planned = [_cell_plan(session, cell, versions.get(_where(cell), []), fit) for cell in cells]
    return NotebookPlan(path, planned, problems)


def _where(cell: NotebookCell) -> tuple[str, str, str | None]:
    opts = cell.options
    hub = None if opts.no_hub else f"{opts.hub}|{opts.namespace}"
    return cell.name, opts.store_dir or "", hub


def _cell_plan(
    session: StoreSession, cell: NotebookCell, found: list[tuple[str, Manifest]], fit: MachineFit
) -> CellPlan:
    if not cell.options.restore:
        return CellPlan(cell.index, cell.name, False, None, NotRestoring.BY_CHOICE)
    if not found:
        return CellPlan(cell.index, cell.name, False, None, NotRestoring.NOTHING_SAVED)
    fitting = [(source, m) for source, m in found if fit.fits(m)]
    if not fitting:
        newest = max((m for _source, m in found), key=lambda m: m.created)
        return CellPlan(cell.index, cell.name, False, None, NotRestoring.SAVED_ELSEWHERE, fit.mismatches(newest))
    source, manifest = max(fitting, key=lambda sm: sm[1].created)
    last_run = session.store(cell.options.store_dir).last_run(cell.name) or {}
    saved = manifest.stats.get("cell_digest")
    if isinstance(saved, str) and saved != cell.digest and not _ran_clean(last_run, manifest, cell.digest):
        return CellPlan(cell.index, cell.name, False, source, NotRestoring.CELL_CHANGED)
    refused = int(last_run.get("stale_rejected") or 0)
    if refused and (last_run.get("restore") or {}).get("version") == manifest.version:
        return CellPlan(cell.index, cell.name, False, source, NotRestoring.CALLS_CHANGED, refused=refused)
    return CellPlan(cell.index, cell.name, True, source, None)


def _ran_clean(last_run: dict[str, Any], manifest: Manifest, digest: str) -> bool:
    """Whether the cell's last run was this very body, restoring this version with no miss: an edit that compiled
    nothing new (a print, a comment) saves no new version, and must not read as a change for ever."""
    if last_run.get("source_digest") != digest or (last_run.get("restore") or {}).get("version") != manifest.version:
        return False
    return not any(counts.get("misses", 0) for counts in (last_run.get("layers") or {}).values())


class NotebookStage:
    """The notebook's bundles, fetched into the local store in a background thread before its cells run, then its
    plan. A cell asks `wait_for(NAME)` before its restore: it waits only while NAME itself is being fetched."""

    def __init__(self, session: StoreSession) -> None:
        self.session = session
        self.path: str | None = None
        self.plan: NotebookPlan | None = None  # once staging is done
        self.fetched: set[str] = set()  # names pulled from the hub ahead of their cells
        self.seconds: float | None = None  # how long the staging took
        self.error: Failure | None = None
        self.thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._state: dict[str, str] = {}  # name -> "queued", "fetching", "done", or "cell" (left to its cell)
        self._fetched_event: dict[str, threading.Event] = {}

    def start(self, path: str, read: Callable[[], tuple[list[NotebookCell], list[PlanProblem]]]) -> None:
        """Read the notebook at PATH (READ gives its cells) and stage its bundles, in a background thread."""
        if self.thread is not None:
            return
        self.path = path
        self.thread = threading.Thread(target=self._run, args=(path, read), name="jupyter_compile_cache-notebook")
        self.thread.daemon = True
        self.thread.start()

    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def wait_for(self, name: str) -> float:
        """Before a cell restores NAME: a fetch of NAME under way is waited for (seconds returned); one not started
        yet is left to the cell."""
        with self._lock:
            state = self._state.get(name)
            if state != "fetching":
                self._state[name] = "cell" if state in (None, "queued") else state
                return 0.0
            event = self._fetched_event[name]
        start = time.perf_counter()
        event.wait()
        return time.perf_counter() - start

    def join(self, timeout: float | None = None) -> None:
        if self.thread is not None:
            self.thread.join(timeout)

    def _run(self, path: str, read: Callable[[], tuple[list[NotebookCell], list[PlanProblem]]]) -> None:
        start = time.perf_counter()
        try:
            cells, problems = read()
            with self._lock:  # a cell that already ran fetches its own bundle
                for cell in cells:
                    if cell.options.restore:
                        self._state.setdefault(cell.name, "queued")
                        self._fetched_event.setdefault(cell.name, threading.Event())
            done: set[tuple[str, str, str | None]] = set()
            for cell in cells:
                if not cell.options.restore or _where(cell) in done:
                    continue
                done.add(_where(cell))
                with self._lock:
                    if self._state.get(cell.name) != "queued":
                        continue
                    self._state[cell.name] = "fetching"
                try:
                    self._fetch(cell)
                finally:
                    with self._lock:
                        self._state[cell.name] = "done"
                    self._fetched_event[cell.name].set()
            self.plan = plan(self.session, path, cells, problems)
        except Exception as exc:  # ahead-of-time work: a failure only costs the cells their own fetch, told by status
            self.error = Failure.of(exc)
        finally:
            for event in self._fetched_event.values():
                event.set()
            self.seconds = time.perf_counter() - start

    def _fetch(self, cell: NotebookCell) -> None:
        """The newest fitting version of the cell's NAME into the local store, from the hub if it is not local."""
        session = self.session
        store = session.store(cell.options.store_dir)
        hub = session.hub_policy.for_cell(cell.options, quiet=True)
        if hub is None:
            return  # local bundles are restored from where they are
        found = session.search.newest(cell.name, store, hub, on_down="quiet")
        if found.source is hub:
            self.fetched.add(cell.name)
