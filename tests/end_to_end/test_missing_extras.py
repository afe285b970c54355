"""Without the `[hub]`, `[s3]` (`[cloud]`) and `[panel]` extras: cells run, commands explain which extra to install,
nothing raises ModuleNotFoundError. The packages are really absent: a venv whose site-packages holds everything this
test environment has except redis-py, obstore and ipywidgets (linked, not copied, so it is made in a second)."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import textwrap

import pytest

ABSENT = ("redis", "ipywidgets", "obstore")
HUB_HINT = "pip install 'jupyter_compile_cache[hub]'"
S3_HINT = "pip install 'jupyter_compile_cache[s3]'"
PANEL_HINT = "pip install 'jupyter_compile_cache[panel]'"

SCRIPT = textwrap.dedent(
    """
    from IPython.core.interactiveshell import InteractiveShell
    for module in ("redis", "ipywidgets", "obstore"):
        try:
            __import__(module)
            raise SystemExit(f"{module} is importable: the venv is wrong")
        except ImportError:
            pass
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "jupyter_compile_cache")
    for tag, cell in (
        ("CELL", "%%compile_cache extras\\nanswer = 41 + 1"),
        ("LIST", "%compile_cache list"),
        ("HUB", "%compile_cache hub redis://127.0.0.1:1/0"),
        ("PANEL", "%compile_cache panel"),
    ):
        result = ip.run_cell(cell)
        error = result.error_in_exec or result.error_before_exec
        print(f"{tag} ok={result.success} error={type(error).__name__ if error else None}", flush=True)
    print("ANSWER", ip.user_ns.get("answer"))
    """
)


@pytest.fixture(scope="module")
def venv_without_extras(tmp_path_factory):
    """A venv of this Python with every package of the test environment but redis-py, obstore and ipywidgets."""
    root = tmp_path_factory.mktemp("venv-without-extras")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    python = str(root / "bin" / "python")
    target = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    source = sysconfig.get_paths()["purelib"]
    for entry in os.listdir(source):
        if not entry.lower().startswith(ABSENT):
            os.symlink(os.path.join(source, entry), os.path.join(target, entry))
    return python


def _env(tmp_path) -> dict[str, str]:
    # (no VIRTUAL_ENV: IPython's shell would put that venv's site-packages, extras and all, on its path)
    return {
        **{name: value for name, value in os.environ.items() if name != "VIRTUAL_ENV"},
        "JUPYTER_COMPILE_CACHE_HUB": "redis://127.0.0.1:1/0",
        "JUPYTER_COMPILE_CACHE_DIR": str(tmp_path / "store"),
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache"),
        "JUPYTER_COMPILE_CACHE_PREWARM": "0",
        "PYTHONWARNINGS": "ignore",
    }


def test_cells_and_commands_work_without_redis_and_ipywidgets(venv_without_extras, tmp_path):
    run = subprocess.run(
        [venv_without_extras, "-c", SCRIPT], env=_env(tmp_path), capture_output=True, text=True, timeout=300
    )
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    assert "ModuleNotFoundError" not in out, out
    assert "CELL ok=True error=None" in out and "ANSWER 42" in out, out  # the hub configured, the cell ran
    assert "LIST ok=True" in out and "HUB ok=True" in out, out
    warning = f"compile_cache: warning: the hub needs redis-py, which is not installed: {HUB_HINT}"
    assert out.count(warning) == 1, out  # told once per session, not by every command
    assert f"not set: the hub needs redis-py, which is not installed: {HUB_HINT}" in out, out  # `hub URL`
    assert "PANEL ok=False error=UsageError" in out and PANEL_HINT in out, out


def test_cli_hub_commands_name_the_extra_without_redis(venv_without_extras, tmp_path):
    run = subprocess.run(
        [venv_without_extras, "-m", "jupyter_compile_cache", "hub", "ls"],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 4, run.stdout + run.stderr  # the hub cannot be reached from here
    assert HUB_HINT in run.stderr and "Traceback" not in run.stderr, run.stderr
    listing = subprocess.run(
        [venv_without_extras, "-m", "jupyter_compile_cache", "list"],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    # the local store listed, then the status of a hub that failed (its client library missing)
    assert listing.returncode == 4 and "Traceback" not in listing.stderr, listing.stdout + listing.stderr
    assert "no bundles" in listing.stdout and HUB_HINT in listing.stderr


def test_an_s3_hub_without_obstore_names_its_extra_and_the_cell_runs(venv_without_extras, tmp_path):
    env = {**_env(tmp_path), "JUPYTER_COMPILE_CACHE_HUB": "s3://team-bucket/hub"}
    script = SCRIPT.replace("redis://127.0.0.1:1/0", "s3://team-bucket/hub")
    run = subprocess.run([venv_without_extras, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    out = run.stdout + run.stderr
    assert run.returncode == 0 and "ModuleNotFoundError" not in out, out
    assert "CELL ok=True error=None" in out and "ANSWER 42" in out and "LIST ok=True" in out, out
    warning = f"compile_cache: warning: an s3:// hub needs obstore, which is not installed: {S3_HINT}"
    assert out.count(warning) == 1, out
    cli = subprocess.run(
        [venv_without_extras, "-m", "jupyter_compile_cache", "hub", "ls"], env=env, capture_output=True, text=True
    )
    assert cli.returncode == 4 and S3_HINT in cli.stderr and "Traceback" not in cli.stderr, cli.stderr
