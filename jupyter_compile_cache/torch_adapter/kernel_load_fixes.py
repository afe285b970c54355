"""Fixes to how torch saves and loads cached Triton kernels, precompile or not, applied from a kernel's first
`%%compile_cache` cell until `%unload_ext` (`cache_load_patches`):

* a kernel keeps its autotune result instead of being tuned again, also where the cache dir is not the one it was
  compiled in, and its coordinate-descent result on torch before 2.13 (`_recheck_autotune_patch`);
* a kernel with a long name is saved ready to launch, not for Triton's compiler to load (`_long_kernel_name_patch`);
* a C++ kernel already built is loaded without building torch's precompiled header first (`_built_kernel_header_patch`).
"""

from __future__ import annotations

import contextlib
import enum
import functools
import importlib
import importlib.util
import inspect
import os
import shutil
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..failure import Failure
from .patch import Patch


class LoadFix(str, enum.Enum):
    """A fix that gave way to torch's own path, told once per kernel."""

    LONG_NAME_LAUNCHER = "long_name_launcher"  # torch's launcher kept for a long-named Triton kernel
    AUTOTUNE_RECHECK = "autotune_recheck"  # torch's own autotune recheck kept
    BUILT_KERNEL_HEADER = "built_kernel_header"  # torch's precompiled header made for a C++ kernel already built


@dataclass(frozen=True)
class LoadFixTrouble:
    fix: LoadFix
    error: Failure


def cache_load_patches(warn: Callable[[LoadFixTrouble], None]) -> list[Patch]:
    """Fixes to how torch saves and loads cached Triton kernels, whether or not precompile is on; undo each with
    `undo`. A fix that fails keeps torch's way and is told to WARN, once per fix."""
    return [
        *_recheck_autotune_patch(_once(warn)),
        *_long_kernel_name_patch(_once(warn)),
        *_built_kernel_header_patch(_once(warn)),
    ]


def _once(warn: Callable[[LoadFixTrouble], None]) -> Callable[[LoadFix, Exception], None]:
    told: list[LoadFix] = []

    def tell(fix: LoadFix, exc: Exception) -> None:
        if not told:
            told.append(fix)
            warn(LoadFixTrouble(fix, Failure.of(exc)))

    return tell


def _long_kernel_name_patch(tell: Callable[[LoadFix, Exception], None]) -> list[Patch]:
    """Let a Triton kernel whose name is longer than Triton's cache file names (its first 150 characters) be
    launched statically: torch looked for the binary under the whole name, did not find it, and saved the kernel for
    Triton's compiler to load at every restore (docs/how_it_works.md). The binary gets the name torch looks for (a
    hard link) before torch's check; the parent checks again the long-named kernels its compile workers (where the
    patch is not) built. Only how a kernel is launched and saved changes; on any failure torch's way is kept."""
    heuristics = _triton_heuristics()
    if heuristics is None:
        return []
    static_result: Any = getattr(heuristics, "StaticTritonCompileResult", None)
    autotuner = getattr(heuristics, "CachingAutotuner", None)
    check = vars(static_result).get("can_statically_launch") if static_result else None
    original_precompile: Any = getattr(autotuner, "precompile", None)
    helpers: list[Any] = [getattr(heuristics, n, None) for n in ("triton_cache_dir", "triton_hash_to_path_key")]
    if not isinstance(check, staticmethod) or original_precompile is None or None in helpers:
        return []
    triton_cache_dir, triton_hash_to_path_key = helpers

    def link_full_name(kernel: Any, triton_meta: dict) -> None:
        name = kernel.src.fn.__name__
        if len(name) <= _TRITON_FILE_NAME_CHARS:
            return  # Triton named its files after the whole name
        directory = os.path.join(triton_cache_dir(triton_meta.get("device", 0)), triton_hash_to_path_key(kernel.hash))
        for entry in os.listdir(directory):
            stem, ext = os.path.splitext(entry)
            if ext in _BINARY_EXTS and stem != name and name.startswith(stem):  # Triton's cut of this name
                target = os.path.join(directory, name + ext)
                try:
                    os.link(os.path.join(directory, entry), target)
                except FileExistsError:
                    pass  # linked already (another thread, an earlier check)
                except OSError:  # a file system without hard links
                    shutil.copyfile(os.path.join(directory, entry), target)

    def can_statically_launch(kernel: Any, inductor_meta: Any, triton_meta: Any, *args: Any, **kwargs: Any) -> Any:
        with contextlib.suppress(Exception):  # no link: torch bypasses the static launcher, as without us
            link_full_name(kernel, triton_meta)
        return check.__func__(kernel, inductor_meta, triton_meta, *args, **kwargs)

    def precompile(self: Any, warm_cache_only: bool = False, *args: Any, **kwargs: Any) -> Any:
        if not warm_cache_only and self.compile_results:  # the parent, taking what a compile worker built
            try:
                launch_long_names_statically(self)
            except Exception as exc:  # ours failed: torch's launcher
                tell(LoadFix.LONG_NAME_LAUNCHER, exc)
        return original_precompile(self, warm_cache_only, *args, **kwargs)

    def launch_long_names_statically(self: Any) -> None:
        results = list(self.compile_results)
        for i, result in enumerate(results):
            if isinstance(result, static_result):
                continue
            kernel = result.kernel
            name = getattr(getattr(kernel.src, "fn", None), "__name__", "")
            if len(name) <= _TRITON_FILE_NAME_CHARS:
                continue  # torch found its binary, or bypassed it for another reason: its decision stands
            launcher = can_statically_launch(kernel, self.inductor_meta, self.triton_meta, self.heuristic_type)
            if launcher is not None:
                results[i] = static_result(launcher, result.config, result.compile_meta, result.inductor_meta)
        self.compile_results = results

    return [
        Patch(static_result, "can_statically_launch", staticmethod(can_statically_launch)),
        Patch(autotuner, "precompile", precompile),
    ]


def _built_kernel_header_patch(tell: Callable[[LoadFix, Exception], None]) -> list[Patch]:
    """Load a C++ kernel whose binary is there (a restored one) without its precompiled header. torch made the
    header before it looked for the binary: `g++ -E` and a hash at every first load in a process, and on a machine
    without the header (a colleague's, a wiped /tmp) a ~150 MB build of it, 13 s of a 0.8 s restored cell on 2
    cores. The header only speeds up a build, and a bundle never carries it (a build aid, layers.py); a binary that
    is gone by the time torch looks builds without it, with the same result."""
    try:
        from torch._inductor import codecache
    except Exception:  # a torch without this module, or one that fails to import it: no patch
        return []
    original: Any = getattr(codecache, "_precompile_header", None)
    load_async = getattr(getattr(codecache, "CppCodeCache", None), "load_async", None)
    caller_code = getattr(getattr(load_async, "__func__", None), "__code__", None)
    if original is None or caller_code is None or "main_path" not in caller_code.co_varnames:
        return []

    def built(main_path: Any) -> bool:  # torch names the binary after the main source (c<key>[.main].so)
        return isinstance(main_path, str) and os.path.exists(os.path.splitext(main_path)[0] + ".so")

    def _precompile_header(*args: Any, **kwargs: Any) -> Any:
        try:
            frame = sys._getframe(1)
            for _ in range(4):  # torch's caller, past wrappers (cpp_headers.py records the calls it lets through)
                if frame is None or frame.f_code is caller_code:
                    break
                frame = frame.f_back
            if frame is not None and frame.f_code is caller_code and built(frame.f_locals.get("main_path")):
                return None
        except Exception as exc:  # torch's way: the header is made
            tell(LoadFix.BUILT_KERNEL_HEADER, exc)
        return original(*args, **kwargs)

    for name in ("cache_info", "cache_clear"):  # still usable as the cached function it wraps
        if hasattr(original, name):
            setattr(_precompile_header, name, getattr(original, name))
    return [Patch(codecache, "_precompile_header", _precompile_header)]


def in_this_cache_dir(filename: str | None, cache_dir: str) -> str | None:
    """A kernel source's path (`<cache dir>/<2 chars>/<name>.py`) moved into `cache_dir`, where the same dir exists
    there; otherwise `filename` as it is."""
    if not filename:
        return filename
    shard = os.path.dirname(filename)
    moved = os.path.join(cache_dir, os.path.basename(shard))
    if len(os.path.basename(shard)) != 2 or os.path.normpath(shard) == os.path.normpath(moved):
        return filename
    if not os.path.isdir(moved):
        return filename
    return os.path.join(moved, os.path.basename(filename))


def _inductor_cache_dir() -> str:
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    return cache_dir()


# Triton's cut of a kernel's cache file names (triton.compiler.compile: `src.name[:150]`), and its binaries
_TRITON_FILE_NAME_CHARS = 150


_BINARY_EXTS = (".cubin", ".hsaco", ".zebin", ".spv")


def _triton_heuristics() -> types.ModuleType | None:
    """torch's Triton kernel runtime, where Triton is installed (else there are no Triton kernels to fix)."""
    if importlib.util.find_spec("triton") is None:
        return None
    try:
        from torch._inductor.runtime import triton_heuristics
    except Exception:  # a Triton this torch cannot load: nothing to fix
        return None
    return triton_heuristics


def _recheck_autotune_patch(tell: Callable[[LoadFix, Exception], None]) -> list[Patch]:
    """Give a Triton kernel loaded from the FX graph cache its autotune result back. It looks for its `.best_config`
    beside its source's path in the cache dir it was compiled in: restored into another cache dir, it was tuned again
    at its first call and wrote into the old dir. The path is moved into this cache dir first (`in_this_cache_dir`).
    And torch before 2.13 took a coordinate-descent result only for a kernel compiled with several configs, and
    dropped its `found_by_coordesc` mark: tuned again (seconds of a max-autotune first call). `backport` is 2.13's
    method, for the versions that still have the old one."""
    heuristics = _triton_heuristics()
    if heuristics is None:
        return []
    autotuner = getattr(heuristics, "CachingAutotuner", None)
    original: Any = getattr(autotuner, "recheck_autotune_cache", None)
    helpers: list[Any] = [getattr(heuristics, n, None) for n in ("check_autotune_cache", "triton_config_to_hashable")]
    if original is None or None in helpers:
        return []
    check_autotune_cache, triton_config_to_hashable = helpers

    @functools.cache
    def torch_has_the_fix() -> bool:  # read at the first kernel load, not on the cell's path
        try:
            return "len(configs) > 1" not in inspect.getsource(original)
        except (OSError, TypeError):
            return True  # source unknown: leave torch as it is

    def recheck_autotune_cache(self: Any, reload_kernel_from_src: Any) -> None:
        with contextlib.suppress(Exception):  # left where it was: the kernel is tuned again, as without us
            self.filename = in_this_cache_dir(self.filename, _inductor_cache_dir())
        if torch_has_the_fix():
            return original(self, reload_kernel_from_src)
        try:
            return backport(self, reload_kernel_from_src)
        except Exception as exc:  # torch's own method then: the kernel is tuned again, nothing else changes
            tell(LoadFix.AUTOTUNE_RECHECK, exc)
            return original(self, reload_kernel_from_src)

    def backport(self: Any, reload_kernel_from_src: Any) -> None:
        configs = [result.config for result in self.compile_results]
        cached_configs, _, self.autotune_cache_info = check_autotune_cache(configs, self.filename, self.inductor_meta)
        if len(cached_configs) != 1:
            return None
        best_config = cached_configs[0]
        found_by_coordesc = getattr(best_config, "found_by_coordesc", False)
        best_hash = triton_config_to_hashable(best_config)
        for compile_result in self.compile_results:
            if triton_config_to_hashable(compile_result.config) == best_hash:
                compile_result.config.found_by_coordesc = found_by_coordesc
                self.compile_results = [compile_result]
                return None
        if found_by_coordesc:  # tuned to a config the kernel was not compiled with: compile it (Triton's cache)
            if self.fn.fn is None:
                self.fn = reload_kernel_from_src().fn
            self.compile_results = [self._precompile_config(best_config)]
        return None

    return [Patch(autotuner, "recheck_autotune_cache", recheck_autotune_cache)]
