"""Saving a cell's entries: each one written alone (one torch cannot pickle loses no other), an entry per code where
several codes share torch's key, and a record beside each (its code digest, dropped guards, dispatch keys, input
sizes), a record marked empty for a function Dynamo traced nothing of."""

from __future__ import annotations

import dataclasses
import itertools
import os
import weakref
from collections.abc import Iterable
from typing import Any

from . import entry_records, frame_sizes
from .layers import COUNTER_GROUP
from .miss_reasons import NO_GRAPH_REASON, PrecompileStep
from .precompile_guards import GuardBuilder
from .precompile_load import EntryLoader
from .precompile_troubles import Troubles


class EntrySaver:
    """torch's precompile save, entry by entry, with our records; the packages torch makes and records, tied to the
    code each holds."""

    def __init__(self, troubles: Troubles, loader: EntryLoader, guards: GuardBuilder) -> None:
        self.troubles, self.loader, self.guards = troubles, loader, guards
        # key -> the package torch made afresh for a function without a saved entry
        self.fresh: dict[str, weakref.ref[Any]] = {}
        self._packages: dict[str, dict[str, weakref.ref[Any]]] = {}  # key -> {code digest -> its package}
        self._package_digest: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
        self.recorded: dict[str, dict[str, Any]] = {}  # key -> {code digest -> torch's dynamo entry of its package}
        # (key, code digest) -> {package -> torch's dynamo entry of it}: packages of one code, merged into its entry
        self._package_entries: dict[tuple[str, str], dict[int, Any]] = {}
        self._package_serial: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        self._serials = itertools.count()

    def package_made(self, pkg: Any, fresh: bool) -> None:
        """torch made PKG for the function it just looked up (`EntryLoader.load`; FRESH: with no saved entry): which
        code it holds."""
        key = getattr(pkg, "source_id", None)
        if key and fresh:
            self.fresh[key] = weakref.ref(pkg)
        digest = self.loader.pending.get(key) if key else None
        if key and digest:
            self._package_digest[pkg] = digest
            self._packages.setdefault(key, {})[digest] = weakref.ref(pkg)

    def save_cell_entries(
        self, context: Any, compiled: set[str], loaded_since: set[str], looked_up: Iterable[str]
    ) -> tuple[set[str], list[str]]:
        """A cell's precompile entries written to the cache dir (`compiled`: those it compiled), each with its record;
        returns the keys its bundle carries (compiled, restored and used, or traced to nothing) and the record
        files written."""
        # torch rewrites every entry of the process when saving (with new bytes each time): only save when this
        # cell compiled something, or a warm re-run would look like new work.
        if compiled:
            self.save_entries(context)
        # Entries whose precompile failed in torch stay out of bundles (and out of the cache dir).
        keys = (compiled | loaded_since) - self.troubles.refused_keys
        empty = self.empty_keys(looked_up)
        records = self.write_digests(keys, empty)
        return keys | empty | {os.path.basename(os.path.dirname(path)) for path in records}, records

    def save_entries(self, context: Any) -> None:
        """Write the process's precompile entries to the cache dir, one by one: torch's own save_to_dynamo_cache
        stops at the first entry it cannot pickle (torch 2.11: "Can't pickle local object
        'PyCodegen.pop_null.<locals>.<lambda>'") and so would lose every entry after it, in every later cell too."""
        from torch._dynamo.package import DynamoCache

        try:
            if not hasattr(context, "create_cache_entries"):  # a torch without it: its all-or-nothing save
                context.save_to_dynamo_cache()
                return
            entries, _ = context.create_cache_entries()
        except Exception as exc:  # torch's failure: nothing saved for precompile
            self.troubles.fallback(None, PrecompileStep.COLLECT, exc)
            return
        for key, entry in entries.items():
            if key in self.troubles.refused_keys:
                continue
            if _lacks_a_graph(entry):
                self._no_graph_to_save(entry)
                continue
            try:
                DynamoCache.write(entry, key)
            except Exception as exc:  # this entry is not saved; the function already ran, the others are saved
                self.troubles.fallback(key, PrecompileStep.SAVE, exc)
                continue
            if self.recorded.get(key):
                self.loader.entry_digest[key] = next(reversed(self.recorded[key]))
            if len(self.loader.codes.get(key, {})) > 1:
                self._save_siblings(context, key)

    def _no_graph_to_save(self, entry: Any) -> None:
        """torch has no compiled graph for a code of ENTRY (it logs "Backend not found" and would save the entry
        all the same, to fail at its install in a restored kernel): the entry is left out, and the cell says why."""
        from torch._dynamo.utils import counters

        name = getattr(entry.dynamo, "fn_name", None) or "a function"
        counters[COUNTER_GROUP]["precompile_bypass"] += 1
        # torch's words: the front ends explain
        self.troubles.log_filter.bypass_reasons.append(f"{NO_GRAPH_REASON} `{name}`")

    def package_recorded(self, pkg: Any) -> None:
        """torch recorded PKG's entry for saving, under its key, replacing the entry of any other package of the
        same code (each `torch.compile` of one class, at two sizes, makes a package): the entry saved holds what
        every package of that code compiled. It is kept under its code too (the last one last)."""
        from torch._dynamo.precompile_context import PrecompileContext

        key, digest = getattr(pkg, "source_id", None), self._package_digest.get(pkg)
        entries = getattr(PrecompileContext, "_dynamo_cache_entries", {})
        entry = entries.get(key)
        if not (key and digest and entry is not None):
            return
        serial = self._package_serial.setdefault(pkg, next(self._serials))
        by_package = self._package_entries.setdefault((key, digest), {})
        by_package[serial] = entry
        try:
            entry = merged_entry([e for e in by_package.values() if e.device_type == entry.device_type])
        except Exception as exc:  # the other packages' graphs compile again where this entry is restored
            self.troubles.tell(key, PrecompileStep.MERGE, exc)
        else:
            entries[key] = entry
        by_code = self.recorded.setdefault(key, {})
        by_code.pop(digest, None)
        by_code[digest] = entry

    def _save_siblings(self, context: Any, key: str) -> None:
        """Each code's entry of a key that several codes share, in a folder of its own beside torch's."""
        from torch._dynamo.package import DynamoCache, PrecompileCacheEntry

        prefix = DynamoCache.path_prefix()
        for digest, dynamo_entry in self.recorded.get(key, {}).items():
            sibling = os.path.basename(entry_records.sibling(prefix, key, digest))
            try:
                entry = PrecompileCacheEntry.from_cache_entry(dynamo_entry, context._backend_artifacts_by_key)
                if entry is not None:
                    DynamoCache.write(entry, sibling)
            except Exception as exc:  # that code compiles again where it is restored; the others are saved
                self.troubles.tell(sibling, PrecompileStep.SAVE, exc)

    def _traced_nothing(self, key: str, digest: str) -> bool:
        """Whether the package torch made for this code of KEY holds no compiled frame (as `empty_keys`)."""
        ref = self._packages.get(key, {}).get(digest)
        pkg = ref() if ref is not None else None
        codes = getattr(pkg, "_codes", None) if pkg is not None else None
        return isinstance(codes, dict) and not any(getattr(code, "guarded_codes", True) for code in codes.values())

    def empty_keys(self, looked_up: Iterable[str]) -> set[str]:
        """Of the functions looked up, those torch made a package for that holds no compiled frame: Dynamo traced
        none of their code (it skips torch's own frames), so they have no entry to save."""
        from torch._dynamo.precompile_context import PrecompileContext

        saved = getattr(PrecompileContext, "_dynamo_cache_entries", {})
        out = set()
        for key in set(looked_up) - self.troubles.refused_keys - saved.keys():
            pkg = self.fresh[key]() if key in self.fresh else None
            codes = getattr(pkg, "_codes", None) if pkg is not None else None
            if isinstance(codes, dict) and not any(getattr(code, "guarded_codes", True) for code in codes.values()):
                out.add(key)
        return out

    def write_digests(self, keys: set[str], empty: Iterable[str] = ()) -> list[str]:
        """Write the record next to each saved entry, and a record marked empty for each function in `empty`
        (found again on restore, it is no miss); returns the record files written."""
        from torch._dynamo import package

        loader, refused = self.loader, self.troubles.refused_keys
        written = []
        sized = []  # (key, entry_dir) of saved entries whose function's input sizes this kernel remembers
        prefix = package.DynamoCache.path_prefix()
        empty = set(empty)
        places = [
            (key, os.path.join(prefix, key), loader.entry_digest.get(key) or loader.pending.get(key), key in empty)
            for key in (keys | empty) - refused
        ]
        for key in keys - refused:
            if len(loader.codes.get(key, {})) > 1:  # several codes under one key: each its own, beside torch's
                places += [
                    (key, entry_records.sibling(prefix, key, digest), digest, self._traced_nothing(key, digest))
                    for digest in loader.codes[key]
                ]
        for key, entry_dir, digest, traced_nothing in places:
            has_entry = os.path.exists(os.path.join(entry_dir, "entry"))
            if digest is None or (not has_entry and not traced_nothing):
                continue
            guarded = self.guards.dropped.get(key, {})
            record = {
                "version": entry_records.RECORD_VERSION,
                "digest": digest,
                "guarded": dict(sorted(guarded.items())),
                "dispatch_keys": dict(sorted(self.guards.dispatch_keys.get(key, {}).items())),
            }
            if not has_entry:
                record["empty"] = True
                os.makedirs(entry_dir, exist_ok=True)
            if key in loader.functions:  # which function, and a digest per part: where a later edit differs
                record["function"] = loader.functions[key][0]
                record["parts"] = loader.codes.get(key, {}).get(digest) or loader.functions[key][1]
            written.append(entry_records.write_record(entry_dir, record))
            if has_entry and loader.code_ids.get(key) is not None:
                sized.append((key, entry_dir))
        for key, entry_dir in sized:
            try:
                sizes = frame_sizes.save(entry_dir, loader.code_ids[key])
            except Exception as exc:  # a later recompile in a restored kernel may then compile afresh
                self.troubles.tell(key, PrecompileStep.SAVE_SIZES, exc)
            else:
                written += [sizes] if sizes else []
        return written


def merged_entry(entries: list[Any]) -> Any:
    """One of torch's dynamo entries holding every compiled frame of ENTRIES (entries of one function's code, from
    its packages), each once and in the order they were recorded; a code one package set aside (bypassed) keeps the
    frames of the packages that did not."""
    if len(entries) == 1:
        return entries[0]
    codes: list[Any] = []
    for entry in entries:
        for code in entry.codes:
            into = next((c for c in codes if _same_code(c, code)), None)
            if into is None:
                codes.append(
                    dataclasses.replace(
                        code,
                        guarded_codes=list(code.guarded_codes),
                        backend_ids=list(code.backend_ids),
                        import_sources=dict(code.import_sources),
                    )
                )
                continue
            if code.bypassed:
                continue
            if into.bypassed:
                into.bypassed, into.guarded_codes, into.backend_ids = False, [], []
            new = [g for g in code.guarded_codes if not any(_same_frame(g, h) for h in into.guarded_codes)]
            into.guarded_codes += new
            into.backend_ids += [b for b in code.backend_ids if b not in into.backend_ids]
            into.import_sources.update(code.import_sources)
            into.has_compile_id = into.has_compile_id or code.has_compile_id
    sources = set().union(*(entry.source_info.inlined_sources for entry in entries))
    last = entries[-1]
    source_info = dataclasses.replace(last.source_info, inlined_sources=sources)
    return dataclasses.replace(last, codes=codes, source_info=source_info)


def _same_code(a: Any, b: Any) -> bool:
    return (a.python_module, a.function_names, a.code_source, a.python_code) == (
        b.python_module,
        b.function_names,
        b.code_source,
        b.python_code,
    )


def _same_frame(a: Any, b: Any) -> bool:
    """One compiled frame: a restored package holds the very frames of the entry it was loaded from."""
    return a.guards_state == b.guards_state and a.dynamo_code == b.dynamo_code


def _lacks_a_graph(entry: Any) -> bool:
    """Whether a code of torch's PrecompileCacheEntry names a compiled graph (a backend) the entry does not hold."""
    backends = getattr(entry, "backends", None) or {}
    return any(backend not in backends for code in entry.dynamo.codes for backend in code.backend_ids)
