"""Building a compiled frame's guards: live ones as plain torch.compile builds them, the saved state as torch's
precompile does, the guards it drops recorded; a restored entry's guards given their dropped identity checks back;
why a restored function compiled after all."""

from __future__ import annotations

import contextlib
import inspect
import os
import weakref
from typing import Any

from . import dispatch_state, guard_policy
from .code_digest import code_digest
from .identity_checks import LoadScope, identity_check, into_tree, never, resolve, sha
from .layers import COUNTER_GROUP
from .miss_reasons import MissCause, MissReason, PrecompileStep
from .precompile_troubles import Troubles


class GuardBuilder:
    """torch's guard building, for fresh compiles and restored entries; what it keeps of each saved entry's guards
    (the guards precompile dropped, the dispatch keys it was built under) for the records saved beside them."""

    def __init__(self, troubles: Troubles) -> None:
        self.troubles = troubles
        # package key -> {sha256 of a saved guard state -> {guard source: digest of the object it watched}}: the
        # guards precompile dropped from each saved entry.
        self.dropped: dict[str, dict[str, dict[str, str]]] = {}
        # package key -> {sha256 of a saved guard state -> the thread's dispatch keys it was compiled under}
        self.dispatch_keys: dict[str, dict[str, list[int]]] = {}
        # code -> the guards of the entries restored for it (for the reason, should it compile afresh)
        self.restored: weakref.WeakKeyDictionary[Any, list[Any]] = weakref.WeakKeyDictionary()
        self.unpackaged: list[str] = []  # functions Dynamo compiled in a cell with no package (new_unpackaged)

    def keep_saved(self, key: str, record: dict[str, Any]) -> None:
        """A restored entry's record: saved again with a cell, the entry keeps its dropped guards and dispatch keys."""
        self.dropped.setdefault(key, {}).update(record.get("guarded", {}))
        self.dispatch_keys.setdefault(key, {}).update(record.get("dispatch_keys", {}))

    def build(
        self,
        cfm: Any,
        orig_init: Any,
        signature: inspect.Signature,
        call: tuple[tuple, dict[str, Any]],
        installing: bool,
    ) -> None:
        """Live guards as plain torch.compile builds them; the saved state from torch's precompile build.
        `installing`: torch is building a restored entry's guards, which is no compile."""
        import torch._dynamo.config as dynamo_config

        args, kwargs = call
        arguments = dict(signature.bind(cfm, *args, **kwargs).arguments)
        arguments.pop(next(iter(signature.parameters)))  # self
        save = bool(arguments.get("save_guards", False))
        if not installing:
            self._note_fresh_compile(arguments)
            # torch makes a function's package when torch.compile is called, only while precompile is on
            code = arguments.get("f_code")
            name = getattr(code, "co_qualname", None) or getattr(code, "co_name", "")
            if (
                dynamo_config.caching_precompile
                and getattr(arguments.get("output_graph"), "package", False) is None
                and not name.startswith("torch_dynamo_resume_in_")
            ):
                # A module may be compiled through torch's own wrapper, whose name says nothing to the user. Other
                # frames of torch's are ones Dynamo reached on its own (after a graph break): not what was compiled.
                filename = getattr(code, "co_filename", "")
                if f"{os.sep}torch{os.sep}" not in filename:
                    self.unpackaged.append(name)
                elif filename.endswith(os.path.join("_dynamo", "external_utils.py")):
                    self.unpackaged.append("")
        if not dynamo_config.caching_precompile and not save:
            orig_init(cfm, *args, **kwargs)
            return
        live = {**arguments, "save_guards": False} if "save_guards" in signature.parameters else arguments
        with dynamo_config.patch(caching_precompile=False):
            orig_init(cfm, **live)
        if not save:
            return
        # The entry a package records (also when a function compiled in a %%compile_cache cell recompiles
        # outside one): torch's precompile build, whose guards can be serialized.
        user_filter = arguments.get("guard_filter_fn")
        seen: list[Any] = []

        def recording_filter(entries: Any) -> Any:
            seen.extend(entries)
            # torch builds the guards again after this filter, while the first build's objects still live; a source
            # that makes a new object at each look (transformers 5.2x's per-layer config views) then fails torch
            # 2.11's check that a guard saw one object ("Guarded object must be identical"). What a guard noted of
            # its object serves export alone: the second build notes its own.
            for entry in entries:
                with contextlib.suppress(AttributeError):
                    entry.orig_guard.obj_weakref = None
            keep = user_filter(entries) if user_filter else [True] * len(entries)
            return [bool(k) and not guard_policy.is_dropped(entry) for k, entry in zip(keep, entries)]

        output_graph = arguments.get("output_graph")
        shadow = object.__new__(type(cfm))
        self.troubles.log_filter.dropped_names = logged = []
        try:
            with dynamo_config.patch(caching_precompile=True):
                orig_init(shadow, **{**arguments, "guard_filter_fn": recording_filter})
            guards_state = getattr(shadow, "guards_state", None)
        except Exception as exc:  # torch's failure: this entry is not saved, the cell runs
            package: Any = getattr(output_graph, "package", None)
            self.troubles.fallback(getattr(package, "source_id", None), PrecompileStep.BUILD_GUARDS, exc)
            with contextlib.suppress(Exception):
                package.bypass_current_entry()
            guards_state = None
        finally:
            self.troubles.log_filter.dropped_names = None
        # None: torch bypassed this entry (it is not saved); its package ignores the state then, but torch asserts
        # that there is one ("check_fn.guards_state must not be None").
        cfm.guards_state = guards_state if guards_state is not None else b""
        if guards_state is None:
            return
        logged_names = set(logged)
        dropped = {
            guard_policy.guard_source(entry): code_digest(entry.value) if entry.has_value else "<no value>"
            for entry in seen
            if guard_policy.is_dropped(entry) or guard_policy.guard_source(entry) in logged_names
        }
        # Per package: its function's entry, and those of the frames it left to Dynamo (resume functions after a
        # graph break, functions in other modules that Dynamo compiled as frames of their own).
        key = getattr(getattr(output_graph, "package", None), "source_id", None) or ""
        self.dropped.setdefault(key, {})[sha(guards_state)] = dropped
        self.dispatch_keys.setdefault(key, {})[sha(guards_state)] = dispatch_state.current()

    def _note_fresh_compile(self, arguments: dict[str, Any]) -> None:
        """A function whose restored entry torch just passed over compiles: why, in torch's words where it can say."""
        code = arguments.get("f_code")
        restored = self.restored.get(code) if code is not None else None
        if not restored:
            return
        reason = ""
        with contextlib.suppress(Exception):  # only words for the cell's line
            from torch._dynamo import guards

            local_scope = getattr(arguments.get("output_graph"), "local_scope", None) or {}
            for guard_manager in restored:
                found = guards.get_guard_fail_reason_helper(guard_manager, local_scope, None, None)
                # the traced frame's tensors are fake: a type check failing on that is not the reason
                if found and "FakeTensor" not in found:
                    reason = found
                    break
        name = getattr(code, "co_qualname", None) or getattr(code, "co_name", "?")
        detail = reason.strip().splitlines()[0].removeprefix("None: ")[:200] if reason and reason.strip() else ""
        self.troubles.miss_reasons.append(MissReason(MissCause.RESTORED_GUARD_FAILED, name, detail))

    def recompiled(self, frame: Any, reasons: list[str]) -> None:
        if not reasons:  # no entry of its own failed: a restored one's failure is told if it compiles (_build_guards)
            return
        code = getattr(frame, "f_code", None)
        name = getattr(code, "co_qualname", None) or getattr(code, "co_name", "?")
        reason = str(reasons[0]).strip().splitlines()[0][:200] if reasons and str(reasons[0]).strip() else ""
        self.troubles.miss_reasons.append(MissReason(MissCause.GUARD_FAILED, name, reason))

    @staticmethod
    def saved_dispatch_keys(
        guards_state: Any, scope: LoadScope | None, state_sha: str | None
    ) -> contextlib.AbstractContextManager[Any]:
        """While torch builds the guards of a restored entry (SCOPE, the guard state of sha256 STATE_SHA): the dispatch
        keys it was compiled under (dispatch_state.py)."""
        saved = (scope.record.get("dispatch_keys") or {}).get(state_sha or "") if scope is not None else None
        return dispatch_state.in_force(guards_state, saved)

    def with_identity_guard(
        self, guard_manager: Any, call: tuple[tuple, dict[str, Any]], scope: LoadScope | None, state_sha: str | None
    ) -> Any:
        """Give a restored entry back the guards precompile dropped, bound to objects verified against its record.

        Each entry's record lists the sources of its dropped guards and a digest of what each watched when it was
        compiled. A source that names an object now (a global, `L['self'].act` of the restored method) is checked
        now; one that names an argument or a local of a frame other than the restored function's is checked when
        the entry's guards first run. If every object is equal to the one compiled for, the entry gets one guard:
        each source still names that very object. If not (or the record is missing), the entry's guard fails:
        torch compiles anew instead, as plain torch.compile would for a changed object.
        """
        from torch._dynamo.utils import counters

        if scope is None:
            return guard_manager
        args, kwargs = call
        runtime_globals = kwargs.get("runtime_global_scope", args[2] if len(args) > 2 else scope.fn_globals)
        target_code = kwargs.get("code", args[1] if len(args) > 1 else None)
        dropped = (scope.record.get("guarded") or {}).get(state_sha or "")
        # L is the restored function's frame only for its own entry; a resume function's L is another frame.
        local_scope = scope.local_scope if target_code is scope.code else {}
        split = resolve(dropped, runtime_globals, local_scope) if isinstance(dropped, dict) else None
        if split is None:
            counters[COUNTER_GROUP]["precompile_stale_rejected"] += 1
            guard_manager.root.add_lambda_guard(
                never, ["jupyter_compile_cache: an object this entry was compiled for has changed"], None
            )
        elif split[0] or split[1]:
            in_python = into_tree(guard_manager, split[0], runtime_globals, local_scope)
            if in_python or split[1]:
                check, parts = identity_check(in_python, split[1], runtime_globals)
                root = guard_manager.root
                # after torch's own guards: an entry they reject (the prefill's, at a decode step) never runs ours
                add = getattr(root, "add_epilogue_lambda_guard", None) or root.add_lambda_guard
                add(check, parts, None)
        if target_code is not None:  # asked why, should this code compile afresh after all
            self.restored.setdefault(target_code, []).append(guard_manager)
        return guard_manager
