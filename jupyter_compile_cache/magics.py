"""The IPython magics: argument parsing and display only; the work is done by CompileCacheSession."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import shlex
from typing import Any, NoReturn

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class

from . import layers, report
from .session import CellOptions, CompileCacheSession, check_name
from .store import parse_size

CELL_USAGE = "%%compile_cache NAME [--store DIR] [--no-restore] [--no-save] [--force-save] [--quiet] [--no-precompile]"
LINE_USAGE = (
    "%compile_cache status | list | explain NAME | rm NAME | gc [--max-size SIZE] | enable LAYER | disable LAYER "
    "| hub URL|off|status | panel"
)


class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError (shown without a traceback) instead of exiting the kernel."""

    def __init__(self, *args: Any, usage_line: str = "", **kwargs: Any) -> None:
        super().__init__(*args, add_help=False, **kwargs)
        self.usage_line = usage_line

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message}\nusage: {self.usage_line}")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        raise UsageError(f"{message or ''}\nusage: {self.usage_line}".strip())


def _cell_parser() -> _Parser:
    p = _Parser(prog="%%compile_cache", usage_line=CELL_USAGE)
    p.add_argument("name")
    p.add_argument("--store", default=None)
    p.add_argument("--no-restore", dest="restore", action="store_false")
    p.add_argument("--no-save", dest="save", action="store_false")
    p.add_argument("--force-save", action="store_true")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--no-precompile", dest="precompile", action="store_false", default=None)
    p.add_argument("--hub", default=None)
    p.add_argument("--no-hub", action="store_true")
    p.add_argument("--namespace", default=None)
    p.add_argument("--ttl", type=int, default=None)
    p.add_argument("--wait", type=float, default=0.0)
    p.add_argument("--torch-remote", action="store_true")
    return p


def _line_parser() -> _Parser:
    p = _Parser(prog="%compile_cache", usage_line=LINE_USAGE)
    sub = p.add_subparsers(dest="command", parser_class=functools.partial(_Parser, usage_line=LINE_USAGE))
    sub.add_parser("status")
    sub.add_parser("list").add_argument("--store", default=None)
    for command in ("explain", "rm"):
        cmd = sub.add_parser(command)
        cmd.add_argument("name")
        cmd.add_argument("--store", default=None)
    gc = sub.add_parser("gc")
    gc.add_argument("--max-size", default="10G")
    gc.add_argument("--store", default=None)
    for command in ("enable", "disable"):
        sub.add_parser(command).add_argument("layer")
    sub.add_parser("hub").add_argument("target", nargs="?", default="status")
    sub.add_parser("panel")
    return p


def _split(line: str, usage: str) -> list[str]:
    try:
        return shlex.split(line)
    except ValueError as exc:
        raise UsageError(f"{exc}\nusage: {usage}") from None


@magics_class
class CompileCacheMagics(Magics):
    def __init__(self, shell: Any, session: CompileCacheSession) -> None:
        super().__init__(shell)
        self.session = session

    @cell_magic
    def compile_cache(self, line: str, cell: str) -> Any:
        """Restore NAME before the cell, run it, save what it compiled.

        Usage: %%compile_cache NAME [--store DIR] [--no-restore] [--no-save] [--force-save] [--quiet]
        [--no-precompile]
        """
        args = _cell_parser().parse_args(_split(line, CELL_USAGE))
        try:
            check_name(args.name)
        except ValueError as exc:
            raise UsageError(f"{exc}\nusage: {CELL_USAGE}") from None
        # The parser's destinations are named after CellOptions' fields.
        options = CellOptions(
            **{f.name: getattr(args, f.name) for f in dataclasses.fields(CellOptions) if f.name in args}
        )
        __tracebackhide__ = True  # noqa: F841  (IPython hides this frame from the user's traceback)
        with self.session.cell(args.name, options):
            return self._run_body(cell)

    def _run_body(self, cell: str) -> Any:
        """Run the cell like IPython does (so its exception propagates unchanged, once); return the last expression.

        The source is registered with IPython's compiler cache, so `inspect.getsource` (which Dynamo uses) works
        for functions and classes the cell defines.
        """
        __tracebackhide__ = True  # noqa: F841
        shell = self.shell
        source = shell.transform_cell(cell)
        filename = shell.compile.cache(source)
        tree = ast.parse(source, filename=filename)
        last_expr = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last_expr = ast.Expression(tree.body.pop().value)
        exec(shell.compile(tree, filename, "exec"), shell.user_global_ns, shell.user_ns)
        if last_expr is not None:
            return eval(shell.compile(last_expr, filename, "eval"), shell.user_global_ns, shell.user_ns)
        return None

    @line_magic("compile_cache")
    def compile_cache_line(self, line: str) -> Any:
        """Inspect and manage the caches.

        Usage: %compile_cache status | list | explain NAME | rm NAME | gc [--max-size SIZE] | enable LAYER |
        disable LAYER
        """
        args = _line_parser().parse_args(_split(line, LINE_USAGE))
        session = self.session
        if args.command in (None, "status"):
            return report.StatusView(session.status())
        if args.command == "list":
            return report.BundleTable(session.bundles(args.store))
        if args.command == "explain":
            return report.Explanation(session.explain(_valid(args.name), args.store))
        if args.command == "rm":
            removed = session.store(args.store).remove(_valid(args.name))
            if not removed:
                raise UsageError(f"no bundle named {args.name!r} in {session.store(args.store).root}")
            print(f"compile_cache: removed {removed} version(s) of {args.name!r}")
            return None
        if args.command == "gc":
            try:
                limit = parse_size(args.max_size)
            except ValueError as exc:
                raise UsageError(f"{exc}\nusage: {LINE_USAGE}") from None
            evicted = session.store(args.store).gc(limit)
            print(f"compile_cache: evicted {len(evicted)} version(s), {sum(e[2] for e in evicted)} bytes")
            return None
        if args.command in ("enable", "disable"):
            try:
                layer = session.set_layer(args.layer, args.command == "enable")
            except KeyError:
                names = ", ".join(layer.name for layer in layers.LAYERS)
                raise UsageError(f"unknown layer {args.layer!r}; layers: {names}\nusage: {LINE_USAGE}") from None
            except ValueError as exc:
                raise UsageError(str(exc)) from None
            print(
                f"compile_cache: {layer.title} {args.command}d ({'.'.join(layer.switch or ('-', '-'))} = "
                f"{layer.switch_value()})"
            )
            return None
        if args.command == "hub":
            return self._hub(args.target)
        if args.command == "panel":
            try:
                from .panel import Panel
            except ImportError as exc:
                raise UsageError(f"the panel needs ipywidgets 8: pip install ipywidgets ({exc})") from None
            return Panel(session)
        raise UsageError(f"unknown subcommand {args.command!r}\nusage: {LINE_USAGE}")

    def _hub(self, target: str) -> Any:
        session = self.session
        if target == "off":
            session.hub_off, session.hub_url = True, None
            print("compile_cache: hub off for this session")
            return None
        if target != "status":
            if not target.startswith(("redis://", "rediss://", "unix://")):
                raise UsageError(f"not a Redis URL: {target!r}\nusage: {LINE_USAGE}")
            session.hub_off, session.hub_url = False, target
        print(report.hub_line(session.hub_status(force=True)))
        return None


def _valid(name: str) -> str:
    try:
        return check_name(name)
    except ValueError as exc:
        raise UsageError(f"{exc}\nusage: {LINE_USAGE}") from None
