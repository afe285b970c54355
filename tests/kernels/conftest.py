from __future__ import annotations

import os

import pytest
from helpers.warm_kernels import end_templates

from jupyter_compile_cache.frontends import cli


@pytest.fixture(scope="session")
def warm_env(tmp_path_factory):
    """The warm kernel's spec installed by the CLI, and the environment its kernels are launched with: a private
    runtime folder, so that the tests of tests/kernels share one template and end it."""
    root = tmp_path_factory.mktemp("warm")
    prefix, runtime = root / "prefix", root / "runtime"
    runtime.mkdir(mode=0o700)
    assert cli.main(["install-kernel", "--prefix", str(prefix)]) == 0
    env = {
        **os.environ,
        "JUPYTER_PATH": str(prefix / "share" / "jupyter"),
        "JUPYTER_COMPILE_CACHE_RUNTIME_DIR": str(runtime),
        "TORCHINDUCTOR_CACHE_DIR": str(root / "cache"),
        "JUPYTER_COMPILE_CACHE_DIR": str(root / "store"),
        "PYTHONWARNINGS": "ignore",
    }
    yield env
    end_templates(str(runtime))
