"""Which of the guards torch builds Dynamo precompile drops from a saved entry, and we give back as its identity
check: the rule in one place, read by the guard building and the restore (precompile.py)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .identity_checks import sha

# The guards precompile drops (torch 2.9-2.15: guards.py, CheckFunctionManager.__init__), those built on them, and
# the identity guards it cannot serialize but does not drop (CLASS_MATCH, NN_MODULE...: torch then saves no entry
# for the function, HF T5 and BART). We drop those too from the saved build: each is an identity check, which the
# restored entry gets back from our record like the others.
DROPPED_KINDS = frozenset(
    {"ID_MATCH", "CLOSURE_MATCH", "WEAKREF_ALIVE", "DICT_VERSION"}
    | {"CLASS_MATCH", "FUNCTION_MATCH", "MODULE_MATCH", "NN_MODULE"}
)
DROPPED_BASES = frozenset({"ID_MATCH", "DICT_VERSION"})


def guard_source(entry: Any) -> str:
    """A guard's source expression, as torch evaluates it (`L['self'].act`; the entry's own name is shorter)."""
    guard = getattr(entry, "orig_guard", None)
    return str(getattr(guard, "name", None) or entry.name)


def guard_states(codes: Iterable[Any]) -> set[str]:
    """The compiled graphs of a package's (or a saved entry's) code entries, each named by its guard state."""
    return {sha(guarded.guards_state) for code in codes for guarded in getattr(code, "guarded_codes", ())}


def is_dropped(entry: Any) -> bool:
    derived = set(getattr(entry, "derived_guard_types", ()) or ())
    return entry.guard_type in DROPPED_KINDS or bool(DROPPED_BASES & derived)
