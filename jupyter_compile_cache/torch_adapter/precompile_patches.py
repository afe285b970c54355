"""The patches that put the precompile guard between torch and its Dynamo precompile: each wraps one of torch's
functions and hands the call to the guard (precompile.py), which decides what happens; the guard's `uninstall`
undoes them together. torch's failure in a wrapped step falls back to the plain path there, never into the cell."""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
import types
from typing import Any

from . import precompile_fixes
from .identity_checks import sha
from .layers import COUNTER_GROUP
from .miss_reasons import PrecompileStep
from .patch import Patch
from .precompile_guards import GuardBuilder
from .precompile_install import EntryInstaller
from .precompile_load import EntryLoader
from .precompile_save import EntrySaver
from .precompile_troubles import Troubles


def wire(
    troubles: Troubles, guard_builder: GuardBuilder, loader: EntryLoader, installer: EntryInstaller, saver: EntrySaver
) -> list[Patch]:
    """The patches, applied: torch's DynamoCache load, CompilePackage's record/install/initialize steps, the guard
    builder and loaders, and the recompilation reasons, each handing its call to the step that decides, with what
    that step needs of the others."""
    from torch._dynamo import convert_frame, guards, package

    cache = package.DynamoCache
    cfm = guards.CheckFunctionManager
    compile_package = package.CompilePackage
    orig = {
        "load": cache.load,  # bound method of the singleton
        "record": cache.record_package,
        "install": compile_package.install,
        "initialize": compile_package.initialize,
        "inlined": compile_package.add_inlined_source,
        "init": cfm.__init__,
        "load_gm": package.load_guard_manager,
        "load_state": package.load_guards_state,
        "user_fn": getattr(compile_package, "_add_user_function", None),
        "reasons": getattr(convert_frame, "get_and_maybe_log_recompilation_reasons", None),
    }
    signature = inspect.signature(orig["init"])

    def load(fn: Any) -> Any:
        return loader.load(fn, orig["load"])

    def record_package(pkg: Any) -> None:
        try:
            orig["record"](pkg)
        except Exception as exc:  # torch's failure: this function runs the plain way
            troubles.fallback(getattr(pkg, "source_id", None), PrecompileStep.RECORD_FUNCTION, exc)
        else:
            saver.package_recorded(pkg)

    def install_package(pkg: Any, *args: Any, **kwargs: Any) -> None:
        installer.install(pkg, orig["install"], args, kwargs)

    def initialize(pkg: Any, fn: Any, dynamo: Any = None, *args: Any, **kwargs: Any) -> None:
        try:
            orig["initialize"](pkg, fn, dynamo, *args, **kwargs)
            saver.package_made(pkg, fresh=dynamo is None)
        except RuntimeError as exc:  # torch's own check refused a saved entry: it compiles afresh (its fallback)
            if dynamo is not None:
                loader.refused_by_torch(fn, exc)
            raise

    def add_inlined_source(pkg: Any, sources: Any, *args: Any, **kwargs: Any) -> None:
        # Under IPython, inspect.getmodule names `collections.abc` for code of `_collections_abc`, and torch
        # compared that code with the other module's source ("Source mismatch for collections.abc", HF models
        # in a kernel). In a plain process getmodule finds no module for such code and torch records nothing:
        # we leave it out the same way. Any other failure: this function is not precompiled.
        try:
            orig["inlined"](pkg, [code for code in sources if _module_holds(code)], *args, **kwargs)
        except Exception as exc:  # torch's failure: this function is not precompiled
            with contextlib.suppress(Exception):
                pkg.bypass_current_entry()
            troubles.fallback(getattr(pkg, "source_id", None), PrecompileStep.RECORD_SOURCES, exc)

    def add_user_function(pkg: Any, code: Any, *args: Any, **kwargs: Any) -> None:
        try:
            orig["user_fn"](pkg, code, *args, **kwargs)
        except Exception:  # torch's failure: this frame is left out (below), unless a notebook cell defined it
            if _add_from_main(pkg, code):
                return
            # e.g. PackageError "Cannot find module for code" (a dataclass __init__, HF T5 on torch 2.11, which
            # Dynamo compiles as a frame of its own): that frame is left out of the package (a bypass, as torch
            # counts its own) and compiles the plain way; the function that calls it is still precompiled.
            from torch._dynamo.utils import counters

            counters[COUNTER_GROUP]["precompile_bypass"] += 1
            module = inspect.getmodule(code)
            pkg._add_function(code, module.__name__ if module else "__main__")
            pkg._codes[code].bypassed = True

    def recompilation_reasons(cache_entries: Any, frame: Any, *args: Any, **kwargs: Any) -> Any:
        reasons = orig["reasons"](cache_entries, frame, *args, **kwargs)
        with contextlib.suppress(Exception):  # only words for the cell's line: never in torch's way
            guard_builder.recompiled(frame, list(reasons or ()))
        return reasons

    def check_function_manager_init(cfm_self: Any, *args: Any, **kwargs: Any) -> None:
        installing = installer.installing is not None
        guard_builder.build(cfm_self, orig["init"], signature, (args, kwargs), installing=installing)

    def load_guards_state(state: bytes, *args: Any, **kwargs: Any) -> Any:
        loader.state_sha = sha(state)
        return orig["load_state"](state, *args, **kwargs)

    def load_guard_manager(*args: Any, **kwargs: Any) -> Any:
        # the restored entry being installed: its record, and which of its guard states torch is loading
        scope, state_sha = loader.scopes.get(installer.installing or ""), loader.state_sha
        with guard_builder.saved_dispatch_keys(kwargs.get("guards_state", args[0] if args else None), scope, state_sha):
            guard_manager = orig["load_gm"](*args, **kwargs)
        return guard_builder.with_identity_guard(guard_manager, (args, kwargs), scope, state_sha)

    return [
        *precompile_fixes.patches(),
        Patch(cache, "load", load),  # instance attribute shadows the method
        Patch(cache, "record_package", record_package),
        Patch(compile_package, "install", install_package),
        Patch(compile_package, "initialize", initialize),
        Patch(compile_package, "add_inlined_source", add_inlined_source),
        *([Patch(compile_package, "_add_user_function", add_user_function)] if orig["user_fn"] else []),
        Patch(cfm, "__init__", check_function_manager_init),
        Patch(package, "load_guards_state", load_guards_state),
        Patch(package, "load_guard_manager", load_guard_manager),
        # why a restored function compiled again, for the cell's line (torch computes the reasons anyway)
        *(
            [Patch(convert_frame, "get_and_maybe_log_recompilation_reasons", recompilation_reasons)]
            if orig["reasons"]
            else []
        ),
    ]


def _add_from_main(pkg: Any, code: types.CodeType) -> bool:
    """Record a frame Dynamo compiled on its own (a block's `forward` under `block.compile()`) whose function a
    notebook cell defined: `inspect.getmodule` finds no module for a cell's code, and torch left the frame out of the
    package, so a restored kernel traced it again. It is recorded under `__main__` when torch's own lookup finds
    that very code there again, as it will in a kernel that ran the same cells."""
    main, own = sys.modules.get("__main__"), inspect.getmodule

    def getmodule(obj: Any, *args: Any, **kwargs: Any) -> Any:
        return main if obj is code else own(obj, *args, **kwargs)

    try:
        from torch._dynamo.package import _get_code_source, _lookup_code

        inspect.getmodule = getmodule  # torch's own search for the code, from `__main__`, for this call only
        try:
            function_name, code_source = _get_code_source(code)
        finally:
            inspect.getmodule = own
        pkg._add_function(code, "__main__", function_name=function_name, code_source=code_source)
        if _lookup_code(pkg._codes[code]) is code:
            return True
    except Exception:  # not found there, or a torch without these: left out, as torch leaves it
        pass
    with contextlib.suppress(Exception):
        del pkg._codes[code]
    return False


def _module_holds(code: types.CodeType) -> bool:
    """Whether the module inspect finds for `code` is the file the code comes from."""
    module = inspect.getmodule(code)
    path = getattr(module, "__file__", None)
    try:
        return bool(path) and os.path.samefile(path, code.co_filename)
    except OSError:
        return False
