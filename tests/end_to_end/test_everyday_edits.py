"""Edits that do not touch the compiled code keep their restore, and a colleague's variant never makes the original's
kernel compile: real kernels, real torch.compile on the CPU, each restore on an EMPTY cache dir.

torch names a precompile entry by its function's qualified name and first line, so a line added above the model
renamed it; entries are now also found by the code they were compiled for. What is really changed is still refused
(tests/torch_adapter/test_precompile_semantics.py, and the stale-code cases of test_kernel_restore.py).
"""

from __future__ import annotations

import re

import pytest
from helpers.cells import COMPILE, DEFINE
from helpers.kernels import misses

from jupyter_compile_cache.storage.store import LocalStore
from jupyter_compile_cache.torch_adapter.precompile import PrecompileGuard

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not PrecompileGuard.available(), reason="entries found by their code: Dynamo precompile"),
]
NO_MISSES = {"fxgraph_cache_miss": 0, "autograd_cache_miss": 0, "dynamo_cache_miss": 0}
# The model's definition in two cells: what it reads in one, the class in the next (its lines all move).
HEAD, CLASS = DEFINE.split("class Net", 1)
CLASS = "import torch\nclass Net" + CLASS


def _kernel(kernel_factory, tmp_path, cache, store="store", **env):
    (tmp_path / cache).mkdir()
    k = kernel_factory(TORCHINDUCTOR_CACHE_DIR=tmp_path / cache, JUPYTER_COMPILE_CACHE_DIR=tmp_path / store, **env)
    k.run("%load_ext jupyter_compile_cache").check()
    return k


def _run(k, *cells):
    for cell in cells[:-1]:
        k.run(cell).check()
    out = k.run(cells[-1]).check()
    assert "MATCHES_EAGER True" in out.stdout, out.output
    return out


# A helper in an imported module, for the case torch itself refuses (below).
MODULE = "import torch\ndef helper(x):\n    # {comment}\n    return x.relu() * 2\n"
MODCELL = "%%compile_cache modnet\nf = torch.compile(lambda t: blocks.helper(t) + 1)\n"
MODCELL += "print('MATCHES_EAGER', torch.equal(f(x), blocks.helper(x) + 1))"


def test_edits_around_the_model_restore_with_no_misses_and_what_torch_refuses_says_why(kernel_factory, tmp_path):
    module = tmp_path / "mods" / "blocks.py"
    module.parent.mkdir()
    module.write_text(MODULE.format(comment="scaled"))
    use_module = f"import sys\nsys.path.insert(0, {str(module.parent)!r})\nimport blocks"
    cold = _kernel(kernel_factory, tmp_path, "cold")
    assert "saved" in _run(cold, DEFINE, COMPILE.format(name="net", options="")).stdout
    assert "saved" in _run(cold, use_module, MODCELL).stdout
    cold.shutdown()
    edits = {
        "lines above and below, a new cell first, another folder": [
            "import os\nos.chdir(os.path.expanduser('~'))\nnotes = 'draft'",
            "import math\n# the model, tidied up\n\n" + DEFINE + "\n# trained next\nimport math\n",
        ],
        "the class in another cell": [HEAD, CLASS],
    }
    for i, (edit, cells) in enumerate(edits.items()):
        k = _kernel(kernel_factory, tmp_path, f"cache_{i}")
        out = _run(k, *cells, COMPILE.format(name="net", options=""))
        assert "restored 'net'" in out.stdout and "nothing new to save" in out.stdout, (edit, out.output)
        assert misses(k.counters()) == NO_MISSES, edit
    assert len(LocalStore(str(tmp_path / "store")).versions("net")) == 1  # no version churn

    # A comment edited inside the imported helper: the bytecode is the same (our check passes), but torch compares
    # the module's source lines it inlined, refuses the entry and compiles afresh. No remapping can make torch take
    # it: the line and `explain` say why.
    module.write_text(MODULE.format(comment="scaled twice over"))
    out = _run(k, use_module, MODCELL)
    line = [x for x in out.stdout.splitlines() if "cache hit" in x][-1]
    assert "torch refused the saved entry of `<lambda>` (Source code changes detected for blocks" in line, line
    explained = k.run("%compile_cache explain modnet").check()
    assert "compiled because: torch refused the saved entry" in explained.stdout + "\n".join(explained.results)


def test_a_variant_never_makes_the_originals_kernel_compile_through_the_hub(kernel_factory, tmp_path):
    share = tmp_path / "team-share"
    share.mkdir()
    hub = {"JUPYTER_COMPILE_CACHE_HUB": f"file://{share}", "JUPYTER_COMPILE_CACHE_SECRET": "team-secret"}
    alice = _kernel(kernel_factory, tmp_path, "cache_alice", store="store_alice", **hub)
    assert "the hub" in _run(alice, DEFINE, COMPILE.format(name="net", options="")).stdout
    alice.shutdown()

    # Bob's copy of the notebook has another helper: a real change, refused and compiled, and it says where.
    bob = _kernel(kernel_factory, tmp_path, "cache_bob", store="store_bob", **hub)
    out = _run(bob, DEFINE.replace("x.relu()", "x.abs()"), COMPILE.format(name="net", options=""))
    assert "restored 'net' from the hub" in out.stdout
    assert "the saved entry of `Net.forward` was compiled for other code: it differs at `helper`" in out.stdout
    assert "saved" in out.stdout and "the hub" in out.stdout  # his version is now the newest
    bob.shutdown()

    # Carol has Alice's cells on a fresh machine: the newest version is Bob's, but Alice's holds her code.
    carol = _kernel(kernel_factory, tmp_path, "cache_carol", store="store_carol", **hub)
    out = _run(carol, DEFINE, COMPILE.format(name="net", options=""))
    assert "restored 'net' from the hub" in out.stdout and "nothing new to save" in out.stdout, out.output
    assert misses(carol.counters()) == NO_MISSES
    # explain: Bob's newer version fits the machine but not her code; Alice's would restore
    explained = carol.run("%compile_cache explain net").check()
    text = explained.stdout + "\n".join(explained.results)
    verdicts = [line for line in text.splitlines() if line.startswith("version ")]
    assert len(verdicts) == 2, text
    assert "entries are for other code than this kernel's (`Net.forward`)" in verdicts[0], verdicts
    assert "WOULD RESTORE" in verdicts[1] and "`Net.forward` (this kernel's code)" in verdicts[1], verdicts

    # Every miss after a restore says why: another batch size, and a function no version holds.
    out = carol.run(
        COMPILE.format(name="net", options="--no-save")
        .replace("y = compiled(x)", "y = compiled(x[:5])")
        .replace("expected = model(x)", "expected = model(x[:5])\n    twice = torch.compile(lambda t: t * 2)(x)")
    ).check()
    assert "MATCHES_EAGER True" in out.stdout
    line = [x for x in out.stdout.splitlines() if "cache hit" in x][-1]
    assert "a guard of its restored entry failed (tensor 'x' size mismatch at index 0" in line, line
    assert "no saved entry for `<lambda>`" in line, line
    stats = carol.run("%compile_cache stats").check()
    table = "\n".join(stats.results) + stats.stdout
    assert re.search(r"no entry saved for them\s*\|?\s*1", table) and re.search(r"a guard failed\s*\|?\s*1", table), (
        table
    )
