"""The IPython magics: argument parsing and display only; the work is done by CompileCacheSession.

The usage lines and the magics' help (`%%compile_cache?`) are generated from the parsers below.
"""

from __future__ import annotations

import ast
import shlex
import sys
from collections.abc import Callable
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from traitlets import TraitError

from ..core.commands import Commands
from ..core.errors import NotFound
from ..core.notebook import notebook_path
from ..core.session import CompileCacheSession
from . import hub_commands, render, store_commands, tables, wording
from .cell_line import Parser, cell_parser, parse_cell_line
from .reporter import TransferBar


class _LineParser(Parser):
    """A sub-command's parser: its errors quote the whole line magic's usage."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, usage_line=line_usage, **kwargs)


def line_parser() -> Parser:
    p = Parser(prog="%compile_cache", description="Inspect and manage the caches.", usage_line=line_usage)
    sub = p.add_subparsers(dest="command", parser_class=_LineParser, metavar="COMMAND")
    p.subcommands["status"] = sub.add_parser(
        "status", help="per-layer table: switches, entries on disk, this kernel's hits and misses"
    )
    p.subcommands["status"].add_argument("--json", action="store_true", help="the record as JSON (a dict)")
    for command in store_commands.NAMES:
        cmd = p.subcommands[command] = sub.add_parser(command, help=store_commands.HELP[command])
        cmd.add_argument("--store", dest="store_dir", metavar="DIR", default=None)
        store_commands.add_arguments(command, cmd)
    for command in ("enable", "disable"):
        cmd = p.subcommands[command] = sub.add_parser(command, help=f"{command} one of torch's cache layers")
        cmd.add_argument("layer", metavar="LAYER")
    cmd = p.subcommands["hub"] = sub.add_parser("hub", help="set the hub (URL), turn it off, or use it")
    hub_commands.add_hub_options(cmd, None)
    words = "|".join(["URL", "off", "status", *(n for n in hub_commands.NAMES if n != "check")])
    hub_sub = cmd.add_subparsers(dest="hub_command", parser_class=_LineParser, metavar=words)
    hub_commands.add_commands(hub_sub, lambda c: c.add_argument("--store", dest="store_dir", metavar="DIR"))
    # the kernel's own: which hub this session uses (a shell names it with --hub or the variable)
    hub_sub.add_parser("set", help="use the hub at URL in this session, if it answers").add_argument("url")
    hub_sub.add_parser("off", help="no hub in this session")
    p.subcommands["panel"] = sub.add_parser("panel", help="the ipywidgets panel")
    return p


def cell_usage() -> str:
    return cell_parser().usage_line()


def line_usage() -> str:
    """One sub-command a line (`%compile_cache status [--json]`, `%compile_cache list ...`), from the sub-parsers;
    lines after the first are indented under the first, after `usage: `."""
    commands = [sp.format_usage().strip().removeprefix("usage: ") for sp in _subcommands().values()]
    return "\n       ".join(" ".join(c.split()) for c in commands)


def _asks_help(words: list[str]) -> bool:
    return bool({"-h", "--help"} & set(words)) or words == ["help"]


def _subcommands() -> dict[str, Parser]:
    return line_parser().subcommands


def _subcommand_help(name: str) -> str:
    p = _subcommands()[name]
    _usage, _, rest = p.format_help().partition("\n\n")
    return f"usage: {p.format_usage().strip().removeprefix('usage: ')}\n\n{rest}".rstrip()


def _split(line: str, usage: Callable[[], str]) -> list[str]:
    try:
        return shlex.split(line)
    except ValueError as exc:
        raise UsageError(f"{exc}\nusage: {usage()}") from None


def _with_help(parser: Callable[[], Parser]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The magic's docstring (`%%compile_cache?`) is its parser's help, headed by the one-line usage."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        p = parser()
        _usage, _, rest = p.format_help().partition("\n\n")
        fn.__doc__ = f"usage: {p.usage_line()}\n\n{rest}"
        return fn

    return decorate


@magics_class
class CompileCacheMagics(Magics):
    def __init__(self, shell: Any, session: CompileCacheSession) -> None:
        super().__init__(shell)
        self.session = session

    @cell_magic
    @_with_help(cell_parser)
    def compile_cache(self, line: str, cell: str) -> Any:
        if _asks_help(_split(line, cell_usage)):
            print(self.compile_cache.__doc__)  # the help only: the cell does not run
            return None
        try:
            name, options = parse_cell_line(line, cell)
        except ValueError as exc:  # what is wrong, with the usage
            raise UsageError(str(exc)) from None
        __tracebackhide__ = True  # noqa: F841  (IPython hides this frame from the user's traceback)
        with self.session.cell(name, options):
            return self._run_body(cell)

    def _run_body(self, cell: str) -> Any:
        """Run the cell as IPython does (its exception propagates unchanged, once); return the last expression. The
        source is registered with IPython's compiler cache, so `inspect.getsource` (which Dynamo uses) finds the cell's
        code."""
        __tracebackhide__ = True  # noqa: F841
        shell: Any = self.shell
        source = shell.transform_cell(cell)
        filename = shell.compile.cache(source)
        tree = ast.parse(source, filename=filename)
        last_expr = None
        last = tree.body[-1] if tree.body else None
        if isinstance(last, ast.Expr):
            tree.body.pop()
            last_expr = ast.Expression(last.value)
        exec(shell.compile(tree, filename, "exec"), shell.user_global_ns, shell.user_ns)
        if last_expr is not None:
            return eval(shell.compile(last_expr, filename, "eval"), shell.user_global_ns, shell.user_ns)
        return None

    @line_magic("compile_cache")
    @_with_help(line_parser)
    def compile_cache_line(self, line: str) -> Any:
        words = _split(line, line_usage)
        if _asks_help(words):
            print(_subcommand_help(words[0]) if words[0] in _subcommands() else self.compile_cache_line.__doc__)
            return None
        args = line_parser().parse_args(store_commands.words(_hub_words(words)))
        session = self.session
        commands = Commands(session)
        if args.command in (None, "status"):
            return _show(commands.status(), getattr(args, "json", False))
        if args.command == "explain" and args.name is None and args.notebook is None:
            args.notebook = notebook_path(getattr(self.shell, "user_ns", None))  # this kernel's own, when known
            if args.notebook is None:
                raise UsageError(
                    "explain needs a NAME, or --notebook PATH: this kernel does not know its notebook (no "
                    "JPY_SESSION_NAME from a Jupyter server, no __vsc_ipynb_file__ from VS Code)\n"
                    f"usage: {line_usage()}"
                )
        if args.command in store_commands.NAMES:
            missing = store_commands.missing_store(commands, args)
            if missing:
                print(f"compile_cache: {missing}")
            try:
                record = store_commands.run(commands, args.command, args)
            except NotFound as exc:
                raise UsageError(render.not_found(exc)) from None
            except ValueError as exc:  # a bad name or version, no hub: said with the usage
                raise UsageError(f"{wording.error_text(exc)}\nusage: {line_usage()}") from None
            except OSError as exc:  # no such notebook, a file that is none, a store that cannot be read
                raise UsageError(wording.error_text(exc)) from None
            return _show(record, getattr(args, "json", False))
        if args.command in ("enable", "disable"):
            try:
                layer = commands.set_layer(args.layer, args.command == "enable")
            except KeyError:
                names = ", ".join(commands.layer_names())
                raise UsageError(f"unknown layer {args.layer!r}; layers: {names}\nusage: {line_usage()}") from None
            except ValueError as exc:
                raise UsageError(str(exc)) from None
            print(f"compile_cache: {render.switch_line(layer, commands.switch_scope(layer))}")
            return None
        if args.command == "hub":
            return self._hub(args, commands)
        if args.command == "panel":
            from .panel import Panel

            try:
                return Panel(session)
            except ImportError as exc:  # ipywidgets missing: the message names the extra
                raise UsageError(str(exc)) from None
        raise UsageError(f"unknown subcommand {args.command!r}\nusage: {line_usage()}")

    def _hub(self, args: Any, commands: Commands) -> Any:
        """`hub URL` and `hub off` set CompileCache.hub for this session (as `%config` would), a URL only if it
        answers; the hub's commands (`hub ls`, `hub push NAME`, ...) as the CLI's."""
        settings = self.session.settings
        if args.hub_command == "off":
            settings.hub = ""
            print("compile_cache: hub off for this session")
            return None
        if args.hub_command != "set":
            try:
                record = hub_commands.run(commands, args, lambda label: TransferBar(label))
            except NotFound as exc:
                raise UsageError(render.not_found(exc)) from None
            except ValueError as exc:  # no hub, a bad name: said with the usage
                raise UsageError(f"{wording.error_text(exc)}\nusage: {line_usage()}") from None
            return _show(record, getattr(args, "json", False))
        previous = settings.hub
        try:
            settings.hub = args.url
        except TraitError as exc:
            raise UsageError(f"{exc}\nusage: {line_usage()}") from None
        state = commands.hub_state()
        if state.reachable is False:  # a hub no cell could use: the one before stays
            settings.hub = previous
            print(f"compile_cache: warning: {wording.hub_not_set(state, previous)}", file=sys.stderr)
            return None
        return _show(state, False)


def _hub_words(words: list[str]) -> list[str]:
    """`hub URL` is `hub set URL`, and `hub` alone `hub status` (the words the magic has always taken)."""
    if words[:1] != ["hub"]:
        return words
    rest, skip = [], False
    for word in words[1:]:  # the words that are not options, nor the values of --hub, --namespace, --store
        if skip or word.startswith("-"):
            skip = not skip and word in ("--hub", "--namespace", "--store")
            continue
        rest.append(word)
    known = {*hub_commands.NAMES, *(a for names in hub_commands.ALIASES.values() for a in names), "set", "off"}
    if not rest:
        return [*words, "status"]
    if rest[0] not in known:
        at = words.index(rest[0])
        return [*words[:at], "set", *words[at:]]
    return words


def _show(record: render.Record, as_json: bool) -> Any:
    """A command's record in a notebook: JSON-ready data with --json, else its table (the cell's output); lines are
    printed, and a change refused on purpose is a usage error after its plan."""
    if as_json:
        return render.as_json(record)
    shown = render.view(record)
    refused = render.refusal(record)
    if refused:
        raise UsageError(f"{shown!r}\n{refused}")
    if isinstance(shown, tables.Lines):
        print(f"compile_cache: {shown!r}")
        return None
    return shown
