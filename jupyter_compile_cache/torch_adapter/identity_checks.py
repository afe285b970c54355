"""The identity guards torch's precompile drops, put back on a restored entry as one check: the objects a saved
record names (`G['helper']`, `L['self'].act`) are resolved at load, or at the first call for what exists only
during a call, and compared by digest; afterwards the entry runs only while each is the same object.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib
import types
import weakref
from dataclasses import dataclass
from typing import Any

from .code_digest import code_digest
from .layers import COUNTER_GROUP


class _LoadGlobals(dict):
    """G at load time: the function's globals, plus the names torch installs there later: `__import_<module>`
    aliases and `__builtins_dict___<n>` (the builtins, which guards on `len` or `isinstance` read)."""

    def __missing__(self, name: str) -> Any:
        if name.startswith("__import_"):
            return importlib.import_module(name[len("__import_") :].replace("_dot_", "."))
        if name.startswith("__builtins_dict__"):
            import builtins

            found = self.get("__builtins__", builtins)
            return found if isinstance(found, dict) else found.__dict__
        raise KeyError(name)


def _closure_vars() -> dict[str, Any]:
    from torch._dynamo import guards

    getter = getattr(guards, "_get_closure_vars", None)
    return dict(getter() if getter else getattr(guards, "CLOSURE_VARS", {}))


def load_scope(record: dict[str, Any], fn: Any) -> LoadScope:
    inner = innermost(fn)
    local_scope: dict[str, Any] = {}
    owner = getattr(fn, "__self__", None)
    code = getattr(inner, "__code__", None)
    if owner is not None and code is not None and code.co_varnames:
        local_scope[code.co_varnames[0]] = owner  # L['self']: the module whose forward this is
    # L['func']: a free variable of the compiled function (a decorator's wrapper, as HF's forward is) is a local of
    # its frame.
    for name, cell in zip(getattr(code, "co_freevars", ()), getattr(inner, "__closure__", None) or ()):
        with contextlib.suppress(ValueError):  # an empty cell: guards on it do not resolve, the entry is refused
            local_scope[name] = cell.cell_contents
    return LoadScope(record, getattr(inner, "__globals__", {}), local_scope, code)


def resolve(
    dropped: dict[str, str], fn_globals: dict[str, Any], local_scope: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, str]] | None:
    """Split an entry's dropped guards: the objects their sources name now, each equal to what was compiled for,
    and the sources to verify at the first call (they name arguments, or names installed later). None if an
    object differs."""
    env = {**_closure_vars(), "L": local_scope, "G": _LoadGlobals(fn_globals)}
    values, deferred = {}, {}
    for source, expected in dropped.items():
        try:
            value = eval(source, env)  # a guard source torch wrote, e.g. G['helper'] or L['self'].act
        except Exception:  # not evaluable yet: checked when its objects exist
            deferred[source] = expected
            continue
        if code_digest(value) != expected:
            return None
        values[source] = value
    return values, deferred


def never(_locals: Any) -> bool:
    return False


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def identity_check(
    values: dict[str, Any], deferred: dict[str, str], runtime_globals: dict[str, Any]
) -> tuple[Any, list[str]]:
    """One guard function: every dropped guard's source still names the object verified for it. The objects of
    `deferred` sources are verified against their digests the first time the guard runs, in the frame's scope,
    and bound then; if one differs, the guard fails from then on.

    It runs on every call of the restored entry: a part two sources share (`L['self']._modules['model']`) is
    evaluated once per call, as torch's guard tree does, and each clause stops the check at its first mismatch."""
    env: dict[str, Any] = {**_closure_vars(), "G": runtime_globals, "___jcc_pending": bool(deferred)}
    targets = []
    for i, (source, value) in enumerate(values.items()):
        try:
            env[f"___jcc_{i}"] = weakref.ref(value)
            targets.append((source, f"___jcc_{i}()"))
        except TypeError:  # builtins and other objects without weak references: hold them
            env[f"___jcc_{i}"] = value
            targets.append((source, f"___jcc_{i}"))
    slots = []
    for i, source in enumerate(deferred, start=len(values)):
        slots.append((f"___jcc_{i}", compile(source, "<guard source>", "eval"), deferred[source]))
        env[f"___jcc_{i}"] = _unbound
        targets.append((source, f"___jcc_{i}()"))

    def verify(frame_locals: Any) -> bool:
        from torch._dynamo.utils import counters

        scope = {**env, "L": frame_locals}
        bound = {}
        for slot, code, expected in slots:
            value = eval(code, scope)
            if code_digest(value) != expected:
                counters[COUNTER_GROUP]["precompile_stale_rejected"] += 1
                env["___jcc_pending"] = False  # its slots stay unbound: the guard fails from now on, torch compiles
                return False
            bound[slot] = _reference(value)
        env.update(bound, ___jcc_pending=False)
        return env["___jcc_check"](frame_locals)

    env["___jcc_verify"] = verify
    body = "".join(f"        {line}\n" for line in _check_lines(targets))
    exec(
        "def ___jcc_check(L):\n    try:\n        if ___jcc_pending:\n            return ___jcc_verify(L)\n"
        f"{body}        return True\n    except Exception:\n        return False\n",
        env,
    )
    parts = [f"jupyter_compile_cache: {source} unchanged since restore" for source in [*values, *deferred]]
    return env["___jcc_check"], parts


def _check_lines(targets: list[tuple[str, str]]) -> list[str]:
    """The check's statements: each source's parts bound to locals the first time one is needed (later sources
    reuse them), then `if <source> is not <its object>: return False`."""
    lines: list[str] = []
    bound: dict[str, str] = {}  # ast.dump of a part -> the local holding it

    def part(node: ast.expr) -> str:
        if isinstance(node, (ast.Name, ast.Constant)):
            return ast.unparse(node)
        # dict(type(x).__dict__)[k], as torch writes a class attribute's source: the class's mapping read in place
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "dict"
            and len(node.args) == 1
            and not node.keywords
            and isinstance(node.args[0], ast.Attribute)
            and node.args[0].attr == "__dict__"
        ):
            return part(node.args[0])
        key = ast.dump(node)
        if key not in bound:
            if isinstance(node, ast.Attribute):
                expr = f"{part(node.value)}.{node.attr}"
            elif isinstance(node, ast.Subscript):
                index = node.slice
                key_expr = ast.unparse(index) if isinstance(index, (ast.Slice, ast.Tuple)) else part(index)
                expr = f"{part(node.value)}[{key_expr}]"
            elif (
                isinstance(node, ast.Call)
                and not node.keywords
                and not any(isinstance(a, ast.Starred) for a in node.args)
            ):
                expr = f"{part(node.func)}({', '.join(part(a) for a in node.args)})"
            else:  # anything else torch may write: evaluated as written
                expr = f"({ast.unparse(node)})"
            bound[key] = f"___jcc_p{len(bound)}"
            lines.append(f"{bound[key]} = {expr}")
        return bound[key]

    for source, target in targets:
        lines.append(f"if {part(ast.parse(source, mode='eval').body)} is not {target}:")
        lines.append("    return False")
    return lines


_NOTHING = object()  # no object is this one


def _unbound() -> object:
    return _NOTHING


def _reference(value: Any) -> Any:
    """A callable returning `value`: a weak reference where it can be one, so the guard does not keep it alive."""
    try:
        return weakref.ref(value)
    except TypeError:
        return lambda: value


@dataclass
class LoadScope:
    """A restored function's record, and where its guard sources resolve at load (G, and L['self'] for a method)."""

    record: dict[str, Any]
    fn_globals: dict[str, Any]
    local_scope: dict[str, Any]
    code: types.CodeType | None  # the restored function's own code (its entry's L is local_scope)


def innermost(fn: Any) -> Any:
    try:
        from torch._dynamo.eval_frame import innermost_fn

        fn = innermost_fn(fn)
    except Exception:  # a torch without it: the function as given
        pass
    return getattr(fn, "__func__", fn)
