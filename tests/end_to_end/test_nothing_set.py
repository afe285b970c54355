"""The quick start as a user runs it: no torch cache dir and no store set (a fresh HOME and TMPDIR), then restored on
a new machine (another HOME and TMPDIR) from an exported bundle. Plain kernels: the warm ones name a cache dir."""

from __future__ import annotations

import getpass
import os
import re
import sys

import pytest
from helpers.kernels import misses

from jupyter_compile_cache.storage.store import LocalStore

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "docs"))
import figures  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.plain_kernels]

# what the user has not set: torch's and Triton's cache dirs, the store, the user cache folder
UNSET = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "JUPYTER_COMPILE_CACHE_DIR", "XDG_CACHE_HOME")

# the README's quick start, as docs/figures.py runs it for the README's figure
DEFINE = figures.SETUP
COMPILE = (
    figures.CELL
    + """
    print("MATCHES_EAGER", torch.allclose(y, model(x), atol=1e-5))"""
)

_UNITS = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9}


def _machine(tmp_path, name):
    """A machine's HOME and TMPDIR, both new."""
    env = {"HOME": tmp_path / name / "home", "TMPDIR": tmp_path / name / "tmp"}
    for path in env.values():
        path.mkdir(parents=True)
    return env


def _torch_default_dir(machine):
    return machine["TMPDIR"] / f"torchinductor_{getpass.getuser()}"


def test_the_quick_start_with_nothing_set_bundles_only_compile_results_and_restores_on_a_new_machine(
    kernel_factory, tmp_path
):
    alice = _machine(tmp_path, "alice")
    k = kernel_factory(unset=UNSET, **alice)
    k.run(DEFINE).check()
    cold = k.run(COMPILE).check()
    assert "MATCHES_EAGER True" in cold.stdout, cold.output
    saved = re.search(r"saved (\d+) files \(([0-9.]+) (B|KB|MB|GB)\) to the local store", cold.stdout)
    assert saved, cold.output
    assert float(saved.group(2)) * _UNITS[saved.group(3)] < 1e6, cold.output  # compile results, no header
    store = alice["HOME"] / ".cache" / "jupyter_compile_cache"
    assert sum(p.stat().st_size for p in store.rglob("*") if p.is_file()) < 1e6
    # torch 2.13 on keeps precompiled headers in its default dir, the one in use here: not in the bundle
    (manifest,) = LocalStore(str(store)).versions("mlp")
    assert not [m.name for m in manifest.members if "precompiled_headers" in m.name]
    exported = tmp_path / "mlp.jccb"
    k.run(f"%compile_cache export mlp {exported}").check()
    k.shutdown()

    bob = _machine(tmp_path, "bob")  # a colleague's fresh machine
    k2 = kernel_factory(unset=UNSET, **bob)
    k2.run(DEFINE).check()
    k2.run(f"%compile_cache import {exported}").check()
    restored = k2.run(COMPILE).check()
    assert "restored 'mlp' from the local store" in restored.stdout, restored.output
    assert "MATCHES_EAGER True" in restored.stdout, restored.output
    counters = k2.counters()
    assert misses(counters) == {"fxgraph_cache_miss": 0, "autograd_cache_miss": 0, "dynamo_cache_miss": 0}
    assert counters.get("stats", {}).get("unique_graphs", 0) == 0  # nothing traced
    # the restored C++ kernels loaded without torch building a precompiled header first (~150 MB, 10+ s)
    assert not (_torch_default_dir(bob) / "precompiled_headers").exists()
