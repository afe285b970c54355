"""The identity guards torch's precompile drops, put back on a restored entry: the objects a saved record names
(`G['helper']`, `L['self'].act`) are resolved at load, or at the first call for what exists only during a call, and
compared by digest; afterwards the entry runs only while each is the same object.

A source that is a plain chain from a root torch's guard tree has (`G['torch'].fx.Proxy`, `L['self']._modules['m']`)
becomes an ID_MATCH leaf in that C++ tree (`into_tree`), as torch's own guards are: nothing of ours runs in Python
per call for it. What is left (a closure cell, a class's MRO, what exists only during a call) is one Python check.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib
import inspect
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
        if code.co_argcount == 0 and code.co_flags & inspect.CO_VARARGS:
            # a decorator's `wrapper(*args, **kwargs)`: the module is L['args'][0], whatever else a call passes
            local_scope[code.co_varnames[0]] = (owner,)
        else:
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


_ALIVE_KEY = "alive"


def into_tree(
    guard_manager: Any, values: dict[str, Any], runtime_globals: dict[str, Any], local_scope: dict[str, Any]
) -> dict[str, Any]:
    """Put each verified object whose source is a plain chain into torch's C++ guard tree as an ID_MATCH leaf, on the
    node torch's own guards use for that path (made where torch has none); return the sources left for the Python
    check. An object held only weakly that dies fails the entry from then on (a new object may get its address), as
    torch invalidates its own entries. Anything torch's tree API does not take leaves the source to the Python
    check: never less checked than before."""
    try:
        from torch._dynamo.guards import GuardManagerType

        kind = GuardManagerType.GUARD_MANAGER
        root = guard_manager.root
    except (ImportError, AttributeError):
        return values
    if not hasattr(guard_manager, "__dict__"):  # nowhere to keep the weak references the liveness guard needs
        return values
    alive: dict[str, bool] = {_ALIVE_KEY: True}
    alive_guarded = False
    held: list[Any] = []
    left: dict[str, Any] = {}
    for source, value in values.items():
        chain = _chain(source)
        node = None
        if chain is not None:
            try:
                node = _node_for(root, kind, chain, value, runtime_globals, local_scope)
                if node is not None and not alive_guarded:  # first: an ID_MATCH must never stand without it
                    _add_alive_guard(root, kind, alive)
                    alive_guarded = True
                if node is not None:
                    _add_id_match(node, value, _guard_part(source))
            except Exception:  # torch's tree API differs here (another torch; a dict torch guards by key index,
                node = None  # whose manager takes no item accessor): the Python check keeps it
        if node is None:
            left[source] = value
            continue
        try:
            held.append(weakref.ref(value, lambda _ref: alive.clear()))
        except TypeError:  # builtins and other objects without weak references: held (never freed meanwhile)
            held.append(value)
    if held:
        guard_manager.jcc_identity_objects = (alive, held)  # they live as long as the entry's guards
    return left


def _add_alive_guard(root: Any, kind: Any, alive: dict[str, bool]) -> None:
    node = root.globals_dict_manager(
        f_globals=alive, source="jupyter_compile_cache_alive", example_value=alive, guard_manager_enum=kind
    )
    part = "jupyter_compile_cache: what this entry was compiled for lives"
    node.add_dict_contains_guard(True, _ALIVE_KEY, [part], None)


def _chain(source: str) -> tuple[str, str, list[tuple[str, Any]]] | None:
    """A source torch wrote as its root (`G['a']` or `L['a']`) and the steps from it: `.attr`, `['key']`, `[0]`,
    `type(...)` and a class's own dict (`dict(type(x).__dict__)`, as torch writes it); None for anything else."""
    try:
        node: Any = ast.parse(source, mode="eval").body
    except SyntaxError:
        return None
    steps: list[tuple[str, Any]] = []
    while True:
        if isinstance(node, ast.Attribute):
            steps.append(("attr", node.attr))
            node = node.value
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            key = node.slice.value
            if isinstance(node.value, ast.Name) and node.value.id in ("G", "L") and isinstance(key, str):
                return node.value.id, key, steps[::-1]
            if type(key) not in (str, int):
                return None
            steps.append(("item", key))
            node = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) == 1:
            arg = node.args[0]
            if node.keywords:
                return None
            if node.func.id == "type":
                steps.append(("type", None))
                node = arg
            elif node.func.id == "dict" and isinstance(arg, ast.Attribute) and arg.attr == "__dict__":
                steps.append(("class_dict", None))
                node = arg.value
            else:
                return None
        else:
            return None


def _node_for(
    root: Any,
    kind: Any,
    chain: tuple[str, str, list[tuple[str, Any]]],
    value: Any,
    runtime_globals: dict[str, Any],
    local_scope: dict[str, Any],
) -> Any:
    """The tree's node for `chain`, made with the accessors torch uses for each step, if the chain names `value` now.
    The whole chain is walked first: no node is made for a chain that does not end at `value`, nor with an accessor
    this torch lacks (a node without a guard still costs its lookup on every call)."""
    scope, name, steps = chain
    source = f"{scope}[{name!r}]"
    current: Any
    if scope == "G":
        if type(runtime_globals) is not dict or name not in runtime_globals:
            return None
        current = runtime_globals[name]
        start = None
    else:  # a local: only where torch's tree reads it already (its frame-locals index is torch's to know)
        start = next((c for c in root.get_child_managers() if c.get_source() == source), None)
        if start is None or name not in local_scope:
            return None
        current = local_scope[name]
    made: list[tuple[str, dict[str, Any]]] = []  # (the accessor's method, its arguments) per step
    for step, key in steps:
        if step == "attr":
            current, source = getattr(current, key), f"{source}.{key}"
            made.append(("getattr_manager", {"attr": key}))
        elif step == "type":
            current, source = type(current), f"type({source})"
            made.append(("type_manager", {}))
        elif step == "class_dict":
            if not isinstance(current, type):  # torch's accessor reads a class's own dict only
                return None
            current, source = dict(current.__dict__), f"dict({source}.__dict__)"
            made.append(("type_dict_manager", {}))
        else:
            accessor = _ITEM_ACCESSORS.get((type(current), type(key)))
            if accessor is None:
                return None
            current, source = current[key], f"{source}[{key!r}]"
            made.append((accessor, {"key": key}))
        made[-1][1].update(source=source, example_value=current, guard_manager_enum=kind)
    if current is not value or not all(hasattr(root, method) for method, _ in made):
        return None
    if start is None:
        globals_node = root.globals_dict_manager(
            f_globals=runtime_globals, source="G", example_value=runtime_globals, guard_manager_enum=kind
        )
        start = globals_node.dict_getitem_manager(
            key=name, source=f"G[{name!r}]", example_value=runtime_globals[name], guard_manager_enum=kind
        )
    node = start
    for method, arguments in made:
        node = getattr(node, method)(**arguments)
    return node


# The accessor torch reads each kind of container with, by (container, key) type.
_ITEM_ACCESSORS = {
    (dict, str): "dict_getitem_manager",
    (tuple, int): "tuple_getitem_manager",
    (list, int): "list_getitem_manager",
}


def _add_id_match(node: Any, value: Any, part: str) -> None:
    try:
        node.add_id_match_guard(id(value), [part], None)
    except TypeError:  # a torch whose leaf guards take no user stack
        node.add_id_match_guard(id(value), [part])


def _guard_part(source: str) -> str:
    """What torch's guard-failure reasons say of one of our identity guards, in the tree or in the Python check."""
    return f"jupyter_compile_cache: {source} unchanged since restore"


def never(_locals: Any) -> bool:
    return False


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def identity_check(
    values: dict[str, Any], deferred: dict[str, str], runtime_globals: dict[str, Any]
) -> tuple[Any, list[str]]:
    """One guard function: every dropped guard's source still names the object verified for it (`deferred` sources'
    objects verified against their digests at the guard's first run, in the frame's scope, and bound then; one that
    differs fails the guard from then on). It runs at every call of the restored entry: a part two sources share is
    evaluated once per call, as in torch's guard tree, and each clause stops the check at its first mismatch."""
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
    parts = [_guard_part(source) for source in [*values, *deferred]]
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
