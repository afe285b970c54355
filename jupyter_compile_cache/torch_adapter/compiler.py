"""torch's compiler as one process sees it: whether this torch can be used, importing and warming it up, the
switches our cells flip, what it counted, and its background workers.

Everything else in the package reaches torch's private modules through this sub-package; each name below is
feature-detected (read in torch 2.9 to 2.15), so a torch without it gets the plain behaviour.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import os
import re
import sys
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .layers import COUNTER_GROUP
from .patch import Patch

MIN_TORCH = (2, 9)
# torch's own Redis-backed caches, switched on by --torch-remote
REMOTE_CACHE_SWITCHES = (
    ("torch._inductor.config", "fx_graph_remote_cache"),
    ("torch._inductor.config", "autotune_remote_cache"),
    ("torch._functorch.config", "enable_remote_autograd_cache"),
)
TORCH_REDIS_ENV = "TORCHINDUCTOR_REDIS_URL"
# A cell whose source matches compiles in this process (`model.compile()` is nn.Module's, `re.compile(` is not): it
# waits for the compiler's background import before its body. Not a `%compile_cache` line magic, whose commands
# answer at once (those that need the compiler wait themselves).
COMPILES_HERE_HINT = re.compile(
    r"torch\.compile|(?<!\bre)\.compile\(|_dynamo|_inductor|torch\.compiler|%%compile_cache"
    r"|compile_cache\.(?:cell|save|restore|Panel)\b|torch\.export"
)
# One that starts processes, which may compile (`!torchrun`, a launcher): watched, never waiting (they import torch's
# compiler for themselves).
STARTS_PROCESSES_HINT = re.compile(
    r"^\s*!|%%(?:bash|sh|script)\b|%system\b|subprocess|os\.system|torchrun|torch\.distributed\.run"
    r"|notebook_launcher|accelerate\b|mp\.spawn|multiprocessing",
    re.MULTILINE,
)


@dataclass(frozen=True)
class TorchProblem:
    """Why torch cannot be used with this extension: not installed (`found` None), or too old (its version)."""

    found: str | None


def torch_problem() -> TorchProblem | None:
    """Why torch cannot be used with this extension, or None."""
    try:
        import torch
    except ImportError:
        return TorchProblem(None)
    version = tuple(int(p) for p in re.findall(r"\d+", torch.__version__)[:2])
    compiler = getattr(torch, "compiler", None)
    if version < MIN_TORCH or not hasattr(compiler, "save_cache_artifacts"):
        return TorchProblem(torch.__version__)
    return None


def may_compile(source: str) -> bool:
    """Whether a cell's source looks like it compiles, in this process or in processes it starts."""
    return compiles_here(source) or starts_processes(source)


def starts_processes(source: str) -> bool:
    """Whether a cell's source looks like it starts processes (which may compile)."""
    return STARTS_PROCESSES_HINT.search(source) is not None


def compiles_here(source: str) -> bool:
    """Whether a cell's source looks like it compiles in this process."""
    return COMPILES_HERE_HINT.search(source) is not None


def first_compile_gate(wait: Callable[[], None]) -> Patch:
    """`torch.compile` (which nn.Module.compile calls) calling `wait` before each compile, until the returned patch
    is undone: while another thread imports torch's compiler, a compile waits for it here instead of importing the
    same modules beside it."""
    import torch

    original = torch.compile

    @functools.wraps(original)
    def compile(*args: Any, **kwargs: Any) -> Any:
        wait()
        return original(*args, **kwargs)

    return Patch(torch, "compile", compile)


def frames_compiled() -> int:
    """Frames Dynamo has tried to compile in this process, read without importing anything: 0 before Dynamo loads
    (its counters may be read while another thread still imports it)."""
    counters = getattr(sys.modules.get("torch._dynamo.utils"), "counters", None)
    try:
        return int(counters.get("frames", {}).get("total", 0)) if counters is not None else 0
    except (AttributeError, TypeError, ValueError):
        return 0


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


# -- warming up (kernels/prewarm.py runs these off the cell's path) -----------------------------------------------
class NoCudaRuntimeNote(logging.Filter):
    """The "No CUDA runtime is found" line a CUDA build of torch logs as Inductor's C++ builder imports cpp_extension
    on a machine without a GPU: it landed in whichever cell (or job) compiled then, and nothing there can use CUDA."""

    logger = "torch.utils.cpp_extension"

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("No CUDA runtime is found")


def import_compiler() -> None:
    """Import Dynamo and Inductor, and what Inductor's C++ builder imports to load a compiled graph (setuptools and
    Cython, through cpp_extension), without torch's `NoCudaRuntimeNote`."""
    note = NoCudaRuntimeNote()
    logger = logging.getLogger(note.logger)
    logger.addFilter(note)
    try:
        import torch._dynamo  # noqa: F401
        import torch._inductor.compile_fx  # noqa: F401
        import torch.utils.cpp_extension  # noqa: F401
    finally:
        logger.removeFilter(note)


def compiler_imported() -> bool:
    """Dynamo and Inductor are imported in this process (`import_compiler` got that far)."""
    return "torch._inductor.compile_fx" in sys.modules


def hash_torch_and_triton() -> None:
    """The hashes of torch's and Triton's installed files that Inductor takes once per process for its cache keys.
    Files only: CUDA is not touched."""
    try:
        from torch._inductor.codecache import torch_key

        torch_key()
    except Exception:  # a torch without it: inductor computes what it needs itself
        pass
    try:
        from torch._inductor.runtime.triton_compat import triton_key

        triton_key()
    except Exception:  # no triton here (torch's stand-in raises): the CPU probe goes on
        pass


def can_probe_cpu() -> bool:
    """Whether this torch probes the CPU's vector ISAs (by compiling test programs)."""
    try:
        from torch._inductor.cpu_vec_isa import pick_vec_isa  # noqa: F401
    except ImportError:
        return False
    return True


def probe_cpu(aside: bool = False) -> None:
    """torch probes each vector ISA in turn, each in a child process: probe those the CPU advertises side by side,
    filling torch's per-ISA cache, then let `pick_vec_isa()` pick. `aside`: no cell waits for the answer, so each probe
    runs at the lowest CPU priority; one a compiling cell waits for keeps the usual one."""
    from concurrent.futures import ThreadPoolExecutor

    from torch._inductor import cpu_vec_isa

    checker = getattr(cpu_vec_isa, "x86_isa_checker", None)
    isas = list(getattr(cpu_vec_isa, "supported_vec_isa_list", []))
    if checker is not None and isas:
        flags = checker()
        candidates = [isa for isa in isas if all(flag in flags for flag in str(isa).split())]
        if len(candidates) > 1 or (aside and candidates):
            with ThreadPoolExecutor(max_workers=len(candidates)) as pool:
                list(pool.map(_probe_aside if aside else bool, candidates))
    cpu_vec_isa.pick_vec_isa()  # cached by torch for the process


def _probe_aside(isa: Any) -> bool:
    """One ISA's probe at the lowest CPU priority: torch compiles a test program and loads it in a new Python that
    imports torch, seconds of CPU per ISA. The priority is this pool thread's own (Linux keeps it per thread),
    inherited by the processes it starts; the thread ends with the probe."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (AttributeError, OSError):  # not Linux, or not allowed: the probe runs at the usual priority
        pass
    return bool(isa)


def probe_files(created: list[str]) -> list[str]:
    """Of the cache files that appeared while the probe ran, the probe's own: each test program's source (torch's
    `VecISA._avx_code`, written as `<key>.cpp`) and what was built beside it (`<key>.so`, its load marker). A cell
    restoring or compiling meanwhile writes into the same folders; its files are not the machine's toolchain."""
    from torch._inductor import cpu_vec_isa

    code = getattr(getattr(cpu_vec_isa, "VecISA", None), "_avx_code", None)
    if not isinstance(code, str):  # a torch that probes some other way: keep what appeared, as before
        return created
    stems = []
    for path in created:
        if path.endswith(".cpp"):
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    if f.read() == code:
                        stems.append(path[: -len(".cpp")] + ".")
            except OSError:
                continue
    return [path for path in created if path.startswith(tuple(stems))] if stems else []


# -- switches -------------------------------------------------------------------------------------------------
def set_caching_precompile(enabled: bool) -> bool:
    """Switch torch's global caching_precompile; returns the previous value."""
    import torch._dynamo.config as dynamo_config

    previous = bool(dynamo_config.caching_precompile)
    dynamo_config.caching_precompile = bool(enabled)
    return previous


class RemoteCaches:
    """`--torch-remote`: torch's FX graph, AOTAutograd and autotune caches use a Redis too, for the rest of the
    kernel; `undo()` puts back what was there."""

    def __init__(self) -> None:
        self._before: dict[tuple[str, str], Any] | None = None

    @property
    def url(self) -> str | None:
        """The Redis torch's own caches use since `point_at`, or None."""
        return os.environ.get(TORCH_REDIS_ENV) if self._before is not None else None

    def point_at(self, url: str) -> None:
        if self._before is None:
            self._before = {("env", TORCH_REDIS_ENV): os.environ.get(TORCH_REDIS_ENV)}
            for module, attr in REMOTE_CACHE_SWITCHES:
                mod = importlib.import_module(module)
                if hasattr(mod, attr):
                    self._before[(module, attr)] = getattr(mod, attr)
        os.environ[TORCH_REDIS_ENV] = url
        for module, attr in self._before:
            if module != "env":
                setattr(importlib.import_module(module), attr, True)

    def undo(self) -> None:
        before, self._before = self._before, None
        for (module, attr), value in (before or {}).items():
            if module == "env":
                if value is None:
                    os.environ.pop(attr, None)
                else:
                    os.environ[attr] = value
            else:
                setattr(importlib.import_module(module), attr, value)


# -- what torch counted ---------------------------------------------------------------------------------------
def our_counter(name: str) -> int:
    """One of our counters in torch's `counters` (precompile_stale_rejected, precompile_fallback), 0 before torch's
    compiler is imported."""
    counters = getattr(sys.modules.get("torch._dynamo.utils"), "counters", None)
    return int(counters.get(COUNTER_GROUP, {}).get(name, 0)) if counters is not None else 0


def stale_count() -> int:
    return our_counter("precompile_stale_rejected")


def fallback_count() -> int:
    return our_counter("precompile_fallback")


# -- background workers ---------------------------------------------------------------------------------------
def stop_compile_workers() -> None:
    """Shut down inductor's compile-worker pools (and reap the sidecar) if this process started any. torch's graceful
    shutdown waits about a second for the sidecar, of the ~2.5 s jupyter_client gives a kernel to exit: the kernel is
    going away, so the sidecar and its workers are killed first, and torch reaps the sidecar at once."""
    async_compile = sys.modules.get("torch._inductor.async_compile")
    shutdown = getattr(async_compile, "shutdown_compile_workers", None)
    if shutdown is None:
        return
    # torch 2.9-2.15: SubprocPool objects in `_pool_set`, each with its sidecar's Popen in `.process`
    for pool in list(getattr(async_compile, "_pool_set", ())):
        _kill_tree(getattr(getattr(pool, "process", None), "pid", None))
    with contextlib.suppress(Exception):  # torch's own exit handler tries again; a shutdown must go on
        shutdown()


def _kill_tree(pid: int | None) -> None:
    if pid is None:
        return
    try:
        import psutil  # an ipykernel dependency

        sidecar = psutil.Process(pid)
        for process in [*sidecar.children(recursive=True), sidecar]:
            with contextlib.suppress(psutil.Error):
                process.kill()
    except Exception:  # psutil missing or the sidecar already gone: torch's graceful shutdown does it all
        return


def defer_library_finalizers() -> Callable[[], None]:
    """Take torch's op-library finalizers (about 200 `weakref.finalize`s that torch's import makes, each undoing a
    library's registrations) out of the exit handlers; returns what runs them. A kernel runs them after it has told
    its launcher that it ended: they only undo registrations in a process that is going away, and the front end
    waits for that exit (benchmarks/results/warm_restart_cpu_2026-11-28/)."""
    torch_library = sys.modules.get("torch.library")
    delete = getattr(torch_library, "_del_library", None)
    registry = getattr(weakref.finalize, "_registry", None)  # CPython's finalizers, private
    if delete is None or not isinstance(registry, dict):
        return lambda: None
    deferred = []
    for finalizer in list(registry):
        info = finalizer.peek()
        if info is not None and info[1] is delete and finalizer.atexit:
            finalizer.atexit = False
            deferred.append(finalizer)

    def run() -> None:
        for finalizer in deferred:
            with contextlib.suppress(Exception):  # the kernel has ended: no one is left to tell
                finalizer()

    return run
