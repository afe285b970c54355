"""torch's compile-cache layers as one registry.

Each layer knows its torch switch (module + attribute, found by feature detection so older torch versions simply
report "not supported"), its environment variable, where its entries live under the cache directory, and which of
torch's own counters (`torch._dynamo.utils.counters`) say hit, miss and bypass. The status table, `enable` /
`disable`, the per-cell report and the panel are all views over this registry.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# Counter references are (group, name) pairs in torch._dynamo.utils.counters.
CounterRef = tuple[str, str]


@dataclass(frozen=True)
class Layer:
    name: str
    title: str
    switch: tuple[str, str] | None  # (module, attribute) of torch's on/off config, None if always on
    env_var: str | None
    place: str  # where entries live, relative to the inductor cache dir
    hits: tuple[CounterRef, ...] = ()
    misses: tuple[CounterRef, ...] = ()
    bypasses: tuple[CounterRef, ...] = ()
    # Ours: precompile entries refused because the code they were compiled from has changed.
    extra: tuple[str, ...] = field(default=())

    def switch_value(self) -> bool | None:
        """torch's current setting, or None if this torch has no such switch."""
        if self.switch is None:
            return None
        module, attr = self.switch
        try:
            mod = importlib.import_module(module)
        except ImportError:
            return None
        value = getattr(mod, attr, None)
        return None if value is None else bool(value)

    def supported(self) -> bool:
        return self.switch is None or self.switch_value() is not None

    def set_switch(self, enabled: bool) -> None:
        if self.switch is None:
            raise ValueError(f"layer {self.name!r} has no torch switch: it is always on")
        module, attr = self.switch
        mod = importlib.import_module(module)
        if not hasattr(mod, attr):
            raise ValueError(f"this torch has no {module}.{attr}: layer {self.name!r} is not supported")
        setattr(mod, attr, enabled)


LAYERS: tuple[Layer, ...] = (
    Layer(
        "dynamo_precompile",
        "Dynamo precompile",
        ("torch._dynamo.config", "caching_precompile"),
        "TORCH_CACHING_PRECOMPILE",
        "dynamo/<key>/entry",
        hits=(("dynamo_cache", "dynamo_cache_hit"),),
        misses=(("dynamo_cache", "dynamo_cache_miss"),),
        # precompile_bypass: functions torch would not package (their guards cannot be serialized), counted by
        # precompile.py from torch's "Detected a package bypass" log, which has no counter of its own.
        bypasses=(("dynamo_cache", "dynamo_cache_error"), ("jupyter_compile_cache", "precompile_bypass")),
    ),
    Layer(
        "aot_autograd",
        "AOTAutograd",
        ("torch._functorch.config", "enable_autograd_cache"),
        "TORCHINDUCTOR_AUTOGRAD_CACHE",
        "aotautograd/",
        hits=(("aot_autograd", "autograd_cache_hit"),),
        misses=(("aot_autograd", "autograd_cache_miss"), ("aot_autograd", "autograd_cache_guard_miss")),
        bypasses=(("aot_autograd", "autograd_cache_bypass"),),
    ),
    Layer(
        "fx_graph",
        "FX graph",
        ("torch._inductor.config", "fx_graph_cache"),
        "TORCHINDUCTOR_FX_GRAPH_CACHE",
        "fxgraph/",
        hits=(("inductor", "fxgraph_cache_hit"),),
        misses=(("inductor", "fxgraph_cache_miss"),),
        bypasses=(("inductor", "fxgraph_cache_bypass"),),
    ),
    Layer(
        "kernels",
        "Inductor/Triton kernels",
        None,
        "TRITON_CACHE_DIR",
        "<xx>/*.py|.cpp|.so, triton/",
        hits=(("inductor", "async_compile_cache_hit"), ("inductor", "triton_bundler_read_and_emit_kernel")),
        misses=(("inductor", "async_compile_cache_miss"),),
    ),
    Layer(
        "autotune",
        "Autotune",
        ("torch._inductor.config", "autotune_local_cache"),
        None,
        "*.best_config",
        # torch counts autotuning work, not cache lookups: any autotune run on a warm cache is a miss.
        misses=(("inductor", "select_algorithm_autotune"), ("inductor", "coordesc_tuning_bench")),
    ),
    Layer(
        "pgo",
        "PGO (automatic dynamic)",
        ("torch._dynamo.config", "automatic_dynamic_local_pgo"),
        "TORCH_DYNAMO_AUTOMATIC_DYNAMIC_LOCAL_PGO",
        "dynamo/code_state_*.pkl",
    ),
)

LAYERS_BY_NAME: dict[str, Layer] = {layer.name: layer for layer in LAYERS}
ALIASES = {
    "precompile": "dynamo_precompile",
    "dynamo": "dynamo_precompile",
    "aot": "aot_autograd",
    "fx": "fx_graph",
    "fxgraph": "fx_graph",
    "triton": "kernels",
    "inductor": "kernels",
}

_TWO_CHAR_DIR = re.compile(r"[0-9a-z]{2}")

# What torch keeps in its cache dir to build with, not what it built: precompiled C++ headers (torch 2.13+, ~150 MB
# a compiler and flag set, kept in the default dir whatever dir is set), a compiler it installed, CUTLASS's sources,
# kernel input dumps, Halide's runtime. Made again on any machine that needs them: never bundled, never restored.
BUILD_AIDS = ("precompiled_headers", "gcc", "torch_cutlass", "unhashed_kernel_inputs")
_BUILD_AID_PREFIXES = ("halide-runtime-",)


def is_build_aid(relpath: str) -> bool:
    """Whether an entry of the inductor cache dir (relpath uses '/') is one of torch's build aids."""
    top = relpath.split("/", 1)[0]
    return top in BUILD_AIDS or top.startswith(_BUILD_AID_PREFIXES)


def is_compile_result(member: str) -> bool:
    """Whether a bundle member ('inductor/...', 'triton/...') belongs in a bundle: anything but a build aid."""
    root, _, rel = member.partition("/")
    return root != "inductor" or not is_build_aid(rel)


def resolve(name: str) -> Layer:
    key = ALIASES.get(name.lower(), name.lower())
    if key not in LAYERS_BY_NAME:
        raise KeyError(name)
    return LAYERS_BY_NAME[key]


def layer_of(relpath: str) -> str | None:
    """The layer an entry of the inductor cache dir belongs to (relpath uses '/'), None for bookkeeping files."""
    parts = relpath.split("/")
    top = parts[0]
    base = parts[-1]
    if top == "locks" or base.endswith(".lock") or base.startswith(".jcc-") or top.startswith(".jcc-"):
        return None
    if is_build_aid(relpath):
        return None
    if base.endswith(".best_config"):
        return "autotune"
    if top == "dynamo":
        return "pgo" if base.startswith("code_state_") else "dynamo_precompile"
    if top == "aotautograd":
        return "aot_autograd"
    if top == "fxgraph":
        return "fx_graph"
    if top == "triton" or _TWO_CHAR_DIR.fullmatch(top):
        return "kernels"
    return "other"


def member_layer(member: str) -> str:
    """The layer a bundle member belongs to ('inductor/fxgraph/...', 'triton/...'): a layer's name, or 'other'
    (bookkeeping files, anything no layer claims)."""
    root, _, rel = member.partition("/")
    if root == "triton":
        return "kernels"
    return layer_of(rel) or "other"


def bundle_usage(members: list[tuple[str, int]]) -> dict[str, dict[str, int]]:
    """Files and bytes per layer (and 'other') of bundle members given as (name, size): each member counted once, in
    one layer, so the layers add up to the members' total."""
    usage: dict[str, dict[str, int]] = {name: {"files": 0, "bytes": 0} for name in [*LAYERS_BY_NAME, "other"]}
    for name, size in members:
        layer = usage[member_layer(name)]
        layer["files"] += 1
        layer["bytes"] += size
    return usage


def counter_snapshot() -> dict[str, dict[str, int]]:
    """A copy of torch's counters (only the groups layers read). Before Dynamo is imported there are none to read
    (all zero): it is not imported for them (a second or more)."""
    counters = getattr(sys.modules.get("torch._dynamo.utils"), "counters", None)
    if counters is None:
        return {}
    groups = {ref[0] for layer in LAYERS for ref in layer.hits + layer.misses + layer.bypasses}
    return {g: dict(counters.get(g, {})) for g in groups}


def _sum(
    refs: Iterable[CounterRef], before: Mapping[str, Mapping[str, int]], after: Mapping[str, Mapping[str, int]]
) -> int:
    return sum(after.get(g, {}).get(n, 0) - before.get(g, {}).get(n, 0) for g, n in refs)


# Layers whose counters torch replays on a cache hit: an FX graph (or precompile) hit adds the counts the cold
# compile recorded (codecache: `counters["inductor"] += graph.counter_deltas`), so they only mean work done here
# when the graph layers above them missed.
REPLAYED = ("kernels", "autotune")
GRAPH_LAYERS = ("dynamo_precompile", "aot_autograd", "fx_graph")


def counter_delta(
    before: Mapping[str, Mapping[str, int]], after: Mapping[str, Mapping[str, int]]
) -> dict[str, dict[str, int]]:
    """Per-layer hits / misses / bypasses between two snapshots; replayed counts on graph hits are dropped."""
    delta = {
        layer.name: {
            "hits": _sum(layer.hits, before, after),
            "misses": _sum(layer.misses, before, after),
            "bypasses": _sum(layer.bypasses, before, after),
        }
        for layer in LAYERS
    }
    if only_graph_hits(delta):
        for name in REPLAYED:
            delta[name]["misses"] = 0
    return delta


def only_graph_hits(delta: Mapping[str, Mapping[str, int]]) -> bool:
    """True when the graph layers hit and none missed or was bypassed: nothing was compiled, only loaded. A function
    torch would not package for precompile (a Dynamo bypass, e.g. a compiled optimizer step) is traced again, but its
    graph still loads from the layers below: that is no new compile."""
    graph = [delta[name] for name in GRAPH_LAYERS]
    work = sum(c["misses"] for c in graph) + sum(delta[name]["bypasses"] for name in GRAPH_LAYERS[1:])
    return sum(c["hits"] for c in graph) > 0 and work == 0


def disk_usage(cache_dir: str) -> dict[str, dict[str, int]]:
    """Entries and bytes per layer under an inductor cache dir (an entry = a file; precompile/fx/aot: a key dir)."""
    usage: dict[str, dict[str, Any]] = {layer.name: {"entries": 0, "bytes": 0} for layer in LAYERS}
    keys: dict[str, set[str]] = {layer.name: set() for layer in LAYERS}
    if not os.path.isdir(cache_dir):
        return usage
    for root, _dirs, files in os.walk(cache_dir):
        for fname in files:
            path = os.path.join(root, fname)
            rel = os.path.relpath(path, cache_dir).replace(os.sep, "/")
            layer = layer_of(rel)
            if layer not in usage:
                continue
            try:
                usage[layer]["bytes"] += os.lstat(path).st_size
            except OSError:
                continue
            parts = rel.split("/")
            # One logical entry per key directory for keyed layers, per file otherwise.
            depth = {"dynamo_precompile": 2, "aot_autograd": 2, "fx_graph": 3}.get(layer)
            entry_key = "/".join(parts[:depth]) if depth else rel
            if layer == "kernels" and not fname.endswith((".so", ".py", ".cubin", ".hsaco", ".json")):
                continue
            keys[layer].add(entry_key)
    for name, entry_keys in keys.items():
        usage[name]["entries"] = len(entry_keys)
    return usage


COUNTER_GROUP = "jupyter_compile_cache"
