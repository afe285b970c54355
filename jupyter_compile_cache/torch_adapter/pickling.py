"""Rebuilding what torch's guard-state pickler cannot save by itself: wrapped functions, guard sources with
derived fields, ContextVars, closures and tensors' dimension markings (used by
`precompile_fixes._guard_state_pickler_patch`)."""

from __future__ import annotations

import contextvars
import functools
import importlib
import marshal
import sys
import types
from typing import Any, cast


def return_none() -> None:
    return None


def rebuild_compiled_wrapper(inline: Any) -> Any:
    """A stand-in for torch.compile's wrapper in a restored entry's guard state: it carries the function the wrapper
    compiles, as torch's wrapper does; guards on a live kernel read the live wrapper."""

    @functools.wraps(inline)
    def compiled(*args: Any, **kwargs: Any) -> Any:
        return inline(*args, **kwargs)

    compiled._torchdynamo_inline = inline  # type: ignore[attr-defined]
    compiled._torchdynamo_orig_callable = inline  # type: ignore[attr-defined]
    return compiled


def rebuild_type_of(module: str, name: str) -> type:
    """A class made inside a function, found again as the type of the module global it was saved by (`type_of`)."""
    return type(getattr(importlib.import_module(module), name))


def rebuild_module_of_type(module: str, name: str, state: dict[str, Any]) -> Any:
    """A torch module of a class made inside a function (`rebuild_type_of`), its state set as torch's own unpickler
    sets a module's (without running its constructor)."""
    import torch

    cls: Any = rebuild_type_of(module, name)
    obj = cls.__new__(cls)
    torch.nn.Module.__setstate__(obj, state)
    return obj


def global_of_type(cls: type) -> tuple[str, str] | None:
    """(module, name) of a global of `cls.__module__` whose type is CLS: how a class made inside a function (not
    reachable by its qualified name) can be found again in another process; None where there is none."""
    module = sys.modules.get(getattr(cls, "__module__", None) or "")
    if module is None:
        return None
    for name, value in list(vars(module).items()):
        if type(value) is cls:
            return module.__name__, name
    return None


def rebuild_source(cls: type, values: dict[str, Any]) -> Any:
    """A guard source as it was saved, every field set as it was, without running its constructor: a source's
    `__post_init__` may install a guard into the trace in progress (ImportSource), and there is none at load."""
    source = object.__new__(cls)
    for name, value in values.items():
        object.__setattr__(source, name, value)
    return source


def rebuild_bound_method(function: Any, owner: Any) -> types.MethodType:
    return types.MethodType(function, owner)


def rebuild_marked_tensor(rebuild: Any, args: tuple, marks: dict[str, Any]) -> Any:
    """A tensor as torch's guard-state pickler rebuilds it, with the dimension markings it had when it was saved
    (the guard on `mark_dynamic`'s attributes compares them with the live input's)."""
    tensor = rebuild(*args)
    for name, value in marks.items():
        setattr(tensor, name, value)
    return tensor


def rebuild_context_var(name: str, has_default: bool, default: Any) -> contextvars.ContextVar:
    return contextvars.ContextVar(name, default=default) if has_default else contextvars.ContextVar(name)


class EmptyCell:
    """A closure cell with nothing in it yet (a name assigned after the inner function was made)."""


def cell_value(cell: types.CellType) -> Any:
    try:
        return cell.cell_contents
    except ValueError:
        return EmptyCell()


def rebuild_function(
    code: types.CodeType | bytes,
    module: str,
    name: str,
    qualname: str,
    defaults: tuple | None,
    kwdefaults: dict[str, Any] | None,
    closure: tuple | None,
) -> types.FunctionType:
    if isinstance(code, bytes):
        code = marshal.loads(code)  # noqa: S302  (bytes from a verified bundle made by this Python)
    if closure is not None:  # cells, from bundles saved before the values were
        closure = tuple(
            c if isinstance(c, types.CellType) else types.CellType() if isinstance(c, EmptyCell) else types.CellType(c)
            for c in closure
        )
    fn = types.FunctionType(
        cast(types.CodeType, code), importlib.import_module(module).__dict__, name, defaults, closure
    )
    fn.__qualname__ = qualname
    fn.__kwdefaults__ = kwdefaults
    return fn
