"""Templates ready before the first kernel: a Jupyter server extension, enabled in the environment the package is
installed in (its `etc/jupyter/jupyter_server_config.d/jupyter_compile_cache.json`; `jupyter server extension
disable jupyter_compile_cache` turns it off).

As the Jupyter server starts, for each kernel spec whose argv runs the launcher, it runs that argv's Python with `-m
jupyter_compile_cache.kernels.launcher --template-only` in the environment the spec's kernels get: a template starts
for that environment unless one fits already, and the day's first kernel is forked too. The server is the template's
holder: the template exits soon after it. Nothing here waits, and a template that cannot warm up only means a cold
first kernel, told by its launcher. This module runs inside the Jupyter server: it must not import torch.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from typing import Any

from .launcher import TEMPLATE_ONLY
from .protocol import LAUNCHER_MODULE

# A kernel spec's argv that starts with one of these runs the server's own Python (jupyter_client's KernelManager).
SERVER_PYTHON = {"python", f"python{sys.version_info[0]}", "python{}.{}".format(*sys.version_info[:2])}


def warm_specs(spec_manager: Any) -> dict[str, tuple[list[str], dict[str, str]]]:
    """{kernel name: (the Python and `-m launcher` of its argv, its env)} of the installed warm kernel specs."""
    found = {}
    for name in sorted(spec_manager.find_kernel_specs()):
        try:
            spec = spec_manager.get_kernel_spec(name)
        except Exception:  # an unreadable spec is the server's to report
            continue
        argv = list(spec.argv)
        if len(argv) >= 3 and argv[1:3] == ["-m", LAUNCHER_MODULE]:
            if argv[0] in SERVER_PYTHON:  # the spec installed with the package: jupyter_client runs it so too
                argv[0] = sys.executable
            found[name] = (argv[:3], {str(k): str(v) for k, v in (spec.env or {}).items()})
    return found


def kernel_env(spec_env: dict[str, str]) -> dict[str, str]:
    """The environment jupyter_client gives a kernel of that spec, less its per-launch JPY_* variables."""
    env = {**os.environ, **spec_env}
    env.pop("PYTHONEXECUTABLE", None)  # jupyter_client drops it for Python kernels
    return env


def start_templates(spec_manager: Any, log: Any) -> list[str]:
    """Ask each warm spec's launcher to start its template (in the background); the names of the specs asked."""
    asked = []
    for name, (command, spec_env) in warm_specs(spec_manager).items():
        try:
            process = subprocess.Popen([*command, TEMPLATE_ONLY], env=kernel_env(spec_env), stdin=subprocess.DEVNULL)
        except OSError as exc:
            log.warning("jupyter_compile_cache: no warm template for kernel spec %r (%s)", name, exc)
            continue
        threading.Thread(target=process.wait, name="jupyter_compile_cache-template", daemon=True).start()
        asked.append(name)
    if asked:
        log.info("jupyter_compile_cache: warming up templates for kernel specs %s", ", ".join(asked))
    return asked


def _load_jupyter_server_extension(serverapp: Any) -> None:
    start_templates(serverapp.kernel_spec_manager, serverapp.log)
