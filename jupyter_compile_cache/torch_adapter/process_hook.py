"""The processes a cell starts (torchrun's ranks, a launcher's workers, `jupyter-compile-cache run`'s command): their
cache hits and misses counted as the cell's, and, opt-in with `--precompile-processes`, Dynamo precompile carried into
them. Without the option, each process traces with Dynamo again and only its graphs and kernels come from the bundle.

A cell whose processes compile puts `process_start/` first on its children's PYTHONPATH for the length of the body, so
every process started beneath it imports that folder's sitecustomize.py (then the one it shadows, if any); the user's
script is never edited. `arm()` imports nothing of torch: the hook waits for the process's first `torch.compile`
(torchrun's agent and compile workers never call it, and pay nothing), then takes torch's counters as they are; with
precompile it also installs the notebook's precompile guard (precompile.py: the same checks and fallbacks) with
caching_precompile, so the restored entries load, and at exit writes the entries it compiled, with their records, into
the cache dir, where the cell's watch finds them. Each process leaves a record (JSON) the cell reads after the body
(`Carried.collect`). Any failure of ours leaves the process on torch's plain path; the cell tells it.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import importlib.abc
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..failure import Failure

RECORDS_ENV = "JUPYTER_COMPILE_CACHE_PROCESS_RECORDS"  # the folder each process writes its record into
PRECOMPILE_ENV = "JUPYTER_COMPILE_CACHE_PROCESS_PRECOMPILE"  # "1": the processes load and save precompile entries
START_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "process_start")


# -- the cell's side --------------------------------------------------------------------------------------------------
@dataclass
class ProcessesShare:
    """What the processes a cell started compiled and used: per layer, their cache hits and misses; with precompile
    carried, how many compiled with it, the entries they loaded (hits), the frames Dynamo traced all the same (a
    function without an entry, or one torch could not package), the entries refused because their code has changed
    since, why torch left functions out of precompile, and what failed under them (`miss_reasons.PrecompileTrouble`s,
    each once)."""

    precompile: bool = False  # precompile was carried into them (--precompile-processes)
    processes: int = 0  # of them, those that compiled with precompile
    hits: int = 0
    traced: int = 0
    stale: int = 0
    torch_without_precompile: str | None = None  # a process's torch, where it had no precompile we can check
    layers: dict[str, dict[str, int]] = field(default_factory=dict)  # their hits, misses and bypasses, per layer
    used: set[str] = field(default_factory=set)  # the cache files they read (a hit on torch's own cache included)
    bypassed: list[str] = field(default_factory=list)
    troubles: list[Any] = field(default_factory=list)


class Carried:
    """The hook handed to the processes the body starts: `start()` before the body, `stop()` after it (the
    environment as it was), then `collect()` reads their records. PRECOMPILE: they load and save precompile entries
    too; otherwise they only count."""

    def __init__(self, precompile: bool) -> None:
        self.precompile = precompile
        self.records = tempfile.mkdtemp(prefix="jcc-processes-")
        self._saved: dict[str, str | None] = {}

    def start(self) -> None:
        self._saved = {name: os.environ.get(name) for name in ("PYTHONPATH", RECORDS_ENV, PRECOMPILE_ENV)}
        before = self._saved["PYTHONPATH"]
        os.environ["PYTHONPATH"] = START_DIR + (os.pathsep + before if before else "")
        os.environ[RECORDS_ENV] = self.records
        os.environ[PRECOMPILE_ENV] = "1" if self.precompile else "0"

    def stop(self) -> None:
        for name, value in self._saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._saved = {}

    def collect(self) -> ProcessesShare:
        """The records the processes left (one that was killed leaves none), summed; the folder is removed."""
        from .miss_reasons import PrecompileStep, PrecompileTrouble

        out = ProcessesShare(precompile=self.precompile)
        seen: set[tuple[str, Failure]] = set()
        try:
            names = sorted(os.listdir(self.records))
        except OSError:
            names = []
        for name in names:
            try:
                with open(os.path.join(self.records, name), encoding="utf-8") as f:
                    record = json.load(f)
                counts = [int(record.get(key, 0)) for key in ("hits", "traced", "stale")]
                bypassed = [str(reason) for reason in record.get("bypassed", [])]
                used = [str(path) for path in record.get("used", [])]
                troubles = [
                    (str(t["step"]), Failure.from_json(t["error"]), bool(t.get("fallback"))) for t in record["troubles"]
                ]
                layers = {
                    str(layer): {str(kind): int(number) for kind, number in counts.items()}
                    for layer, counts in record.get("layers", {}).items()
                }
            except (OSError, ValueError, KeyError, TypeError, AttributeError):  # cut short: that process not counted
                continue
            out.processes += bool(record.get("carried"))
            out.torch_without_precompile = record.get("torch_without_precompile") or out.torch_without_precompile
            out.hits, out.traced, out.stale = (a + b for a, b in zip((out.hits, out.traced, out.stale), counts))
            out.bypassed += [reason for reason in dict.fromkeys(bypassed) if reason not in out.bypassed]
            out.used.update(used)
            for layer, counts in layers.items():
                summed = out.layers.setdefault(layer, {})
                for kind, number in counts.items():
                    summed[kind] = summed.get(kind, 0) + number
            for step, error, fallback in troubles:
                if (step, error) in seen:
                    continue
                seen.add((step, error))
                try:
                    known = PrecompileStep(step)
                except ValueError:  # a step this version does not name: it failed while starting
                    known = PrecompileStep.START_IN_PROCESS
                out.troubles.append(PrecompileTrouble(known, error, fallback))
        self.discard()
        return out

    def discard(self) -> None:
        shutil.rmtree(self.records, ignore_errors=True)


# -- the process's side -----------------------------------------------------------------------------------------------
def arm() -> None:
    """In a process started beneath a cell that carries precompile: wait for torch's import, then for its first
    torch.compile. Imports nothing of torch."""
    records = os.environ.get(RECORDS_ENV)
    if not records or not os.path.isdir(records):
        return
    torch = sys.modules.get("torch")
    if torch is not None:
        _wrap_compile(torch, records)
    else:
        sys.meta_path.insert(0, _AfterImport("torch", lambda module: _wrap_compile(module, records)))


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls THEN with module NAME once it has been imported whole; leaves the import system as it was at once."""

    def __init__(self, name: str, then: Callable[[Any], None]) -> None:
        self.name = name
        self.then = then

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _ThenLoader(spec, spec.loader, self.then)
        return spec


class _ThenLoader(importlib.abc.Loader):
    """The module's own loader, then THEN; the spec and the module get their own loader back before THEN runs."""

    def __init__(self, spec: Any, loader: Any, then: Callable[[Any], None]) -> None:
        self.spec, self.loader, self.then = spec, loader, then

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        try:
            self.loader.exec_module(module)
        finally:
            self.spec.loader = self.loader
            module.__loader__ = self.loader
        self.then(module)  # (THEN tells its own failures: `_wrap_compile`)


def _wrap_compile(torch: Any, records: str) -> None:
    """torch.compile, until its first call: that call starts the hook, puts torch.compile back, and goes on."""
    try:
        original = torch.compile
    except Exception as exc:  # a torch without torch.compile: nothing to carry
        failed_to_arm(records, exc)
        return

    @functools.wraps(original)
    def compile(*args: Any, **kwargs: Any) -> Any:
        if torch.compile is compile:
            torch.compile = original
        try:
            _begin(records)
        except Exception as exc:  # never into the user's call: this process compiles as without us
            failed_to_arm(records, exc)
        return original(*args, **kwargs)

    torch.compile = compile


_PROCESS: _Process | None = None
_BEGIN_LOCK = threading.Lock()  # two threads whose first torch.compile calls meet install the guard once


def _begin(records: str) -> None:
    """Once per process: torch's counters taken (and with precompile, its guard installed with torch's
    caching_precompile), the process's record written at its exit."""
    global _PROCESS
    with _BEGIN_LOCK:
        if _PROCESS is not None:
            return
        _PROCESS = process = _Process(records, os.environ.get(PRECOMPILE_ENV) == "1")
        process.begin()
        atexit.register(process.end)


def _keys_per_local_rank(local_rank: str | None) -> list[Any]:
    """Each rank of a launcher (torchrun and accelerate set LOCAL_RANK) keeps its precompile entries under keys of
    its own. torch keys an entry by its function alone, so the ranks of one job wrote one entry each for the same
    key, the last to exit won, and a rank on another GPU loaded an entry whose device guards fail for it: it traced
    again on every restore (rank 1 of 2 on the H200s). The key only says which entry is tried; its guards decide."""
    if local_rank is None:
        return []
    from torch._dynamo.package import CompilePackage

    from .patch import Patch

    original = vars(CompilePackage).get("source_id_from_fn")
    if not isinstance(original, staticmethod):
        return []
    torch_key = original.__func__

    def source_id_from_fn(fn: Any) -> str:
        return hashlib.sha256(f"{torch_key(fn)}:local_rank={local_rank}".encode()).hexdigest()

    return [Patch(CompilePackage, "source_id_from_fn", staticmethod(source_id_from_fn))]


class _Process:
    def __init__(self, records: str, precompile: bool) -> None:
        self.records = records
        self.precompile = precompile
        self.troubles: list[dict[str, Any]] = []
        self.guard: Any = None
        self.snapshot: Any = None
        self.patches: list[Any] = []
        self.torch_without_precompile: str | None = None  # this process's torch, where it has no precompile
        self.used: Any = None  # the cache files it reads (capture.UsedFiles)

    def _trouble(self, trouble: Any) -> None:
        self._failed(trouble.step, trouble.error, trouble.fallback)

    def _failed(self, step: Any, error: Failure, fallback: bool) -> None:
        self.troubles.append({"step": step.value, "error": error.to_json(), "fallback": fallback})

    def begin(self) -> None:
        from .miss_reasons import PrecompileStep

        try:
            import logging

            from . import capture, compiler, kernel_load_fixes
            from .cell_snapshot import CellSnapshot
            from .open_recorder import OpenRecorder
            from .precompile import PrecompileGuard

            self.used = capture.UsedFiles(capture.cache_roots(), OpenRecorder())  # what the cell's bundle needs
            self.used.start()
            note = compiler.NoCudaRuntimeNote()  # kept out of the job's output, as out of a cell's
            logging.getLogger(note.logger).addFilter(note)
            if not self.precompile:  # its hits and misses only
                self.snapshot = CellSnapshot.take(None)
                return
            if not PrecompileGuard.available():  # a torch without precompile: its plain path, as without the hook
                import torch

                self.torch_without_precompile = str(torch.__version__)
                return
            self.guard = PrecompileGuard(warn=self._trouble)
            self.guard.install()
            self.patches = kernel_load_fixes.cache_load_patches(lambda trouble: None)  # time only, never answers
            self.patches += _keys_per_local_rank(os.environ.get("LOCAL_RANK"))
            compiler.set_caching_precompile(True)
            self.snapshot = CellSnapshot.take(self.guard)
        except Exception as exc:  # the plain path: torch as it was
            self._failed(PrecompileStep.START_IN_PROCESS, Failure.of(exc), True)
            self._undo()

    def _undo(self) -> None:
        """torch as it was, after a failure to start (already in the record)."""
        from .miss_reasons import PrecompileStep

        try:
            from . import compiler

            compiler.set_caching_precompile(False)
        except Exception as exc:  # the switch could not be read back either: said beside the first failure
            self._failed(PrecompileStep.START_IN_PROCESS, Failure.of(exc), True)
        for patch in reversed(self.patches):
            patch.undo()
        self.patches = []
        if self.used is not None:
            self.used.stop()
            self.used = None
        if self.guard is not None:
            self.guard.uninstall()
            self.guard = None

    def end(self) -> None:
        """At the process's exit: its entries and their records into the cache dir, its record into RECORDS."""
        from .miss_reasons import PrecompileStep

        carried = self.precompile and self.snapshot is not None
        record: dict[str, Any] = {"pid": os.getpid(), "carried": carried, "hits": 0, "traced": 0}
        if self.snapshot is not None:
            try:
                share = self.snapshot.share()
                record["layers"] = share.layers
                if carried:
                    record["hits"] = share.layers.get("dynamo_precompile", {}).get("hits", 0)
                    record["traced"] = share.frames
                    record["stale"] = share.stale_rejected
                    record["bypassed"] = self.guard.new_bypass_reasons()
            except Exception as exc:  # this process's entries are not saved; its work is done
                self._failed(PrecompileStep.SAVE, Failure.of(exc), False)
        if self.used is not None:
            record["used"] = sorted(self.used.used())
        record["troubles"] = self.troubles
        record["torch_without_precompile"] = self.torch_without_precompile
        _write_record(self.records, record)


def _write_record(records: str, record: dict[str, Any]) -> None:
    """This process's RECORD into the cell's folder, whole or not at all."""
    path = os.path.join(records, f"{os.getpid()}.json")
    try:
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump(record, f)
        os.replace(path + ".tmp", path)
    except OSError:  # the cell's folder is gone (the cell ended first): nothing to tell it
        pass


def failed_to_arm(records: str | None, exc: BaseException) -> None:
    """The hook could not be armed or started in this process: its record says why (the cell tells it), and the
    process compiles as without us."""
    from .miss_reasons import PrecompileStep  # the standard library only: safe where the hook failed

    if records:
        trouble = {"step": PrecompileStep.START_IN_PROCESS.value, "error": Failure.of(exc).to_json()}
        _write_record(records, {"carried": False, "troubles": [{**trouble, "fallback": True}]})
