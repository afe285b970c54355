"""The warm kernel: every kernel start forked from a process that has torch and its compiler loaded.

`pip install jupyter_compile_cache` installs its kernel spec in that environment (`python3-compile-cache`, package
data as ipykernel's own): pick "Python 3 (compile cache, warm)" in JupyterLab, Notebook 7 or VS Code. For another
prefix, or another name::

    jupyter-compile-cache install-kernel [--name NAME] [--display-name TEXT] [--user | --sys-prefix | --prefix DIR]

Its argv runs launcher.py at every kernel start: the first is cold and starts a warm template (template.py) for this
environment; every later start (a restart, another notebook, several kernels at once) is a child forked from it in a
fraction of a second, a fresh kernel without the seconds of imports. A launch no template fits (another environment,
torch upgraded) starts cold, never fails, and gets a template for next time. `%compile_cache status` says how the
kernel started. A template is idle between starts, its pages shared with its kernels; it exits after an idle hour
(JUPYTER_COMPILE_CACHE_TEMPLATE_IDLE) and with the front ends that used it; JUPYTER_COMPILE_CACHE_TEMPLATE=0 turns it
off. The server extension, enabled with the package, starts templates with the server (server_extension.py).

This module runs inside the Jupyter server: it must not import torch.
"""

from __future__ import annotations

import json
import os
import sys

from jupyter_client.provisioning.local_provisioner import LocalProvisioner

from .protocol import LAUNCHER_MODULE

DEFAULT_KERNEL_NAME = "python3-compile-cache"
DEFAULT_DISPLAY_NAME = "Python 3 (compile cache, warm)"


class LaunchedByLauncher(LocalProvisioner):
    """The provisioner that specs installed by version 0.2 name ("compile-cache-warm"): the plain local one. The
    launcher in their argv does the warm start now, for every front end alike."""


def install_kernel_spec(
    name: str = DEFAULT_KERNEL_NAME,
    display_name: str = DEFAULT_DISPLAY_NAME,
    user: bool = False,
    prefix: str | None = None,
) -> str:
    """Write the kernel spec (this Python, the launcher); returns the directory it went to."""
    import tempfile

    from jupyter_client.kernelspec import KernelSpecManager

    spec = {
        "argv": [sys.executable, "-m", LAUNCHER_MODULE, "-f", "{connection_file}"],
        "display_name": display_name,
        "language": "python",
        "metadata": {"debugger": True},
    }
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "kernel.json"), "w", encoding="utf-8") as f:
            json.dump(spec, f, indent=1)
        return KernelSpecManager().install_kernel_spec(tmp, kernel_name=name, user=user, prefix=prefix)
