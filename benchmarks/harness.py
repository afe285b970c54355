"""The one harness of the benchmarks: it owns the arguments, the result file and the tables.

A benchmark is a module with a docstring (what it measures, then how to run it), `OPTIONS` (its own arguments, made
with `option`) and `run(job: Job)`: it measures, keeps its figures with `job.keep(...)` and its side-by-side
results with `job.table(...)`. The harness parses the arguments (its own `--out` beside the benchmark's), prints
the tables as markdown at the end, and with `--out FILE.json` writes the machine, the command, every figure kept and
the tables there (again after each `keep`, so a run cut short keeps what it measured) and the tables in FILE.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any


@dataclass(frozen=True)
class Option:
    flags: tuple[str, ...]
    settings: dict[str, Any]


def option(*flags: str, **settings: Any) -> Option:
    """One argument of a benchmark, as argparse's `add_argument(*flags, **settings)` takes it."""
    return Option(flags, settings)


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# `--code LABEL=DIR`: the same benchmark with the package of another checkout (a `git worktree` of an older commit)
CODE_OPTION = option(
    "--code", action="append", default=[], help="LABEL=DIR: another checkout's package to compare (repeatable)"
)


def checkouts(specs: list[str]) -> dict[str, str]:
    """{label: package folder}: this checkout as "this change", then each `--code LABEL=DIR` given."""
    codes = {"this change": REPO}
    for spec in specs:
        label, _, path = spec.rpartition("=")
        codes[label or os.path.basename(os.path.abspath(path))] = os.path.abspath(path)
    return codes


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[object]], align: str = "") -> str:
    """HEADERS over ROWS (each cell as `str` shows it). ALIGN: one letter per column, 'l' or 'r' (left where
    missing)."""
    rule = ["--:" if a == "r" else "---" for a in align.ljust(len(headers), "l")]
    return "\n".join(_row(line) for line in [headers, rule, *rows])


def _row(cells: Iterable[object]) -> str:
    return "| " + " | ".join(str(cell) for cell in cells) + " |"


@dataclass
class Table:
    title: str
    headers: list[str]
    rows: list[list[Any]]
    align: str = ""

    def markdown(self) -> str:
        return (f"{self.title}\n\n" if self.title else "") + markdown_table(self.headers, self.rows, self.align)


@dataclass
class Job:
    """One run of a benchmark: its arguments, and what it keeps for the result file."""

    name: str
    args: argparse.Namespace
    argv: list[str] = field(default_factory=list)
    out: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)  # what the benchmark adds to `machine`'s: its settings
    data: dict[str, Any] = field(default_factory=dict)
    tables: list[Table] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def keep(self, **data: Any) -> None:
        """Figures for the result file; written at once, so that a run cut short keeps what it measured."""
        self.data.update(data)
        self._write()

    def table(self, headers: Sequence[str], rows: Iterable[Sequence[Any]], title: str = "", align: str = "") -> None:
        """Results people compare, side by side: printed as markdown at the end, and kept in the result files."""
        self.tables.append(Table(title, list(headers), [list(r) for r in rows], align))
        self._write()

    def note(self, line: str) -> None:
        """A result in a sentence (a figure no table holds), printed after the tables and kept with them."""
        self.notes.append(line)
        self._write()

    def say(self, line: str) -> None:
        """Progress, on stderr (stdout holds the tables)."""
        print(line, file=sys.stderr, flush=True)

    def _write(self) -> None:
        if not self.out:
            return
        os.makedirs(os.path.dirname(os.path.abspath(self.out)), exist_ok=True)
        tables = [{"title": t.title, "headers": t.headers, "rows": t.rows} for t in self.tables]
        with open(self.out, "w", encoding="utf-8") as f:
            json.dump({"meta": machine(self), **self.data, "tables": tables, "notes": self.notes}, f, indent=1,
                      default=str)  # fmt: skip
            f.write("\n")
        if self.tables or self.notes:
            with open(os.path.splitext(self.out)[0] + ".md", "w", encoding="utf-8") as f:
                f.write(self.markdown() + "\n")

    def markdown(self) -> str:
        return "\n\n".join([*(t.markdown() for t in self.tables), *self.notes])


def machine(job: Job | None = None) -> dict[str, Any]:
    """What a result says of its run: when, the command, the CPU, Python, torch and its GPU (torch imported at the
    first result written, if the benchmark has not: what it measures runs in processes of its own)."""
    meta: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M")}
    if job is not None:
        meta["command"] = " ".join(["python -m benchmarks", job.name, *_without_out(job.argv)])
    meta |= {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()}
    meta["python"] = platform.python_version()
    try:
        import torch

        meta["torch"] = torch.__version__
        on_gpu = torch.cuda.is_available() and (job is None or job.meta.get("device") != "cpu")
        meta["gpu"] = torch.cuda.get_device_name() if on_gpu else None  # (a CPU run on a GPU host names none)
    except ImportError:
        pass
    return meta | (job.meta if job is not None else {})


def _without_out(argv: list[str]) -> list[str]:
    argv, shown = list(argv), []
    while argv:
        arg = argv.pop(0)
        if arg == "--out":
            argv = argv[1:]
        elif not arg.startswith("--out="):
            shown.append(arg)
    return shown


def parser(name: str, module: ModuleType) -> argparse.ArgumentParser:
    """The benchmark's own arguments, and the harness's."""
    p = argparse.ArgumentParser(
        prog=f"python -m benchmarks {name}",
        description=module.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for opt in getattr(module, "OPTIONS", []):
        p.add_argument(*opt.flags, **opt.settings)
    if not any("--out" in opt.flags for opt in getattr(module, "OPTIONS", [])):
        p.add_argument("--out", metavar="FILE.json", help="write the results here (and the tables in FILE.md)")
    return p


def run(name: str, module: ModuleType, argv: list[str]) -> int:
    """Parse ARGV for the benchmark NAME, run it, print its tables."""
    args = parser(name, module).parse_args(argv)
    job = Job(name, args, argv, getattr(args, "out", None))
    code = module.run(job)
    if job.tables or job.notes:
        print(f"\n{job.markdown()}")
    if job.out and (job.data or job.tables or job.notes):  # (written at each keep, table and note)
        print(f"\nwrote {job.out}", file=sys.stderr)
    return code if isinstance(code, int) else 0
