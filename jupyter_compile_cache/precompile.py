"""Making Dynamo precompile safe for notebooks.

With `torch._dynamo.config.caching_precompile`, Dynamo stores its traced bytecode and guards under
`<cache>/dynamo/<key>/entry`, keyed only by the function's qualified name and first line number, and drops the
guards that would notice an edited function (ID_MATCH, CLOSURE_MATCH, ...). Measured on torch 2.13: a restored
entry for `Net.forward` keeps returning the old result after `.sin()` is edited to `.tanh()`, or after a helper
it calls is edited. So we add our own check:

* When torch looks an entry up (`DynamoCache.load`), we compute a digest of the code the compiled function can
  reach: its bytecode and constants, every user function, class and constant it reads from its globals or
  closure (transitively), and for an `nn.Module` the classes and constant attributes of all its submodules.
  Library code (torch, site-packages, the standard library) is identified by name only: the bundle fingerprint
  pins torch's version.
* Entries are only handed to torch when the digest stored next to them (`jcc_code_digest`, written when the cell
  saved) equals the live one. Otherwise it is a miss, counted as `precompile_stale_rejected`, and torch
  compiles the new code.

A second torch issue: an installed precompile entry puts globals such as `__builtins_dict___0` into the module,
and the next fresh compile in that module picks the same name from Dynamo's unique-id counter and fails with
"Name '__builtins_dict___0' already exists in scope". After each install we move that counter past the names the
entry installed.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import re
import sys
import sysconfig
import types
import weakref
from typing import Any

DIGEST_FILE = "jcc_code_digest"
COUNTER_GROUP = "jupyter_compile_cache"
_MAX_NODES = 20000
_CONSTANT_TYPES = (type(None), bool, int, float, complex, str, bytes)
_TRAILING_NUMBER = re.compile(r"_(\d+)$")


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
    return not any(real.startswith(prefix + os.sep) for prefix in _LIBRARY_PREFIXES)


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


class _DroppedGuardFilter(logging.Filter):
    """torch warns for every guard precompile drops; the code digest stands in for them, so hide the noise."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "is dropped with caching_precompile=True" not in str(record.msg)


class PrecompileGuard:
    """Wraps torch's Dynamo precompile cache while installed; `uninstall` puts torch back exactly as it was."""

    def __init__(self) -> None:
        self.installed = False
        self.pending: dict[str, str] = {}  # key -> digest of functions compiled since the last save
        self.loaded_keys: set[str] = set()  # keys whose entries were handed to torch
        self._fns: dict[str, Any] = {}
        self._orig_load: Any = None
        self._orig_install: Any = None
        self._log_filter = _DroppedGuardFilter()

    @staticmethod
    def available() -> bool:
        try:
            import torch._dynamo.config as dynamo_config
            from torch._dynamo import package
        except Exception:
            return False
        return hasattr(dynamo_config, "caching_precompile") and hasattr(package, "DynamoCache")

    def install(self) -> None:
        if self.installed or not self.available():
            return
        from torch._dynamo import package

        cache = package.DynamoCache
        self._orig_load = cache.load  # bound method of the singleton
        guard = self

        def load(fn: Any) -> Any:
            return guard._load(fn)

        cache.load = load  # instance attribute shadows the method; deleted on uninstall
        self._orig_install = package.CompilePackage.install

        def install_package(package_self: Any, backends: Any) -> None:
            guard._orig_install(package_self, backends)
            _advance_unique_ids(package_self)

        package.CompilePackage.install = install_package
        logging.getLogger("torch._dynamo.guards").addFilter(self._log_filter)
        self.installed = True

    def uninstall(self) -> None:
        if not self.installed:
            return
        from torch._dynamo import package

        vars(package.DynamoCache).pop("load", None)
        package.CompilePackage.install = self._orig_install
        logging.getLogger("torch._dynamo.guards").removeFilter(self._log_filter)
        self.installed = False

    def _load(self, fn: Any) -> Any:
        from torch._dynamo import package
        from torch._dynamo.utils import counters

        key = package.CompilePackage.source_id_from_fn(fn)
        digest = code_digest(fn)
        self.pending[key] = digest
        self._fns[key] = weakref.ref(fn) if _weakrefable(fn) else None
        entry_dir = os.path.join(package.DynamoCache.path_prefix(), key)
        if os.path.exists(os.path.join(entry_dir, "entry")):
            stored = read_digest(entry_dir)
            if stored != digest:
                counters[COUNTER_GROUP]["precompile_stale_rejected"] += 1
                counters["dynamo_cache"]["dynamo_cache_miss"] += 1
                return None
        result = self._orig_load(fn)
        if result is not None:
            self.loaded_keys.add(key)
        return result

    def write_digests(self, keys: set[str]) -> list[str]:
        """Write the digest next to each saved entry; returns the digest files written."""
        from torch._dynamo import package

        written = []
        prefix = package.DynamoCache.path_prefix()
        for key in keys:
            digest = self.pending.get(key)
            entry_dir = os.path.join(prefix, key)
            if digest is None or not os.path.exists(os.path.join(entry_dir, "entry")):
                continue
            path = os.path.join(entry_dir, DIGEST_FILE)
            if read_digest(entry_dir) != digest:
                tmp = path + f".tmp{os.getpid()}"
                with open(tmp, "w", encoding="utf-8") as f:
                    json.dump({"digest": digest}, f)
                os.replace(tmp, path)
            written.append(path)
        return written


def read_digest(entry_dir: str) -> str | None:
    try:
        with open(os.path.join(entry_dir, DIGEST_FILE), encoding="utf-8") as f:
            return json.load(f).get("digest")
    except (OSError, ValueError, AttributeError):
        return None


def _weakrefable(obj: Any) -> bool:
    try:
        weakref.ref(obj)
        return True
    except TypeError:
        return False


def _advance_unique_ids(package_obj: Any) -> None:
    """Keep Dynamo's next unique ids clear of the global names a restored entry just installed."""
    try:
        from torch._dynamo import bytecode_transformation as bt
    except Exception:
        return
    # The builtins dict is put into the module's globals directly, not through _installed_globals: scan the
    # globals of every module the entry installed into for Dynamo-style names ("__<prefix>_<n>").
    modules = {getattr(entry, "python_module", None) for entry in getattr(package_obj, "_codes", {}).values()}
    highest = -1
    for module_name in modules:
        module = sys.modules.get(module_name) if module_name else None
        for name in getattr(module, "__dict__", {}):
            if name.startswith("__") and (match := _TRAILING_NUMBER.search(name)):
                highest = max(highest, int(match.group(1)))
    counter = getattr(bt, "_unique_id_counter", None)
    if highest < 0 or counter is None:
        return
    nxt = next(counter)
    bt._unique_id_counter = itertools.count(max(nxt, highest + 1))
