"""The `%%compile_cache` line: NAME and the cell's options, parsed once for the magic and for the notebook's plan
(a saved notebook's cells are read with the same parser). Its usage and help are generated from the parser."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import shlex
from collections.abc import Callable
from typing import Any, NoReturn

from IPython.core.error import UsageError

from ..core.notebook import source_digest
from ..core.options import CellOptions, bundle_name
from . import arguments


class Parser(arguments.Parser):
    """The shared parser (no abbreviations, suggestions on a typo), raising UsageError (shown without a traceback)
    instead of exiting the kernel; every error quotes the usage."""

    def __init__(self, *args: Any, usage_line: Callable[[], str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, add_help=False, **kwargs)
        self.usage_line = usage_line or (lambda: self.format_usage().strip().removeprefix("usage: "))
        self.subcommands: dict[str, Parser] = {}  # name -> its parser, filled by whoever adds sub-parsers

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{arguments.with_suggestion(message, self)}\nusage: {self.usage_line()}")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        raise UsageError(f"{message or ''}\nusage: {self.usage_line()}".strip())


@functools.cache  # built once: every cell parses its line
def cell_parser() -> Parser:
    p = Parser(prog="%%compile_cache", description="Restore NAME before the cell, run it, save what it compiled.")
    p.add_argument("name", metavar="NAME", help="the bundle: letters, digits, '.', '_', '-'")
    p.add_argument(
        "--store",
        dest="store_dir",
        metavar="DIR",
        default=None,
        help="another local store (default: CompileCache.store_dir)",
    )
    p.add_argument("--no-restore", dest="restore", action="store_false", help="compile cold, even if a bundle fits")
    p.add_argument("--version", metavar="ID", default=None, help="restore this version only (an id `list` shows)")
    p.add_argument("--no-save", dest="save", action="store_false", help="save nothing")
    p.add_argument("--force-save", action="store_true", help="save even if the cell compiled nothing new")
    p.add_argument("--quiet", action="store_true", help="print nothing but warnings")
    p.add_argument(
        "--no-precompile", dest="precompile", action="store_false", default=None, help="Dynamo precompile off"
    )
    p.add_argument(
        "--precompile-processes",
        action="store_true",
        help="processes the cell starts (torchrun's ranks) load and save Dynamo precompile entries too",
    )
    p.add_argument(
        "--hub", metavar="URL", type=arguments.hub_url, default=None, help="this cell's hub (default: CompileCache.hub)"
    )
    p.add_argument("--no-hub", action="store_true", help="local store only")
    p.add_argument(
        "--namespace",
        metavar="NS",
        type=arguments.namespace,
        default=None,
        help="hub namespace (default: CompileCache.namespace)",
    )
    p.add_argument(
        "--ttl", metavar="SECONDS", type=arguments.ttl_seconds, default=None, help="how long the pushed bundle lives"
    )
    p.add_argument(
        "--wait",
        metavar="SECONDS",
        type=arguments.wait_seconds,
        default=0.0,
        help="wait for a collaborator compiling the same NAME",
    )
    p.add_argument("--torch-remote", action="store_true", help="point torch's own Redis caches at the hub too")
    return p


def parse_cell_line(line: str, body: str | None = None) -> tuple[str, CellOptions]:
    """NAME and the options of a `%%compile_cache` line (the words after the magic's name), with the cell's BODY
    where it runs; a bad line is a ValueError saying what is wrong, with the usage. The magic and a notebook's plan
    read a line alike."""
    try:
        args = cell_parser().parse_args(shlex.split(line))
        name = bundle_name(args.name)
    except UsageError as exc:
        raise ValueError(str(exc)) from None
    except ValueError as exc:  # shlex's unbalanced quote, or a bad NAME
        raise ValueError(f"{exc}\nusage: {cell_parser().usage_line()}") from None
    return name, options_from(args, body)


def options_from(args: argparse.Namespace, body: str | None = None) -> CellOptions:
    """The parsed line as CellOptions (the parser's destinations are named after its fields); with the cell's BODY,
    the body and its identity too (kept with the bundle, for the notebook's plan)."""
    fields = {f.name: getattr(args, f.name) for f in dataclasses.fields(CellOptions) if f.name in args}
    if body is not None:
        fields["source_digest"] = source_digest(body)
        fields["body"] = body
    return CellOptions(**fields)
