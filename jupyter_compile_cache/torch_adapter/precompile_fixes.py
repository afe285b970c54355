"""What torch's Dynamo precompile gets wrong on everyday models, put right while precompile is in use.

Each fix replaces one attribute of torch (a `Patch`), found by feature detection: a torch without the attribute, or
where it changed shape, gets no patch. They live as long as the precompile guard (the first `%%compile_cache` cell
that uses precompile until `%unload_ext`) and matter only while caching_precompile is on: inside such cells. What
each fixes, and on which models it was found: docs/how_it_works.md. What precompile drops on purpose (identity
guards) is not here: precompile.py gives those back.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import importlib
import inspect
import marshal
import pickle
import sys
import types
from dataclasses import fields, is_dataclass, replace
from typing import Any

from .patch import Patch
from .pickling import (
    cell_value,
    global_of_type,
    rebuild_bound_method,
    rebuild_compiled_wrapper,
    rebuild_context_var,
    rebuild_function,
    rebuild_marked_tensor,
    rebuild_module_of_type,
    rebuild_source,
    rebuild_type_of,
    return_none,
)


def patches() -> list[Patch]:
    """Apply every fix this torch needs; undo each with `Patch.undo`, in reverse order."""
    return [
        *_aot_key_patch(),
        *_guard_state_pickler_patch(),
        *_local_type_guard_patch(),
        *_module_global_patch(),
        *_globals_module_patch(),
        *_pop_null_patch(),
        *_record_artifact_patch(),
        *_precompile_cudagraphs_patch(),  # after _record_artifact_patch: the copy it records carries the stamp
        *_loaded_entry_copy_patch(),  # wraps the cudagraphs patch's loader: torch's copy is made inside it
        *_unbundlable_graph_patch(),
        *_recompile_limit_patch(),
    ]


def _torch_has(module: str, owner: str | None, name: str) -> tuple[Any, Any] | None:
    """Feature detection for one fix: (OWNER of torch's MODULE, or the module where OWNER is None; its NAME), or None
    where this torch lacks any of them or fails to import the module (then no patch)."""
    try:
        found = importlib.import_module(module)
    except Exception:  # a torch without it, or one that fails to import it: that fix is not needed there
        return None
    if owner is not None:
        found = getattr(found, owner, None)
    value = getattr(found, name, None)
    return None if value is None else (found, value)


def _unbundlable_graph_patch() -> list[Patch]:
    """A graph Inductor compiled into no code (`x + 0` of a global 0) is not cached, as plain torch.compile does:
    under precompile torch bundled it and raised ("expected OutputCode, got <class 'method'>", torch 2.15)."""
    found = _torch_has("torch._functorch._aot_autograd.graph_compile", None, "_should_save_cache")
    output_code = _torch_has("torch._inductor.output_code", None, "OutputCode")
    if found is None or output_code is None or len(inspect.signature(found[1]).parameters) != 1:
        return []
    (graph_compile, original), OutputCode = found, output_code[1]

    def unwrapped(fn: Any) -> Any:
        while hasattr(fn, "__wrapped__"):
            fn = fn.__wrapped__
        return fn

    def _should_save_cache(*compiled_fns: Any) -> bool:
        bundling = getattr(graph_compile, "should_bundle_autograd_cache", lambda: False)()
        if bundling and not all(isinstance(unwrapped(fn), OutputCode) for fn in compiled_fns if fn is not None):
            return False
        return original(*compiled_fns)

    return [Patch(graph_compile, "_should_save_cache", _should_save_cache)]


def _recompile_limit_patch() -> list[Patch]:
    """Restored entries count towards Dynamo's recompile limit as compiled ones do: torch counted none, so a
    restored kernel compiled past the limit where plain torch.compile stops."""
    found = _torch_has("torch._dynamo.convert_frame", None, "compute_cache_size")
    entries = _torch_has("torch._C._dynamo.eval_frame", None, "_debug_get_precompile_entries")
    if found is None or entries is None:
        return []
    (convert_frame, original), _debug_get_precompile_entries = found, entries[1]

    def compute_cache_size(frame: Any, *args: Any, **kwargs: Any) -> Any:
        size = original(frame, *args, **kwargs)
        try:
            restored = len(_debug_get_precompile_entries(frame.f_code))
        except Exception:  # counted as torch counts them
            return size
        if restored and hasattr(size, "num_cache_entries_with_same_id_matched_objs"):
            size.num_cache_entries += restored
            size.num_cache_entries_with_same_id_matched_objs += restored
            if hasattr(size, "total_cache_entries_all_regions"):
                size.total_cache_entries_all_regions += restored
        return size

    return [Patch(convert_frame, "compute_cache_size", compute_cache_size)]


def _aot_key_patch() -> list[Patch]:
    """Key AOTAutograd entries as plain torch.compile does: under precompile the key holds the backend id, a fresh
    uuid per compile, so a function not precompiled (a bypass, a fallback) never hit again in another process. torch
    reads the id from the live config, never from the key."""
    found = _torch_has("torch._functorch._aot_autograd.autograd_cache", None, "autograd_cache_key")
    if found is None:
        return []
    autograd_cache, original = found
    if "precompile_backend_id" not in getattr(getattr(autograd_cache, "AOTConfig", None), "__dataclass_fields__", {}):
        return []  # torch without the backend id in its key: nothing to do

    def autograd_cache_key(mod: Any, example_inputs: Any, config: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(config, "precompile_backend_id", None) is not None:
            config = replace(config, precompile_backend_id=None)
        return original(mod, example_inputs, config, *args, **kwargs)

    return [Patch(autograd_cache, "autograd_cache_key", autograd_cache_key)]


def _guard_state_pickler_patch() -> list[Patch]:
    """Save what torch's guard-state pickler gets wrong, so that a restored entry's guards can be rebuilt (the saved
    objects give the guards types, constants and defaults; the guards read the live objects):

    * a function whose qualified name resolves to another object (a decorator's wrapper) by value: torch saved a
      placeholder, and a guard on its defaults failed at install;
    * a guard source field by field, loaded back without its constructor: torch 2.11 passed fields it does not take,
      and a `__post_init__` may install a guard, which needs a trace in progress;
    * a `contextvars.ContextVar` as a new one of the same name and default (it cannot be pickled);
    * a tensor with the dimension markings Dynamo guards on (`mark_dynamic`): without them the restored guard failed
      on the very input it was compiled for;
    * a method whose function is a `functools.partial` (torchao) as that function and its object;
    * a tensor subclass without `empty_like` (torchao's `Int8Tensor`) from its inner tensors' meta copies;
    * torch.compile's own wrapper as a stand-in holding the function it wraps (what Dynamo's guards read of it):
      by value it dragged in the compiled graph, which cannot be pickled;
    * a class made inside a function as the type of the module global that holds its object (`pickling.
      global_of_type`; see `_local_type_guard_patch`), and a torch module of such a class as one of that class:
      torch rebuilt it as a plain `nn.Module`, and a guard reading its class (the `kernels` package's
      `_create_func_module.<locals>.Func`, on the attention layers of transformers 5.25's Llama, Qwen2, Mistral and
      others) failed at install.
    """
    found = _torch_has("torch._dynamo.guards", "GuardsStatePickler", "reducer_override")
    missing = _torch_has("torch._dynamo.guards", None, "_Missing")
    source = _torch_has("torch._guards", None, "Source")
    if found is None or missing is None or source is None:
        return []
    import torch

    (pickler, original), missing, Source = found, missing[1], source[1]

    def reducer_override(self: Any, obj: Any) -> Any:
        if isinstance(obj, Source) and is_dataclass(obj):
            declared = fields(obj)
            if any(not f.init for f in declared) or hasattr(type(obj), "__post_init__"):
                return rebuild_source, (type(obj), {f.name: getattr(obj, f.name) for f in declared})
        elif isinstance(obj, contextvars.ContextVar):
            try:  # its default: what it holds in a context where it was never set
                return rebuild_context_var, (obj.name, True, contextvars.Context().run(obj.get))
            except LookupError:
                return rebuild_context_var, (obj.name, False, None)
        wrapped = getattr(obj, "_torchdynamo_orig_callable", None)  # set on torch.compile's wrapper
        if wrapped is not None and inspect.isfunction(obj):
            return rebuild_compiled_wrapper, (getattr(obj, "_torchdynamo_inline", wrapped),)
        if isinstance(obj, torch.Tensor):
            return _reduce_tensor(self, obj, original)
        if isinstance(obj, type) and "<locals>" in obj.__qualname__:
            found = global_of_type(obj)
            if found is not None:
                return rebuild_type_of, found
        if inspect.ismethod(obj) and not hasattr(obj.__func__, "__name__"):
            # a method made by functools.partialmethod: torch 2.13 read `__func__.__name__` and packaged nothing
            return rebuild_bound_method, (obj.__func__, obj.__self__)
        reduced = original(self, obj)
        if isinstance(obj, torch.nn.Module) and _is_call(reduced, getattr(type(self), "_unpickle_module", None)):
            # torch rebuilds a module of a class made inside a function as a plain `nn.Module`: guards that read
            # its class (its `forward`'s closure) then failed at install
            found = global_of_type(type(obj))
            if found is not None:
                return rebuild_module_of_type, (*found, reduced[1][0])
        if isinstance(reduced, tuple) and reduced and reduced[0] is missing and inspect.isfunction(obj):
            module = getattr(obj, "__module__", None)
            if module and module in sys.modules:
                # The code as marshal bytes and the closure as its values: torch 2.10's pickler saves code objects
                # and cells as placeholders ("function() argument 'code' must be code, not _Missing" at load).
                closure = None if obj.__closure__ is None else tuple(cell_value(c) for c in obj.__closure__)
                return rebuild_function, (
                    marshal.dumps(obj.__code__),
                    module,
                    obj.__name__,
                    obj.__qualname__,
                    obj.__defaults__,
                    obj.__kwdefaults__,
                    closure,
                )
        return reduced

    return [Patch(pickler, "reducer_override", reducer_override)]


def _local_type_guard_patch() -> list[Patch]:
    """Save a type guard on a class made inside a function where that class is the type of a module global: the
    `kernels` package turns functions into objects of such classes (transformers 5.25's `apply_rotary_pos_emb` in
    Llama, Qwen2, Mistral, ...), and torch refused to save the guard on their type ("defined in local scope"), so the
    model compiled again at every restore. The restored guard checks the type of that global in the new process,
    found again by the pickler (`_guard_state_pickler_patch`); any other local class stays refused, as in torch."""
    found = _torch_has("torch._dynamo.guards", "CheckFunctionManager", "serialize_guards")
    if found is None:
        return []
    CheckFunctionManager, original = found

    def serialize_guards(self: Any, builder: Any, sorted_guards: Any, *args: Any, **kwargs: Any) -> Any:
        for guard in sorted_guards:
            # the local class (torch 2.15), or True (2.14)
            flag = getattr(guard, "_unserializable", None)
            if flag and guard.create_fn_name() in ("TYPE_MATCH", "BUILTIN_MATCH"):
                with contextlib.suppress(Exception):  # torch's refusal stands
                    if isinstance(flag, type):
                        kind = flag
                    else:
                        value = builder.get(guard)
                        kind = getattr(value, "pytype", None) or type(value)  # a FakeTensor's, as torch's guard reads
                    if global_of_type(kind) is not None:
                        guard._unserializable = False if isinstance(flag, bool) else None
        return original(self, builder, sorted_guards, *args, **kwargs)

    return [Patch(CheckFunctionManager, "serialize_guards", serialize_guards)]


def _is_call(reduced: Any, function: Any) -> bool:
    """Whether a reducer's answer REDUCED rebuilds its object by calling FUNCTION with one argument."""
    return function is not None and isinstance(reduced, tuple) and len(reduced) >= 2 and reduced[0] == function


# The attributes Dynamo reads off a tensor to decide which dimensions are dynamic (torch.utils' `mark_dynamic` and
# friends), and guards on: every name with one of these prefixes.
DIM_MARKING_PREFIXES = ("_dynamo_", "_has_dynamo_")


def _reduce_tensor(pickler: Any, obj: Any, original: Any) -> Any:
    """torch's reduction of a tensor, with its dimension markings, for a subclass without `empty_like` too."""
    try:
        reduced = original(pickler, obj)
    except Exception as exc:
        meta = _meta_from_inner_tensors(obj)
        if meta is None:
            raise
        reduced = _with_empty_like(obj, meta, lambda: original(pickler, obj), exc)
    marks = {k: v for k, v in getattr(obj, "__dict__", {}).items() if k.startswith(DIM_MARKING_PREFIXES)}
    parts: tuple[Any, ...] = reduced if isinstance(reduced, tuple) else ()
    if not marks or len(parts) < 2 or not getattr(parts[0], "__name__", "").startswith("_unpickle"):
        return reduced  # no markings, or torch's placeholder for a tensor it does not save: as it is
    return (rebuild_marked_tensor, (parts[0], parts[1], marks), *parts[2:])


def _meta_from_inner_tensors(obj: Any) -> Any:
    """A meta copy of a traceable wrapper subclass built from meta copies of its inner tensors (None: not one)."""
    import torch
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    if not is_traceable_wrapper_subclass(obj):
        return None
    tensor: Any = obj  # a Tensor as well as a traceable wrapper subclass
    if tensor.device.type == "meta":
        return None
    attrs, ctx = tensor.__tensor_flatten__()
    inner = {}
    for attr in attrs:
        part: Any = getattr(tensor, attr)
        meta = _meta_from_inner_tensors(part)  # a subclass inside a subclass
        inner[attr] = meta if meta is not None else torch.empty_like(part, device="meta")
    return type(tensor).__tensor_unflatten__(inner, ctx, tensor.shape, tensor.stride())


def _with_empty_like(obj: Any, meta: Any, reduce: Any, failure: BaseException) -> Any:
    """REDUCE run while `torch.empty_like(obj, device="meta")` answers META, which torch's pickler asks of OBJ and
    its subclass cannot answer; any other call goes to torch's own. Only for that call: the patch lives as long."""
    import torch

    own = torch.empty_like

    def empty_like(tensor: Any, *args: Any, **kwargs: Any) -> Any:
        if tensor is obj and str(kwargs.get("device")) == "meta":
            return meta
        return own(tensor, *args, **kwargs)

    torch.empty_like = empty_like  # type: ignore[assignment]
    try:
        return reduce()
    except Exception:
        raise failure from None
    finally:
        torch.empty_like = own  # type: ignore[assignment]


def _module_global_patch() -> list[Patch]:
    """Record the modules Dynamo's generated code loads as globals (`___module_collections_<id>_c0`) as import
    sources of the entry, as torch records a traced function's imports: else the restored code lacks the global."""
    found = _torch_has("torch._dynamo.output_graph", "OutputGraph", "install_global_unsafe")
    if found is None:
        return []
    OutputGraph, original = found

    def install_global_unsafe(self: Any, name: str, value: Any) -> None:
        original(self, name, value)
        package = getattr(self, "package", None)
        if package is not None and isinstance(value, types.ModuleType) and sys.modules.get(value.__name__) is value:
            with contextlib.suppress(Exception):  # no entry being recorded: the install check still catches it
                package.add_import_source(name, value.__name__)

    return [Patch(OutputGraph, "install_global_unsafe", install_global_unsafe)]


def _globals_module_patch() -> list[Patch]:
    """Record the compiled function under the module whose globals its frame runs with, not `fn.__module__`, which
    `functools.wraps` sets to the decorated function's (HF's forward): the restored guards read the wrong globals."""
    found = _torch_has("torch._dynamo.package", "CompilePackage", "_add_function")
    if found is None:
        return []
    CompilePackage, original = found

    def _add_function(self: Any, python_code: Any, python_module: str, *args: Any, **kwargs: Any) -> None:
        fn = getattr(self, "_innermost_fn", None)
        if fn is not None and python_code is getattr(fn, "__code__", None):
            python_module = _globals_module(fn) or python_module
        original(self, python_code, python_module, *args, **kwargs)

    return [Patch(CompilePackage, "_add_function", _add_function)]


def _pop_null_patch() -> list[Patch]:
    """The no-op Dynamo's bytecode calls to pop a NULL as a module-level function: torch's local `lambda: None`
    cannot be pickled, and the entry was not saved."""
    found = _torch_has("torch._dynamo.codegen", "PyCodegen", "pop_null")
    if found is None:
        return []
    PyCodegen, original = found

    def pop_null(self: Any) -> Any:
        instructions = original(self)
        for inst in instructions:
            value = getattr(inst, "argval", None)
            if inspect.isfunction(value) and value.__qualname__.endswith("pop_null.<locals>.<lambda>"):
                inst.argval = return_none
        return instructions

    return [Patch(PyCodegen, "pop_null", pop_null)]


def _record_artifact_patch() -> list[Patch]:
    """Copy a loaded backend artifact (kept to be saved again) by a pickle round trip, as torch saves it, not
    `copy.deepcopy`, a visible part of a restored first call; one that does not pickle is deep-copied as before."""
    try:
        from torch._dynamo.precompile_context import PrecompileContext
    except Exception:  # a torch without this module, or one that fails to import it: no patch
        return []
    original = vars(PrecompileContext).get("record_artifact")
    if not isinstance(original, classmethod):
        return []
    try:
        source = inspect.getsource(original.__func__)
        params = list(inspect.signature(PrecompileContext.record_artifact).parameters)
    except (OSError, TypeError, ValueError):
        return []
    if params != ["artifact"] or "_backend_artifacts_by_key[" not in source or "deepcopy(" not in source:
        return []  # another shape of torch's method: leave it

    def record_artifact(cls: Any, artifact: Any) -> None:
        try:
            copied = _round_trip(artifact)
        except Exception:  # any artifact that does not round-trip: torch's own deep copy
            return original.__func__(cls, artifact)
        cls._backend_artifacts_by_key[artifact.key] = copied
        return None

    return [Patch(PrecompileContext, "record_artifact", classmethod(record_artifact))]


CUDAGRAPHS_STAMP = "jcc_cudagraphs"  # on a precompile backend artifact: whether it was compiled with CUDA graphs


def _precompile_cudagraphs_patch() -> list[Patch]:
    """Load a precompiled graph with the CUDA-graph setting it was compiled with: torch took it from the config at
    load time (pytorch/pytorch#155703), so a `reduce-overhead` function came back without CUDA graphs. The artifact
    recorded while its mode's config is in force is stamped with it; one saved without the stamp had CUDA graphs if
    its forward carries their metadata (`cudagraph_info`), else torch decides as before."""
    try:
        import torch._inductor.config as inductor_config
        from torch._dynamo.precompile_context import PrecompileContext
        from torch._functorch._aot_autograd import aot_autograd_result as results
    except ImportError:
        return []
    current_record = vars(PrecompileContext).get("record_artifact")
    original_load = getattr(results, "deserialize_bundled_cache_entry", None)
    if not isinstance(current_record, classmethod) or original_load is None:
        return []
    if not isinstance(getattr(inductor_config.triton, "cudagraphs", None), bool):
        return []

    def record_artifact(cls: Any, artifact: Any) -> None:
        content = getattr(artifact, "content", None)
        # A backend loaded from a saved entry is recorded again with its stamp: only a new compile gets one.
        if content is not None and getattr(content, "compiled_fw", None) is not None:
            if not hasattr(content, CUDAGRAPHS_STAMP):
                with contextlib.suppress(AttributeError, TypeError):  # an object without a __dict__
                    setattr(content, CUDAGRAPHS_STAMP, bool(inductor_config.triton.cudagraphs))
        return current_record.__func__(cls, artifact)

    def deserialize_bundled_cache_entry(entry: Any) -> Any:
        cudagraphs = getattr(entry, CUDAGRAPHS_STAMP, None)
        if cudagraphs is None:
            graph = getattr(getattr(entry, "compiled_fw", None), "result", None)
            cudagraphs = True if getattr(graph, "cudagraph_info", None) is not None else None
        if cudagraphs is None:
            return original_load(entry)
        with inductor_config.patch({"triton.cudagraphs": cudagraphs}):
            return original_load(entry)

    return [
        Patch(PrecompileContext, "record_artifact", classmethod(record_artifact)),
        Patch(results, "deserialize_bundled_cache_entry", deserialize_bundled_cache_entry),
    ]


def _round_trip(obj: Any) -> Any:
    """A copy of OBJ made by pickling it, as torch saves it, with fake-tensor modes off (as torch copies)."""
    try:
        from torch.utils._mode_utils import no_dispatch
    except ImportError:
        no_dispatch = contextlib.nullcontext
    with no_dispatch():
        return pickle.loads(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


def _loaded_entry_copy_patch() -> list[Patch]:
    """Copy a backend entry being loaded (torch deep-copies it, should it be saved again) by a pickle round trip:
    it was just unpickled, so the copy is the same, several times faster. One that does not pickle is deep-copied as
    before; the hook lives as long as the loader's call."""
    found = _torch_has("torch._functorch._aot_autograd.aot_autograd_result", None, "deserialize_bundled_cache_entry")
    if found is None:
        return []
    results, load = found

    def deserialize_bundled_cache_entry(entry: Any) -> Any:
        own = getattr(entry, "__dict__", None)
        if not isinstance(own, dict) or "__deepcopy__" in own:
            return load(entry)

        def copy_entry(memo: dict) -> Any:
            own.pop("__deepcopy__", None)  # copy the entry, not this hook
            try:
                return _round_trip(entry)
            except Exception:  # an entry that does not round-trip: torch's own deep copy
                return copy.deepcopy(entry, memo)

        own["__deepcopy__"] = copy_entry  # copy.deepcopy looks its hook up on the instance
        try:
            return load(entry)
        finally:
            own.pop("__deepcopy__", None)

    return [Patch(results, "deserialize_bundled_cache_entry", deserialize_bundled_cache_entry)]


def _globals_module(fn: Any) -> str | None:
    """The name of the module whose namespace is `fn.__globals__`, if it is imported."""
    fn_globals = getattr(fn, "__globals__", None)
    name = fn_globals.get("__name__") if isinstance(fn_globals, dict) else None
    module = sys.modules.get(name) if isinstance(name, str) else None
    return name if module is not None and module.__dict__ is fn_globals else None
