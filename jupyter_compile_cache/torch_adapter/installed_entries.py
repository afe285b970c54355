"""What a restored precompile entry installs into a module's globals: checked to be all there before the entry is
used, and kept clear of by the names Dynamo picks next; an entry that fails is set aside, out of torch's way; a
backend the function already holds is not loaded again when a newer entry is installed."""

from __future__ import annotations

import dis
import itertools
import os
import re
import shutil
import sys
import types
from typing import Any

_TRAILING_NUMBER = re.compile(r"_(\d+)$")


def check_installed_globals(pkg: Any) -> None:
    """Every global the restored bytecode loads must exist: else it would fail in the user's cell at call time."""
    import builtins

    from torch._dynamo.package import SerializedCode

    for entry in getattr(pkg, "_codes", {}).values():
        module = sys.modules.get(getattr(entry, "python_module", None) or "")
        if module is None:
            continue
        for guarded in getattr(entry, "guarded_codes", ()):
            code = SerializedCode.to_code_object(guarded.dynamo_code)
            for name in loaded_globals(code):
                if name not in module.__dict__ and not hasattr(builtins, name):
                    raise NameError(f"the restored code needs the global {name!r}, which torch did not install")


def loaded_globals(code: types.CodeType) -> set[str]:
    names = {ins.argval for ins in dis.get_instructions(code) if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= loaded_globals(const)
    return {n for n in names if isinstance(n, str)}


def set_aside(key: str) -> None:
    """Move a failing entry out of torch's way (kept beside it for inspection), so it is not tried again."""
    try:
        from torch._dynamo.package import DynamoCache

        entry_dir = os.path.join(DynamoCache.path_prefix(), key)
        if os.path.isdir(entry_dir):
            target = os.path.join(os.path.dirname(entry_dir), f".jcc-set-aside-{key}")
            shutil.rmtree(target, ignore_errors=True)
            os.replace(entry_dir, target)
    except Exception:  # best effort: the fallback was told, and this kernel refuses the entry by its key anyway
        pass


def advance_unique_ids(package_obj: Any) -> None:
    """Keep Dynamo's next unique ids clear of the global names a restored entry just installed."""
    try:
        from torch._dynamo import bytecode_transformation as bt
    except Exception:  # a torch without this module: nothing to keep clear
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


# torch names each compiled backend once, with a uuid4 (`__compiled_fn_3_<uuid>`): one name is one compile.
_COMPILED_FN_NAME = re.compile(r"^__compiled_fn_\d+_[0-9a-f]{8}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{12}$")


class DeserializedOnce:
    """A saved backend as torch installs it: its deserialized form is noted, and one this function deserialized
    before under the same uuid-bearing name (the same compile, saved again with a later bundle) is handed back
    instead of being loaded again with all its kernels. A name without a uuid is always loaded."""

    def __init__(self, artifact: Any, before: tuple[type, Any] | None, noted: dict, backend_id: str) -> None:
        self.artifact, self.before, self.noted, self.backend_id = artifact, before, noted, backend_id

    def after_deserialization(self) -> Any:
        kind = type(getattr(self.artifact, "content", None))
        if self.before is not None and self.before[0] is kind and _COMPILED_FN_NAME.match(self.backend_id):
            backend = self.before[1]
        else:
            backend = self.artifact.after_deserialization()
        self.noted[self.backend_id] = (kind, backend)
        return backend

    def __getattr__(self, name: str) -> Any:
        return getattr(self.artifact, name)
