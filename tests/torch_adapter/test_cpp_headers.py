"""torch_adapter/cpp_headers.py: torch's precompiled-header check, recorded in one process while a real CPU model
compiles, made again in a fresh process (as a template does), where torch's own call for the same model then finds
its answer and is not recorded again; a call recorded under another Inductor config is not made; the recording comes
off exactly."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from jupyter_compile_cache.torch_adapter import cpp_headers

COMPILE = """
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
with torch.no_grad():
    y = torch.compile(model)(torch.randn(8, 16))
"""

RECORD = f"""
import base64, json
from jupyter_compile_cache.torch_adapter import cpp_headers
calls = []
import torch._inductor.codecache as codecache
original = codecache._precompile_header
patch = cpp_headers.recording(calls.append)
{COMPILE}
assert codecache._precompile_header is not original
patch.undo()
assert codecache._precompile_header is original
print(json.dumps([[base64.b64encode(c.arguments).decode(), c.config] for c in calls]))
"""

REPLAY = f"""
import base64, json, sys
from jupyter_compile_cache.torch_adapter import cpp_headers
calls = [cpp_headers.HeaderCall(base64.b64decode(a), c) for a, c in json.load(sys.stdin)]
import torch._inductor.codecache as codecache
made = cpp_headers.replay(calls)
before = codecache._precompile_header.cache_info()
kept = []
patch = cpp_headers.recording(kept.append)
{COMPILE}
patch.undo()
after = codecache._precompile_header.cache_info()
print(json.dumps([made, before.currsize, after.hits - before.hits, after.misses - before.misses, len(kept)]))
"""


def _python(code: str, env: dict[str, str], stdin: str = "") -> str:
    done = subprocess.run([sys.executable, "-c", code], input=stdin, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture
def torch_env(tmp_path):
    return {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"), "PYTHONWARNINGS": "ignore"}


@pytest.mark.slow
def test_a_call_recorded_in_one_process_answers_torchs_own_call_in_another(torch_env):
    recorded = json.loads(_python(RECORD, torch_env))
    assert recorded, "compiling a CPU model made no header check"
    assert all(config == recorded[0][1] for _, config in recorded)

    made, cached, hits, misses, kept = json.loads(_python(REPLAY, torch_env, json.dumps(recorded)))
    assert made == len(recorded) and cached == len(recorded)
    assert hits >= 1 and misses == 0  # torch's call while compiling found the answer the replay made
    assert kept == 0  # a call the replay made is not recorded again (a forked kernel's cell skips the config digest)

    elsewhere = [[arguments, "another-config"] for arguments, _ in recorded]
    made, cached, hits, misses, kept = json.loads(_python(REPLAY, torch_env, json.dumps(elsewhere)))
    assert (made, cached) == (0, 0) and misses >= 1  # made under another config: torch computes its own
    assert kept == misses  # and each of torch's own calls is recorded, for the next template


def test_the_config_digest_follows_the_cpp_builders_settings_and_no_others():
    from torch._inductor import config

    digest = cpp_headers.config_digest()
    with config.patch(max_autotune=not config.max_autotune):  # a mode's setting: the builder never reads it
        assert cpp_headers.config_digest() == digest
    with config.patch({"cpp.cxx": ("clang++",)}):
        assert cpp_headers.config_digest() != digest
    assert cpp_headers.config_digest() == digest


def test_a_damaged_call_is_skipped_not_raised():
    damaged = cpp_headers.HeaderCall(b"not a pickle", cpp_headers.config_digest())
    assert cpp_headers.replay([damaged]) == 0
