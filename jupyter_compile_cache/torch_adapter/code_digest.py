"""A digest of the code a compiled function can reach, so a saved precompile entry is used only while that code is
unchanged: bytecode, constants, and the user functions, classes, constants and nn.Module parts reachable through
globals and closures. Library code (torch, site-packages, the standard library) is named, not walked.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import sys
import sysconfig
import types
from typing import Any

_MAX_NODES = 20000


_CONSTANT_TYPES = (type(None), bool, int, float, complex, str, bytes)


_BUILTIN_TYPES = (
    types.BuiltinFunctionType,
    types.WrapperDescriptorType,
    types.MethodWrapperType,
    types.MethodDescriptorType,
    types.ClassMethodDescriptorType,
)


def _library_prefixes() -> tuple[str, ...]:
    paths = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            paths.add(os.path.realpath(path))
    for path in sys.path:
        if "site-packages" in path or "dist-packages" in path:
            paths.add(os.path.realpath(path))
    return tuple(sorted(paths))


_LIBRARY_PREFIXES = _library_prefixes()


@functools.lru_cache(maxsize=64)
def _installed_in(folder: str) -> frozenset[str]:
    """The top-level packages that distributions installed into FOLDER (their `*.dist-info`) provide."""
    tops: set[str] = set()
    with contextlib.suppress(OSError):
        for name in os.listdir(folder):
            if name.endswith(".dist-info"):
                try:
                    with open(os.path.join(folder, name, "top_level.txt"), encoding="utf-8") as f:
                        tops.update(line.strip() for line in f if line.strip())
                except OSError:  # no top_level.txt: the distribution's own name
                    tops.add(name.split("-")[0].replace("-", "_"))
    return frozenset(tops)


@functools.lru_cache(maxsize=4096)  # asked for every function and class of such a module the digest walks
def _installed_elsewhere(top: str, real: str) -> bool:
    """Whether TOP, at path REAL outside site-packages, was installed there by a package installer (`pip install
    --target`, a folder on PYTHONPATH): library code, whose module state may vary by process (diffusers'
    `SESSION_ID`, a fresh uuid each, made a UNet's saved entry look stale at every restore). An editable install
    or a user's own folder has no `*.dist-info` beside its code: the user's code, walked."""
    for entry in sys.path:
        folder = os.path.realpath(entry or os.curdir)
        if real.startswith(folder + os.sep) and top in _installed_in(folder):
            return True
    return False


def _is_user_module(module_name: str | None) -> bool:
    if not module_name:
        return False
    if module_name == "__main__" or module_name.startswith("__"):
        return True
    top = module_name.split(".")[0]
    if top in sys.builtin_module_names or top in ("torch", "triton", "numpy", "functorch"):
        return False
    module = sys.modules.get(module_name)
    path = getattr(module, "__file__", None)
    if not path:
        return False
    real = os.path.realpath(path)
    if any(real.startswith(prefix + os.sep) for prefix in _LIBRARY_PREFIXES):
        return False
    return not _installed_elsewhere(top, real)


class _Digest:
    """A deterministic walk over everything a compiled function can observe that Dynamo might not guard."""

    def __init__(self) -> None:
        self.sha = hashlib.sha256()
        self.seen: set[int] = set()
        # Holds every visited object until the walk ends: the walk builds temporary dicts (a submodule's constants),
        # and a freed one's id can come back for the next, which would then read as "<seen>" and drop its content.
        self.alive: list[Any] = []
        self.nodes = 0

    def feed(self, *parts: Any) -> None:
        for part in parts:
            self.sha.update(repr(part).encode("utf-8", "backslashreplace"))
            self.sha.update(b"\x00")

    def visit(self, obj: Any, depth: int = 0) -> None:
        self.nodes += 1
        if self.nodes > _MAX_NODES or depth > 60:
            self.feed("<truncated>")
            return
        if isinstance(obj, _CONSTANT_TYPES):
            self.feed(type(obj).__name__, obj)
            return
        if id(obj) in self.seen:
            self.feed("<seen>", type(obj).__qualname__)
            return
        self.seen.add(id(obj))
        self.alive.append(obj)
        if isinstance(obj, (tuple, list, frozenset, set)):
            items = sorted(obj, key=repr) if isinstance(obj, (set, frozenset)) else obj
            self.feed(type(obj).__name__, len(obj))
            for item in list(items)[:1000]:
                self.visit(item, depth + 1)
        elif isinstance(obj, dict):
            self.feed("dict", len(obj))
            for key in sorted(obj, key=repr)[:1000]:
                self.visit(key, depth + 1)
                self.visit(obj[key], depth + 1)
        elif isinstance(obj, types.CodeType):
            self._visit_code(obj, depth)
        elif isinstance(obj, types.FunctionType):
            self._visit_function(obj, depth)
        elif isinstance(obj, types.MethodType):
            self.feed("method")
            self.visit(obj.__func__, depth + 1)
            self.visit(obj.__self__, depth + 1)
        elif isinstance(obj, (staticmethod, classmethod)):
            self.visit(obj.__func__, depth + 1)
        elif isinstance(obj, property):
            self.visit((obj.fget, obj.fset, obj.fdel), depth + 1)
        elif isinstance(obj, types.ModuleType):
            self.feed("module", obj.__name__)
        elif isinstance(obj, type):
            self._visit_class(obj, depth)
        else:
            self._visit_instance(obj, depth)

    def _visit_code(self, code: types.CodeType, depth: int) -> None:
        # Not co_filename / co_firstlineno: ipykernel names cells differently in every kernel.
        self.feed(
            "code",
            code.co_name,
            code.co_code,
            code.co_names,
            code.co_varnames,
            code.co_freevars,
            code.co_cellvars,
            code.co_argcount,
            code.co_kwonlyargcount,
            code.co_flags,
        )
        for const in code.co_consts:
            self.visit(const, depth + 1)

    def _visit_function(self, fn: types.FunctionType, depth: int) -> None:
        if not _is_user_module(fn.__module__):
            self.feed("libfn", fn.__module__, fn.__qualname__)
            return
        self.feed("fn", fn.__qualname__)
        self._visit_code(fn.__code__, depth)
        self.visit(fn.__defaults__, depth + 1)
        self.visit(fn.__kwdefaults__, depth + 1)
        for cell in fn.__closure__ or ():
            try:
                self.visit(cell.cell_contents, depth + 1)
            except ValueError:  # empty cell
                self.feed("<empty cell>")
        fn_globals = fn.__globals__
        for name in sorted(_global_names(fn.__code__)):
            if name in fn_globals:
                self.feed("global", name)
                self.visit(fn_globals[name], depth + 1)

    def _visit_class(self, cls: type, depth: int) -> None:
        if not _is_user_module(cls.__module__):
            self.feed("libclass", cls.__module__, cls.__qualname__)
            return
        self.feed("class", cls.__qualname__)
        for base in cls.__bases__:
            self.visit(base, depth + 1)
        for name in sorted(vars(cls)):
            if name in ("__dict__", "__weakref__", "__module__", "__doc__"):
                continue
            self.feed("attr", name)
            self.visit(vars(cls)[name], depth + 1)

    def _visit_instance(self, obj: Any, depth: int) -> None:
        cls = type(obj)
        if isinstance(obj, _BUILTIN_TYPES):
            # torch.relu and torch.sigmoid share a class: their names tell them apart.
            owner = getattr(obj, "__self__", None)
            owner_name = owner.__name__ if isinstance(owner, types.ModuleType) else type(owner).__qualname__
            self.feed("builtin", getattr(obj, "__module__", None), getattr(obj, "__qualname__", None), owner_name)
            return
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(obj, torch.Tensor):
            # Values are graph inputs and guarded by Dynamo; shape/dtype decide the compiled code.
            self.feed("tensor", tuple(obj.shape), str(obj.dtype), str(obj.device), obj.requires_grad)
            return
        if torch is not None and isinstance(obj, torch.nn.Module):
            self._visit_module(obj, depth)
            return
        self.visit(cls, depth + 1)
        if _is_user_module(cls.__module__):
            attrs = getattr(obj, "__dict__", None)
            if isinstance(attrs, dict):
                self.visit({k: v for k, v in attrs.items() if isinstance(v, _CONSTANT_TYPES)}, depth + 1)

    def _visit_module(self, module: Any, depth: int) -> None:
        for qualname, sub in module.named_modules(remove_duplicate=False):
            self.feed("submodule", qualname)
            self.visit(type(sub), depth + 1)
            consts = {k: v for k, v in vars(sub).items() if isinstance(v, _CONSTANT_TYPES) and not k.startswith("_")}
            self.visit(consts, depth + 1)
            for hooks in ("_forward_hooks", "_forward_pre_hooks"):
                for hook in getattr(sub, hooks, {}).values():
                    self.visit(hook, depth + 1)

    def hexdigest(self) -> str:
        return self.sha.hexdigest()


def _global_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def code_digest(fn: Any) -> str:
    """Digest of what `fn` (a function, bound method or nn.Module's forward) can observe."""
    digest = _Digest()
    digest.visit(fn)
    return digest.hexdigest()


def code_parts(fn: Any) -> dict[str, str]:
    """A digest per part of what `fn` can observe, named as a user would look for it: its own code (with its
    defaults), each global and closure variable it reads, and the module it is a method of. Compared with a saved
    entry's, they say where the code changed ("differs at `helper`"); `code_digest` stays the check."""
    owner = getattr(fn, "__self__", None)
    inner = getattr(fn, "__func__", fn)
    if not isinstance(inner, types.FunctionType):
        return {getattr(inner, "__qualname__", type(inner).__qualname__): code_digest(fn)}

    def digest_of(*objs: Any) -> str:
        digest = _Digest()
        for obj in objs:
            digest.visit(obj)
        return digest.hexdigest()

    own = _Digest()
    own._visit_code(inner.__code__, 0)
    own.visit((inner.__defaults__, inner.__kwdefaults__))
    parts = {inner.__qualname__: own.hexdigest()}
    for name, cell in zip(inner.__code__.co_freevars, inner.__closure__ or ()):
        try:
            parts[name] = digest_of(cell.cell_contents)
        except ValueError:  # empty cell
            parts[name] = "<empty cell>"
    for name in sorted(_global_names(inner.__code__)):
        if name in inner.__globals__ and name not in parts:
            parts[name] = digest_of(inner.__globals__[name])
    if owner is not None and not isinstance(owner, types.ModuleType):
        parts[f"self ({type(owner).__qualname__})"] = digest_of(owner)
    return parts


def changed_parts(saved: dict[str, str], now: dict[str, str]) -> list[str]:
    """The parts whose digest differs, the function's own code first; parts only one side has count too. The module
    the function is a method of is named only when nothing else differs (it holds the method and what it reads)."""
    changed = [name for name in dict.fromkeys([*now, *saved]) if saved.get(name) != now.get(name)]
    named = [name for name in changed if not name.startswith("self (")]
    return named or changed
