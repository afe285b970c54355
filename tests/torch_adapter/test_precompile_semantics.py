"""`%%compile_cache` answers exactly like plain torch.compile after every kind of edit, in real kernels.

torch drops identity guards (ID_MATCH, CLOSURE_MATCH, DICT_VERSION, and FUNCTION_MATCH / MODULE_MATCH /
BUILTIN_MATCH built on them) when it builds guards with `caching_precompile` on. Each case below changes one thing
a compiled model observes, of the kinds those guards watch (and a few that other guards watch, as controls). Every
case runs three times: in a plain kernel (the control: torch.compile alone), under the magic compiled cold, and under
the magic restored from its bundle in a new kernel on an empty cache dir. Each run prints the answer before and
after the edit; all three must print the same, and the control must match eager.
"""

from __future__ import annotations

import os
import re

import pytest

from jupyter_compile_cache.torch_adapter.precompile import PrecompileGuard

pytestmark = pytest.mark.slow

MODEL = """
class Net_{c}(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        {init}
    def forward(self, t):
        return {body}
"""

# case: (definitions, extra line in __init__, forward body, the edit)
CASES = {
    "helper": (
        "def helper_{c}(t):\n    return t.sin()",
        "",
        "helper_{c}(self.lin(t))",
        "def helper_{c}(t):\n    return t.cos()",
    ),
    "builtin_attr": ("", "self.act = torch.relu", "self.act(self.lin(t))", "model_{c}.act = torch.sigmoid"),
    "user_fn_attr": (
        "def half_{c}(t):\n    return t / 2\ndef third_{c}(t):\n    return t / 3",
        "self.act = half_{c}",
        "self.act(self.lin(t))",
        "model_{c}.act = third_{c}",
    ),
    "submodule": ("", "self.act = torch.nn.ReLU()", "self.act(self.lin(t))", "model_{c}.act = torch.nn.Tanh()"),
    "closure": (
        "def make_{c}(k):\n    def f(t):\n        return t * k\n    return f\nscale_{c} = make_{c}(2.0)",
        "",
        "scale_{c}(self.lin(t))",
        "scale_{c} = make_{c}(3.0)",
    ),
    "closure_cell": (
        "def make_{c}():\n    k = 2.0\n    def f(t):\n        return t * k\n    def set_k(v):\n"
        "        nonlocal k\n        k = v\n    return f, set_k\nscale_{c}, set_k_{c} = make_{c}()",
        "",
        "scale_{c}(self.lin(t))",
        "set_k_{c}(3.0)",
    ),
    "global_const": ("SCALE_{c} = 2.0", "", "self.lin(t) * SCALE_{c}", "SCALE_{c} = 3.0"),
    "global_dict": ("CFG_{c} = {{'scale': 2.0}}", "", "self.lin(t) * CFG_{c}['scale']", "CFG_{c}['scale'] = 3.0"),
    "default": (
        "def helper_{c}(t, k=2.0):\n    return t * k",
        "",
        "helper_{c}(self.lin(t))",
        "helper_{c}.__defaults__ = (3.0,)",
    ),
    "module_global": (
        "import math as mod_{c}",
        "",
        "self.lin(t) * mod_{c}.pi",
        "import types as _types\nmod_{c} = _types.SimpleNamespace(pi=1.0)",
    ),
    "class": (
        "",
        "",
        "self.lin(t).sin()",
        "class Net_{c}(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.lin = torch.nn.Linear(8, 8)\n    def forward(self, t):\n        return self.lin(t).tanh()\n"
        "_sd = model_{c}.state_dict()\nmodel_{c} = Net_{c}().to(_sd['lin.weight'].device)\n"
        "model_{c}.load_state_dict(_sd)\n"
        "compiled_{c} = torch.compile(model_{c})",
    ),
}
# Edits made inside the compiling cell itself (after the first call, before the second).
SAME_CELL = ("helper", "builtin_attr", "closure")

# CI runs on the CPU; JCC_TEST_DEVICE=cuda runs the same matrix on a GPU.
DEVICE = os.environ.get("JCC_TEST_DEVICE", "cpu")
SHOW = "print('{tag} {c}', [round(v, 4) for v in ({expr}).flatten().tolist()[:6]])"


def _define(c: str) -> str:
    defs, init, body, _ = CASES[c.removeprefix("same_")]
    fill = {"c": c}
    return (
        "import torch\ntorch.manual_seed(0)\n"
        + defs.format(**fill)
        + MODEL.format(c=c, init=init.format(**fill), body=body.format(**fill))
        + f"model_{c} = Net_{c}().to({DEVICE!r})\nx_{c} = torch.randn(4, 8, device={DEVICE!r})\n"
    )


def _compile_cell(c: str, magic: bool) -> str:
    lines = [f"%%compile_cache sem_{c}"] if magic else []
    lines += [
        "with torch.no_grad():",
        f"    compiled_{c} = torch.compile(model_{c})",
        "    " + SHOW.format(tag="BEFORE", c=c, expr=f"compiled_{c}(x_{c})"),
    ]
    if c.startswith("same_"):
        edit = CASES[c.removeprefix("same_")][3].format(c=c)
        lines += [edit, "with torch.no_grad():", "    " + SHOW.format(tag="AFTER", c=c, expr=f"compiled_{c}(x_{c})")]
    return "\n".join(lines)


def _after_cells(c: str) -> list[str]:
    show_after = "with torch.no_grad():\n    " + SHOW.format(tag="AFTER", c=c, expr=f"compiled_{c}(x_{c})")
    eager = "with torch.no_grad():\n    " + SHOW.format(tag="EAGER", c=c, expr=f"model_{c}(x_{c})")
    if c.startswith("same_"):
        return [eager]
    return [CASES[c][3].format(c=c), show_after, eager]


def _run_all(k, magic: bool, names: list[str]) -> tuple[dict[str, str], str]:
    """Run every case in this kernel; returns {'BEFORE c': values, 'AFTER c': ..., 'EAGER c': ...}."""
    out = ""
    for c in names:
        k.run(_define(c)).check()
        out += k.run(_compile_cell(c, magic)).check().output
        for cell in _after_cells(c):
            out += k.run(cell).check().output
    return {m.group(1): m.group(2) for m in re.finditer(r"^((?:BEFORE|AFTER|EAGER) \S+) (\[.*\])$", out, re.M)}, out


def _values(text: str) -> list[float]:
    return [float(v) for v in text.strip("[]").split(",")]


def _same(a: str, b: str) -> bool:
    return all(abs(x - y) <= 1e-3 * max(1.0, abs(y)) for x, y in zip(_values(a), _values(b), strict=True))


def test_every_edit_recompiles_exactly_where_plain_torch_compile_does(kernel_factory, dirs):
    names = list(CASES) + [f"same_{c}" for c in SAME_CELL]
    plain = kernel_factory(TORCHINDUCTOR_CACHE_DIR=dirs["cache_c"])
    control, _ = _run_all(plain, magic=False, names=names)
    plain.shutdown()
    assert len(control) == 3 * len(names), control
    # The control itself: every edit changes the eager answer (else the case tests nothing). Plain torch.compile
    # follows nearly all of them; where it does not (torch 2.11 keeps a function's old __defaults__), ours must
    # answer the same as plain torch.compile all the same: that is the contract.
    for c in names:
        assert not _same(control[f"BEFORE {c}"], control[f"EAGER {c}"]), f"{c}: the edit changes nothing"
    plain_stale = [c for c in names if not _same(control[f"AFTER {c}"], control[f"EAGER {c}"])]
    print("plain torch.compile does not follow:", plain_stale)
    assert len(plain_stale) <= 2, plain_stale

    k = kernel_factory(TORCHINDUCTOR_CACHE_DIR=dirs["cache_a"], JUPYTER_COMPILE_CACHE_DIR=dirs["store"])
    k.run("%load_ext jupyter_compile_cache").check()
    cold, cold_out = _run_all(k, magic=True, names=names)
    assert "saved" in cold_out

    k.restart(env={"TORCHINDUCTOR_CACHE_DIR": str(dirs["cache_b"])})  # a new kernel, EMPTY cache dir
    k.run("%load_ext jupyter_compile_cache").check()
    restored, restored_out = _run_all(k, magic=True, names=names)
    # Without precompile (torch 2.10) a cell that compiles a graph the kernel already holds saves nothing: fewer
    # bundles, the same answers (checked below).
    assert restored_out.count("restored 'sem_") == len(names) or not PrecompileGuard.available(), restored_out
    counters = k.counters()
    hits = counters.get("dynamo_cache", {}).get("dynamo_cache_hit", 0)
    fallbacks = counters.get("jupyter_compile_cache", {}).get("precompile_fallback", 0)
    print(f"restored: {hits} precompile hits, {fallbacks} fallbacks")
    print(*(line for line in restored_out.splitlines() if "precompile failed" in line), sep="\n")
    # The restored cells really ran restored entries, but where torch could not save or load one, which is told in
    # one line. Seen on some H100 hosts with torch 2.11, for a graph compiled again in the cold kernel: "pickle
    # should not be called after make_launchers()", or its compiled graph missing from the saved entry ("the
    # restored code needs the global '__compiled_fn_13_...', which torch did not install"); other hosts: none.
    if PrecompileGuard.available():  # torch 2.10: no precompile, the same answers through the FX and AOT layers
        assert hits + fallbacks >= len(names) - 1 and fallbacks <= 2, restored_out

    for run_name, run in (("cold", cold), ("restored", restored)):
        for tag in control:
            assert _same(run[tag], control[tag]), f"{run_name} {tag}: {run[tag]} != plain {control[tag]}"


ARGUMENT_CELL = """%%compile_cache sem_argument
import torch
def apply(x, fn):
    return fn(x) * 2
compiled_apply = torch.compile(apply)
x_arg = torch.randn(8, device={device!r})
graphs_before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
print("RELU", round(compiled_apply(x_arg, torch.relu).sum().item(), 4), round((torch.relu(x_arg) * 2).sum().item(), 4))
print("TRACED", torch._dynamo.utils.counters["stats"]["unique_graphs"] - graphs_before)
"""
SWITCH_CELL = """with torch.no_grad():
    print("SIGMOID", round(compiled_apply(x_arg, torch.sigmoid).sum().item(), 4),
          round((torch.sigmoid(x_arg) * 2).sum().item(), 4))
"""


def test_a_guard_on_an_argument_is_verified_at_the_first_call(kernel_factory, dirs):
    """A dropped identity guard on an argument (`L['fn']`) names nothing until the restored function is called:
    the restored entry checks it at its first call and is used (nothing traced again), and a call with another
    function still recompiles, as plain torch.compile does."""
    k = kernel_factory(TORCHINDUCTOR_CACHE_DIR=dirs["cache_a"], JUPYTER_COMPILE_CACHE_DIR=dirs["store"])
    k.run("%load_ext jupyter_compile_cache").check()
    assert "saved" in k.run(ARGUMENT_CELL.format(device=DEVICE)).check().output

    k.restart(env={"TORCHINDUCTOR_CACHE_DIR": str(dirs["cache_b"])})
    k.run("%load_ext jupyter_compile_cache").check()
    out = k.run(ARGUMENT_CELL.format(device=DEVICE)).check().output
    assert "restored 'sem_argument'" in out, out
    relu = re.search(r"^RELU (\S+) (\S+)$", out, re.M)
    assert relu and _same(relu.group(1), relu.group(2)), out
    if PrecompileGuard.available():
        assert re.search(r"^TRACED 0$", out, re.M), out  # the restored entry ran: its argument guard held
    sigmoid = re.search(r"^SIGMOID (\S+) (\S+)$", k.run(SWITCH_CELL).check().output, re.M)
    assert sigmoid and _same(sigmoid.group(1), sigmoid.group(2)) and not _same(sigmoid.group(1), relu.group(1))
    stale = k.counters().get("jupyter_compile_cache", {}).get("precompile_stale_rejected", 0)
    assert stale == 0, stale  # torch recompiled for sigmoid because the identity check failed, not a refusal


@pytest.mark.skipif(not PrecompileGuard.available(), reason="Dynamo precompile is not used with torch < 2.11")
def test_two_sessions_in_one_process_take_turns_wrapping_torch(tmp_path, monkeypatch):
    """A script that makes a second session (or a test that does) must not wrap torch's wrapped functions again:
    that broke the next compile with Dynamo's InternalTorchDynamoError."""
    import torch

    from jupyter_compile_cache.core.options import CellOptions
    from jupyter_compile_cache.core.session import CompileCacheSession

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))
    first, second = (CompileCacheSession(store_dir=str(tmp_path / name)) for name in ("a", "b"))
    try:
        for i, session in enumerate((first, second, first)):
            scale = float(i + 2)

            def f(x, scale=scale):
                return (x * scale).relu()

            x = torch.randn(8)
            with session.cell(f"turns{i}", CellOptions(quiet=True)):
                assert torch.equal(torch.compile(f)(x), f(x))
            assert session.guard.installed and not (first if session is second else second).guard.installed
    finally:
        first.close()
        second.close()
    assert not first.guard.installed and not second.guard.installed
