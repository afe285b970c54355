"""A spare kernel process: torch's compiler stack imported ahead of time, waiting to become the next kernel.

Started by `warm_kernel.WarmSpareProvisioner` with the kernel's own Python, environment and working directory
(`python -m jupyter_compile_cache.spare READY_FD`). It imports torch, torch._dynamo, torch._inductor and the
kernel's own modules, hashes torch's files and probes the CPU's vector ISAs: per-process work that costs seconds
and that no bundle carries. It never touches CUDA. Then it writes "ready" to READY_FD and blocks on stdin.

One JSON line on stdin, {"argv": [...]}, makes it the kernel: it forgets its own modules and runs
`python -m ipykernel_launcher ARGS` in this process, as a fresh kernel would. End of input (the provisioner, or
the server holding it, went away) makes it exit: a spare never outlives its kernel.
"""

from __future__ import annotations

import json
import os
import runpy
import sys

# What `python -m <module>` the spare can become (kernel specs written by ipykernel use the first).
KERNEL_MODULES = ("ipykernel_launcher", "ipykernel")


def warm_up() -> None:
    """Everything a kernel's first compiled cell would otherwise import or compute, without CUDA."""
    import ipykernel.kernelapp  # noqa: F401  (the kernel's own start: ~0.5 s)
    import IPython  # noqa: F401

    from .prewarm import Prewarm

    Prewarm().run_here()


def main(argv: list[str]) -> int:
    ready_fd = int(argv[1])
    try:
        warm_up()
    except Exception as exc:  # a spare that cannot warm up is useless: the provisioner starts kernels plainly
        print(f"jupyter_compile_cache spare: warm-up failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    os.write(ready_fd, b"ready\n")
    os.close(ready_fd)
    line = sys.stdin.readline()
    if not line:
        return 0  # the provisioner let go of us (kernel shut down, server gone)
    try:
        request = json.loads(line)
        module, args = request["module"], [str(a) for a in request["args"]]
    except (ValueError, KeyError, TypeError):
        return 2
    if module not in KERNEL_MODULES:
        return 2
    _become_kernel(module, args)
    return 0


def _become_kernel(module: str, args: list[str]) -> None:
    """Run `python -m module args` here. Our own modules go first, so the kernel starts without them, as a fresh
    one would (the user's `%load_ext jupyter_compile_cache` imports them again)."""
    for name in [n for n in sys.modules if n == __package__ or n.startswith(f"{__package__}.")]:
        del sys.modules[name]
    sys.stdin.close()  # a kernel started by jupyter_client has its stdin closed too
    sys.stdin = open(os.devnull)  # noqa: SIM115  (the kernel replaces it with its own stream)
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
