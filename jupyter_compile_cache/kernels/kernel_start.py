"""How this kernel started: forked from a warm template, or cold and why. The launcher writes it next to the
kernel's connection file; `%compile_cache status`, the panel and `%load_ext` read it in the kernel."""

from __future__ import annotations

import contextlib
import enum
import json
from dataclasses import dataclass
from typing import Any

from ..failure import Failure
from .protocol import TemplateProblem, start_record_path


class Cold(str, enum.Enum):
    """Why a launch of the warm kernel spec was not forked (`detail` says more where there is more)."""

    OFF = "off"  # the templates are switched off (detail: the variable)
    NO_FORK = "no_fork"  # no fork server on this platform (detail: the platform)
    NO_RUNTIME_DIR = "no_runtime_dir"  # no private runtime folder for templates
    LOOKUP_FAILED = "lookup_failed"  # looking for a template failed (detail: the error)
    NO_FIT = "no_fit"  # no template fits this launch (problem: what differs)
    REFUSED = "refused"  # the template that fits refused (problem: why)
    TEMPLATE_SILENT = "template_silent"  # the template did not answer (detail: the error's type)
    NONE_YET = "none_yet"  # no template for this environment yet
    KERNEL_SILENT = "kernel_silent"  # the kernel's process did not answer


class Next(str, enum.Enum):
    """What the launcher did about a template for the next launch like this one."""

    KEPT = "kept"  # this launch's own template refused this once: it stays for the next
    WARMING = "warming"  # the template for it is still warming up
    FAILED = "failed"  # the last template for it could not warm up (next_failure: why)
    STARTED = "started"  # one is warming up for the next kernel
    NOT_STARTED = "not_started"  # a template could not be started


@dataclass
class KernelStart:
    how: str  # "forked" (from a warm template), "cold" (the launcher started it plainly), "plain" (not our spec)
    seconds: float | None = None  # from the launcher's start to the kernel's process answering
    template_pid: int | None = None
    cold: Cold | None = None  # why it was not forked
    detail: str = ""
    failure: Failure | None = None  # LOOKUP_FAILED: what failed
    problem: TemplateProblem | None = None  # the template's trouble, for NO_FIT and REFUSED
    next: Next | None = None  # what happens for the next launch
    next_failure: Failure | None = None  # Next.FAILED: why the last template could not warm up
    retired: TemplateProblem | None = None  # why the last template for this environment retired, if it did

    def to_json(self) -> dict[str, Any]:
        data = dict(vars(self))
        for key in ("problem", "retired", "failure", "next_failure"):
            data[key] = data[key].to_json() if hasattr(data[key], "to_json") else data[key]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> KernelStart:
        fields = {k: data[k] for k in cls.__dataclass_fields__ if data.get(k) is not None}
        fields["cold"] = Cold(fields["cold"]) if "cold" in fields else None
        fields["next"] = Next(fields["next"]) if "next" in fields else None
        for key in ("problem", "retired"):
            fields[key] = TemplateProblem.from_json(fields.get(key))
        for key in ("failure", "next_failure"):
            fields[key] = Failure.from_json(fields[key]) if key in fields else None
        return cls(**fields)


def write_start(connection_file: str | None, start: KernelStart) -> None:
    if connection_file:
        with contextlib.suppress(OSError), open(start_record_path(connection_file), "w", encoding="utf-8") as f:
            json.dump(start.to_json(), f)


def this_kernel_start() -> KernelStart:
    """Called inside a kernel: how it started ("plain" where no launcher of ours wrote it)."""
    try:
        from ipykernel.connect import get_connection_file

        with open(start_record_path(get_connection_file()), encoding="utf-8") as f:
            return KernelStart.from_json(json.load(f))
    except Exception:  # not a kernel of our spec, or not in a kernel at all
        return KernelStart("plain")
