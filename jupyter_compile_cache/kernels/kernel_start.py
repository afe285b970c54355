"""How this kernel started: forked from a warm template, or cold and why. The launcher writes it next to the
kernel's connection file; `%compile_cache status`, the panel and `%load_ext` read it in the kernel."""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass


@dataclass
class KernelStart:
    how: str  # "forked" (from a warm template), "cold" (the launcher started it plainly), "plain" (not our spec)
    seconds: float | None = None  # from the launcher's start to the kernel's process answering
    template_pid: int | None = None
    why: str | None = None  # why it was not forked

    @property
    def warm(self) -> bool:
        return self.how == "forked"


def start_path(connection_file: str) -> str:
    return os.path.splitext(connection_file)[0] + "-start.json"


def write_start(connection_file: str | None, start: KernelStart) -> None:
    if connection_file:
        with contextlib.suppress(OSError), open(start_path(connection_file), "w", encoding="utf-8") as f:
            json.dump(vars(start), f)


def this_kernel_start() -> KernelStart:
    """Called inside a kernel: how it started ("plain" where no launcher of ours wrote it)."""
    try:
        from ipykernel.connect import get_connection_file

        with open(start_path(get_connection_file()), encoding="utf-8") as f:
            data = json.load(f)
        return KernelStart(**{k: data.get(k) for k in KernelStart.__dataclass_fields__})
    except Exception:  # not a kernel of our spec, or not in a kernel at all
        return KernelStart("plain")
