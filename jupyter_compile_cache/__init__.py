"""Keep `torch.compile` results across kernel restarts and machines.

Load the extension, then put a cell that compiles under ``%%compile_cache NAME``::

    %load_ext jupyter_compile_cache

    %%compile_cache mymodel
    model = torch.compile(Net())
    with torch.no_grad():
        y = model(x)

``%load_ext`` comes first, once per kernel: before it, IPython knows no ``%%compile_cache`` and answers "Cell magic
`%%compile_cache` not found". To have it in every kernel, add ``c.InteractiveShellApp.extensions =
["jupyter_compile_cache"]`` to ipython_config.py.

The first run compiles as usual and saves a *bundle* named ``mymodel``: the files in torch's cache directories
that this cell compiled or used (FX graphs, AOTAutograd entries, C++ and Triton kernels, autotune results,
Dynamo precompile entries, PGO state). After a kernel restart, or on another machine with the same store, the
cell restores the bundle before it runs, and the compiled call is as fast as if the kernel had never stopped.

Cell options (``%%compile_cache?`` lists them): ``--store DIR`` (another local store), ``--no-restore``,
``--no-save``, ``--force-save`` (save even if nothing new was compiled), ``--quiet``, ``--no-precompile`` (leave
Dynamo precompile off for this cell), ``--precompile-processes`` (the processes the cell starts, such as torchrun's
ranks, load and save Dynamo precompile entries too), ``--hub URL`` / ``--no-hub``, ``--namespace NS``, ``--ttl
SECONDS`` (for the hub), ``--wait SECONDS`` (wait for a collaborator compiling the same NAME), ``--torch-remote``
(point torch's own Redis caches at the hub too).

Line commands: ``%compile_cache status`` (per-layer table), ``list``, ``explain NAME`` (why a bundle would or
would not restore here, and what the last run hit and missed; with no NAME, which of this notebook's cells Run All
will restore, and why not), ``stats [--json] [--zero]`` (what the cells that
used the store did: restores, hit rate, time saved, size against the cap), ``rm NAME``, ``gc [--max-size SIZE]``,
``enable LAYER`` / ``disable LAYER`` (flip torch's switch for a cache layer), ``config`` (the settings in force and
where each came from), ``export NAME FILE`` / ``import FILE``, ``hub URL|off`` (the session's hub, set only if it
answers) and ``hub status|ls|push|pull|publish|rm|gc`` (the CLI's hub commands, the same words), ``panel`` (an
ipywidgets panel: per-layer state with toggles, bundles, cold vs restored times).

Settings (store, hub, namespace, secret, timeouts, size cap, precompile, prewarm) are traitlets of
``CompileCache``: ``%config CompileCache`` lists them, ``%config CompileCache.max_size = "5G"`` or
``c.CompileCache.hub = "redis://..."`` in ipython_config.py sets them, and each one also reads an environment
variable (see jupyter_compile_cache.core.settings).

A kernel that starts warm: ``jupyter-compile-cache install-kernel`` installs a kernel spec whose every start
(a restart, a new notebook) is forked from a template process with torch's compiler stack already loaded (see
jupyter_compile_cache.kernels.warm_kernel).

The local store is ``CompileCache.store_dir``, by default the user cache directory (never /tmp). Bundles are only
restored into a kernel whose torch, Python, GPU/CUDA (for GPU bundles) and CPU ISA (for C++ kernels) match, and
only after every file's sha256 verified. Dynamo precompile entries are only used while the code they were
compiled from is unchanged: edit a function or a global it reads, and the cell compiles the new code.

Python API (for scripts): ``status()``, ``restore(name)``, ``save(name)``, ``bundles()``,
``explain(name)`` and ``cell(name)``, a context manager doing in a script what the magic does in a notebook.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._version import __version__ as __version__

if TYPE_CHECKING:
    from .core.options import CellOptions
    from .core.records import BundleExplanation, BundleRow, CellReport, RestoreResult, SessionStatus
    from .core.session import CompileCacheSession


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    """The server extension (enabled with the package): warm templates start with the Jupyter server."""
    return [{"module": "jupyter_compile_cache.kernels.server_extension"}]


def get_session() -> CompileCacheSession:
    """The kernel's one session (created on first use, saying what happens as the magic does)."""
    from .core.session import get_session
    from .frontends.reporter import TextReporter

    return get_session(TextReporter())


def status() -> SessionStatus:
    """Per-layer cache state: torch switch, entries and bytes on disk, this kernel's hits / misses / bypasses."""
    from .core.commands import Commands

    return Commands(get_session()).status(wait=True)


def restore(name: str, store_dir: str | None = None, quiet: bool = False) -> RestoreResult:
    """Restore the newest compatible version of bundle NAME into torch's cache dirs (before compiling)."""
    return get_session().restore(name, store_dir, quiet)


def bundles(store_dir: str | None = None) -> list[BundleRow]:
    """Bundles in the local store (and on the hub) with size, age, writer and whether they match this machine."""
    from .core.commands import Commands

    return Commands(get_session()).bundles(store_dir)


def explain(name: str, store_dir: str | None = None) -> BundleExplanation:
    """Field by field why NAME would or would not restore here, and the per-layer result of its last run."""
    from .core.commands import Commands

    return Commands(get_session()).explain(name, store_dir)


def cell(name: str, options: CellOptions | None = None) -> Any:
    """``with cell("name"): ...`` restores NAME, runs the block, and saves what it compiled."""
    return get_session().cell(name, options)


def save(name: str, store_dir: str | None = None, quiet: bool = False) -> CellReport:
    """Save everything in torch's cache dirs now as bundle NAME (outside a cell there is no finer scope)."""
    from .core.options import CellOptions

    session = get_session()
    opts = CellOptions(store_dir=store_dir, restore=False, force_save=True, quiet=quiet, whole_cache=True)
    with session.cell(name, opts) as report:
        pass
    return report


def __getattr__(name: str) -> Any:
    # Imported lazily: `import jupyter_compile_cache` stays cheap, and ipywidgets is only needed for the panel.
    if name == "Panel":
        from .frontends.panel import Panel

        return Panel
    if name == "CellOptions":
        from .core.options import CellOptions

        return CellOptions
    if name in ("CellReport", "RestoreResult"):
        from .core import records

        return getattr(records, name)
    if name == "CompileCache":
        from .core.settings import CompileCache

        return CompileCache
    raise AttributeError(name)


def load_ipython_extension(ipython: Any) -> None:
    from IPython.core.error import UsageError

    from .frontends.event_wording import torch_problem_text
    from .torch_adapter.compiler import torch_problem

    problem = torch_problem()
    if problem is not None:
        raise UsageError(torch_problem_text(problem))
    from .core import session as sessions
    from .core.session import CompileCacheSession
    from .core.settings import CompileCache
    from .frontends.magics import CompileCacheMagics
    from .frontends.reporter import TextReporter

    if sessions.current is None:
        # Settings from ipython_config.py, and `%config CompileCache.<name> = ...` from now on.
        sessions.current = CompileCacheSession(settings=CompileCache(parent=ipython), reporter=TextReporter())
    else:  # the script API made the session before the extension was loaded
        sessions.current.settings.update_config(ipython.config)
    session = sessions.current
    if session.settings not in ipython.configurables:
        ipython.configurables.append(session.settings)
    ipython.register_magics(CompileCacheMagics(ipython, session))
    ipython.events.register("pre_run_cell", session.prewarm.before_cell)
    ipython.events.register("post_run_cell", session.prewarm.after_cell)
    session.prewarm.follow_cells()
    kernel = getattr(ipython, "kernel", None)  # ipykernel's, not a terminal's
    if kernel is not None:
        from .kernels.kernel_exit import stop_compile_workers_on_shutdown

        stop_compile_workers_on_shutdown(kernel)
    session.prewarm.start()
    _stage_notebook(ipython, session)
    if kernel is not None:
        _tell_a_cold_start(session)


def _tell_a_cold_start(session: Any) -> None:
    """Once per kernel: a kernel that did not start warm says so, and how to get one that does."""
    from .core.events import PlainKernel
    from .kernels.kernel_start import this_kernel_start

    start = this_kernel_start()
    if start.how != "forked":
        session.tell(PlainKernel(start))


def _stage_notebook(ipython: Any, session: Any) -> None:
    """The notebook this kernel serves, when its front end says which: its bundles fetched ahead, then its plan
    (core/notebook.py), in the background."""
    from .core.notebook import notebook_path, read_cells

    path = notebook_path(ipython.user_ns)
    if path is None or not session.settings.prewarm:
        return
    from .frontends.cell_line import parse_cell_line  # only a kernel that knows its notebook reads its cells

    session.notebook.start(path, lambda: read_cells(path, parse_cell_line))


def unload_ipython_extension(ipython: Any) -> None:
    from .core import session as sessions

    _session = sessions.current
    magics = ipython.magics_manager.magics
    magics["cell"].pop("compile_cache", None)
    magics["line"].pop("compile_cache", None)
    ipython.magics_manager.registry.pop("CompileCacheMagics", None)
    if _session is not None:
        for event, hook in (
            ("pre_run_cell", _session.prewarm.before_cell),
            ("post_run_cell", _session.prewarm.after_cell),
        ):
            try:
                ipython.events.unregister(event, hook)
            except ValueError:
                pass
        if getattr(ipython, "kernel", None) is not None:
            from .kernels.kernel_exit import undo_stop_compile_workers_on_shutdown

            undo_stop_compile_workers_on_shutdown(ipython.kernel)
        if _session.settings in ipython.configurables:
            ipython.configurables.remove(_session.settings)
        _session.close()
        sessions.current = None
