"""Looking a function's saved entry up: found by its code digest (under torch's key, or another version's), refused
when its code or the object it is a method of changed, loaded by torch otherwise."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import Any

from . import entry_records, frame_sizes
from .code_digest import changed_parts, code_digest, code_parts
from .identity_checks import LoadScope, innermost, load_scope
from .layers import COUNTER_GROUP
from .miss_reasons import MissCause, MissReason, PrecompileStep
from .precompile_guards import GuardBuilder
from .precompile_troubles import Troubles


def _owners(parts: Any) -> set[str]:
    """The part naming the object a saved function is a method of (`self (Block)`), from a record's parts."""
    return {name for name in parts if name.startswith("self (")} if isinstance(parts, dict) else set()


class EntryLoader:
    """torch's DynamoCache load: what each function looked up is (its code), and the entries handed to torch."""

    def __init__(self, troubles: Troubles, guards: GuardBuilder) -> None:
        self.troubles, self.guards = troubles, guards
        self.pending: dict[str, str] = {}  # key -> code digest of functions looked up since the last save
        self.functions: dict[str, tuple[str, dict[str, str]]] = {}  # key -> (qualified name, code_parts)
        # Functions that share torch's key but not their code (regional compilation: every block's
        # `Module._call_impl`, blocks told apart by an index): key -> {code digest -> its parts}.
        # Each code keeps an entry of its own, saved beside torch's (entry_records.sibling): torch keeps one a key.
        self.codes: dict[str, dict[str, dict[str, str]]] = {}
        self.code_ids: dict[str, Any] = {}  # key -> torch's key for the function's remembered input sizes
        self.lookups: list[str] = []  # the key of every function torch looked up, in order
        self.loaded_keys: set[str] = set()  # keys whose entries were handed to torch
        self.entry_digest: dict[str, str] = {}  # key -> the code digest of the entry in torch's folder for it
        self.scopes: dict[str, LoadScope] = {}  # key -> its record and the scope its guard sources resolve in
        self.state_sha: str | None = None  # sha256 of the guard state torch is loading
        # Asked, with a code digest no entry in the cache dir has, to install other versions' entries beside torch's
        # (ALTERNATES_DIR); whether it installed any. Set by the session for the length of a cell.
        self.find_elsewhere: Callable[[str], bool] | None = None

    def load(self, fn: Any, orig_load: Any) -> Any:
        from torch._dynamo import package
        from torch._dynamo.utils import counters

        key = package.CompilePackage.source_id_from_fn(fn)
        if key in self.troubles.refused_keys:  # never saved again: no digest to take
            return None
        digest = code_digest(fn)
        function = getattr(innermost(fn), "__qualname__", None) or repr(fn)
        parts = code_parts(fn)
        self.pending[key] = digest
        self.functions[key] = (function, parts)
        self.codes.setdefault(key, {})[digest] = parts
        self.lookups.append(key)
        try:
            code_id = frame_sizes.code_id(innermost(fn))
        except Exception as exc:  # its input sizes are then not carried: a later recompile may compile afresh
            code_id = None
            self.troubles.tell(key, PrecompileStep.KEEP_SIZES, exc)
        self.code_ids[key] = code_id
        prefix = package.DynamoCache.path_prefix()
        entry_dir = os.path.join(prefix, key)
        record = entry_records.read_record(entry_dir)
        if record is None or record.get("digest") != digest:
            # torch names an entry by the function's name and first line: a line added above it, or the same code
            # in another version of the bundle, is found by its code instead.
            try:
                if entry_records.is_empty_for(entry_records.sibling(prefix, key, digest), digest):
                    return None  # this code traced nothing when it was saved (beside others of its key that did)
                matching = entry_records.entry_with(prefix, digest)
                if matching is None and self.find_elsewhere is not None and self.find_elsewhere(digest):
                    matching = entry_records.entry_with(prefix, digest)
                if matching is not None and matching != entry_dir:
                    entry_records.adopt_entry(matching, entry_dir)
                    counters[COUNTER_GROUP]["precompile_entry_found_by_code"] += 1
                    record = entry_records.read_record(entry_dir)
            except Exception as exc:  # a full disk, an unreadable folder: the entry under torch's name stands
                self.troubles.tell(key, PrecompileStep.FIND_BY_CODE, exc)
                record = (
                    entry_records.read_record(entry_dir) if os.path.exists(os.path.join(entry_dir, "entry")) else None
                )
        if not os.path.exists(os.path.join(entry_dir, "entry")):
            if record is not None and record.get("empty") and record.get("digest") == digest:
                # Dynamo traced nothing of this function when it was saved (its frames are torch's own, such as
                # `Module._wrapped_call_impl` under transformers' compiled `generate`): nothing to restore, no miss.
                return None
            self.troubles.miss_reasons.append(MissReason(MissCause.NO_ENTRY, function))
            return orig_load(fn)
        if record is None or record.get("digest") != digest:
            counters["dynamo_cache"]["dynamo_cache_miss"] += 1
            saved_parts = (record or {}).get("parts")
            if _owners(saved_parts) != _owners(parts):
                # the entry of another class's method under torch's key (each block class's `Module._call_impl`
                # under regional compilation): no entry for this code, nothing stale
                self.troubles.miss_reasons.append(MissReason(MissCause.NO_ENTRY, function))
                return None
            counters[COUNTER_GROUP]["precompile_stale_rejected"] += 1
            where = changed_parts(saved_parts, parts)[:3] if isinstance(saved_parts, dict) else []
            self.troubles.miss_reasons.append(MissReason(MissCause.OTHER_CODE, function, changed=tuple(where)))
            return None
        if code_id is not None:
            # What the cold kernel had seen of the inputs' sizes: a later recompile makes the same graph it made.
            try:
                frame_sizes.merge(entry_dir, code_id)
            except Exception as exc:  # a damaged sizes file: the restored function still loads
                self.troubles.tell(key, PrecompileStep.USE_SAVED_SIZES, exc)
        try:
            result = orig_load(fn)
        except Exception as exc:  # torch's failure: the plain torch.compile path
            self.troubles.fallback(key, PrecompileStep.LOAD, exc)
            return None
        self.entry_digest[key] = digest
        if result is not None:
            self.loaded_keys.add(key)
            self.scopes[key] = load_scope(record, fn)
            self.guards.keep_saved(key, record)
        return result

    def refused_by_torch(self, fn: Any, exc: BaseException) -> None:
        """torch refused a saved entry we passed (its source check of inlined module code, its version check): the
        function compiles as plain torch.compile would; the cell's line says why, and it is a miss, not a hit."""
        from torch._dynamo.utils import counters

        if counters["dynamo_cache"]["dynamo_cache_hit"] > 0:  # torch counted the load as a hit
            counters["dynamo_cache"]["dynamo_cache_hit"] -= 1
        counters["dynamo_cache"]["dynamo_cache_miss"] += 1
        with contextlib.suppress(Exception):  # not loaded after all
            from torch._dynamo import package

            key = package.CompilePackage.source_id_from_fn(fn)
            self.loaded_keys.discard(key)
            self.scopes.pop(key, None)
        name = getattr(innermost(fn), "__qualname__", None) or repr(fn)
        detail = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        self.troubles.miss_reasons.append(MissReason(MissCause.REFUSED, name, detail))

    def code_digests(self) -> dict[str, str]:
        """{qualified name: code digest} of the functions looked up since the last save, refused ones left out."""
        refused = self.troubles.refused_keys
        return {self.functions[key][0]: digest for key, digest in self.pending.items() if key not in refused}
