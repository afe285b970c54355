"""template_fit.py: what selects a warm template. The recorder of the warm-up's reads of os.environ, in this
process; the fit of a template's recorded values against a launch's environment."""

from __future__ import annotations

import os
import subprocess
import sys

from jupyter_compile_cache.kernels.protocol import TemplateProblem, TemplateTrouble
from jupyter_compile_cache.kernels.template_fit import EnvironReads, TemplateInfo, install_stamp, launch_key


def test_the_recorder_keeps_each_variable_read_and_not_a_copy_of_the_whole_environment(monkeypatch):
    monkeypatch.setenv("JCC_READ_BY_INDEX", "1")
    monkeypatch.setenv("JCC_NEVER_READ", "1")
    with EnvironReads() as reads:
        assert os.environ["JCC_READ_BY_INDEX"] == "1"
        os.environ.get("JCC_READ_BY_GET")
        os.getenv("JCC_READ_BY_GETENV")
        assert "JCC_READ_BY_IN" not in os.environ
        copy = os.environ.copy()  # what a subprocess call does: not a read of each variable
        items = dict(os.environ.items())
        spread = {  # torch's python_subprocess_env writes it over several lines
            **os.environ,
            "PYTHONPATH": "x",
        }
    assert copy["JCC_NEVER_READ"] == items["JCC_NEVER_READ"] == spread["JCC_NEVER_READ"] == "1"
    assert reads.names == {"JCC_READ_BY_INDEX", "JCC_READ_BY_GET", "JCC_READ_BY_GETENV", "JCC_READ_BY_IN"}
    os.environ.get("JCC_AFTER")  # the patch lives exactly as long as the recording
    assert "JCC_AFTER" not in reads.names and type(os.environ).__getitem__ is not None


def test_a_read_through_os_environb_is_recorded_as_the_variables_name():
    """A subprocess started with the inherited environment looks PATH up as b"PATH" (os.get_exec_path): torch's C++
    compiler search does it while a template warms up. It once made the template's names unsortable and killed it."""
    import subprocess

    with EnvironReads() as reads:
        subprocess.run(["true"], check=True)
        os.environb.get(b"JCC_READ_AS_BYTES")
    assert {"PATH", "JCC_READ_AS_BYTES"} <= reads.names and all(isinstance(n, str) for n in reads.names)
    assert sorted(reads.names)


def _template(**selecting: str | None) -> TemplateInfo:
    return TemplateInfo(
        pid=1, python=sys.executable, stamp="s", launch_key="k", selecting=dict(selecting), socket="x.sock",
        started=0.0, warm_up_seconds=1.0,
    )  # fmt: skip


def test_a_template_fits_a_launch_whose_selecting_variables_all_match():
    template = _template(TORCH_LOGS=None, TORCHINDUCTOR_CACHE_DIR="/c", OMP_NUM_THREADS=None)
    env = {"TORCHINDUCTOR_CACHE_DIR": "/c", "MY_SETTING": "anything", "JPY_PARENT_PID": "7", "JPY_SESSION_NAME": "n"}
    assert template.mismatch(sys.executable, env, "s") is None  # unread and per-launch variables never select
    assert template.mismatch(sys.executable, {**env, "TORCH_LOGS": "+dynamo"}, "s") == TemplateProblem(
        TemplateTrouble.VARIABLE_DIFFERS, "TORCH_LOGS"
    )
    assert template.mismatch(sys.executable, {"MY_SETTING": "x"}, "s") == TemplateProblem(
        TemplateTrouble.VARIABLE_DIFFERS, "TORCHINDUCTOR_CACHE_DIR"
    )
    # read by native code when a library loads: selects even though no recorder saw it
    assert template.mismatch(sys.executable, {**env, "MKL_NUM_THREADS": "1"}, "s") == TemplateProblem(
        TemplateTrouble.VARIABLE_DIFFERS, "MKL_NUM_THREADS"
    )
    packages = TemplateProblem(TemplateTrouble.PACKAGES_CHANGED)
    assert template.mismatch(sys.executable, env, "other") == packages
    assert template.mismatch("/other/python", env, "s") == TemplateProblem(TemplateTrouble.OTHER_PYTHON, sys.executable)


def test_the_install_stamp_and_launch_key_are_the_same_in_another_process():
    """The launcher and the template compute them in different processes, from different folders."""
    code = (
        "import sys; from jupyter_compile_cache.kernels.template_fit import install_stamp, launch_key\n"
        "print(install_stamp(), launch_key(sys.executable, {'A': '1', 'JPY_PARENT_PID': '2'}, 's'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/", check=True).stdout
    assert out.split() == [install_stamp(), launch_key(sys.executable, {"A": "1", "JPY_PARENT_PID": "9"}, "s")]
