"""Imported by Python at the start of every process beneath a cell run with `--precompile-processes` (this folder is
first on their PYTHONPATH for the length of the cell): arms jupyter_compile_cache's process hook
(torch_adapter/process_hook.py), then imports the sitecustomize this one shadows, as Python would have."""

import importlib
import os
import sys


def _arm() -> None:
    try:
        from jupyter_compile_cache.torch_adapter import process_hook
    except ImportError:  # another Python, without the package: the cell's line says none ran the hook
        return
    try:
        process_hook.arm()
    except Exception as exc:  # the process runs as without us, and its record says why
        process_hook.failed_to_arm(os.environ.get(process_hook.RECORDS_ENV), exc)


def _shadowed() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    mine = sys.modules.pop("sitecustomize", None)
    path = sys.path[:]
    sys.path[:] = [entry for entry in path if os.path.abspath(entry or os.curdir) != here]
    try:
        importlib.import_module("sitecustomize")
    except ImportError as exc:
        if exc.name != "sitecustomize":  # the shadowed one failed: Python's site says so, as without us
            raise
        if mine is not None:
            sys.modules["sitecustomize"] = mine
    finally:
        sys.path[:] = path


_arm()
_shadowed()
