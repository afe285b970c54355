"""layers.py: torch's counters per cache layer, and the counts torch replays on a graph hit that are not misses."""

from __future__ import annotations

from jupyter_compile_cache.torch_adapter import layers


def _snapshot(**counts: int) -> dict[str, dict[str, int]]:
    groups = {
        "dynamo_cache_hit": "dynamo_cache",
        "dynamo_cache_miss": "dynamo_cache",
        "autograd_cache_hit": "aot_autograd",
        "autograd_cache_miss": "aot_autograd",
    }
    snapshot: dict[str, dict[str, int]] = {}
    for name, value in counts.items():
        snapshot.setdefault(groups.get(name, "inductor"), {})[name] = value
    return snapshot


def test_counters_torch_replays_on_a_graph_hit_are_not_misses():
    # what torch's counters hold after a precompile hit: the cold compile's autotune/kernel counts added back
    after = _snapshot(dynamo_cache_hit=1, select_algorithm_autotune=7, async_compile_cache_miss=33)
    delta = layers.counter_delta({}, after)
    assert layers.only_graph_hits(delta)
    assert delta["autotune"]["misses"] == 0 and delta["kernels"]["misses"] == 0
    assert delta["dynamo_precompile"]["hits"] == 1


def test_the_same_counts_with_a_graph_miss_are_real_work():
    after = _snapshot(dynamo_cache_miss=1, fxgraph_cache_miss=1, select_algorithm_autotune=7)
    delta = layers.counter_delta({}, after)
    assert not layers.only_graph_hits(delta)
    assert delta["autotune"]["misses"] == 7 and delta["fx_graph"]["misses"] == 1


def test_no_graph_counters_at_all_is_not_a_hit():
    # caches switched off: no hits, no misses; files written then are new work and must be saved
    assert not layers.only_graph_hits(layers.counter_delta({}, _snapshot(async_compile_cache_miss=3)))


def test_torchs_build_aids_belong_to_no_layer_and_never_to_a_bundle():
    for rel in (
        "precompiled_headers/cwk.h.gch",
        "precompiled_headers/locks/cwk.lock",
        "gcc/bin/g++",
        "torch_cutlass/cutlass_library/x.py",
        "halide-runtime-host-abc/standalone_halide_runtime.a",
    ):
        assert layers.layer_of(rel) is None, rel
        assert not layers.is_compile_result("inductor/" + rel), rel
    for member in ("inductor/ab/cab.so", "inductor/fxgraph/kp/x/y", "inductor/dynamo/k/entry", "triton/0/x.cubin"):
        assert layers.is_compile_result(member), member
    assert layers.is_compile_result("triton/precompiled_headers/x")  # a Triton dir's own names are Triton's
