"""Command line: `jupyter-compile-cache list | explain NAME | explain --notebook PATH | stats | rm NAME | gc
| export NAME FILE | import FILE | run NAME -- COMMAND... | install-kernel | demo | hub ls|push|pull|rm|gc`
(also `python -m jupyter_compile_cache`).

`run NAME -- COMMAND...` is a `%%compile_cache NAME` cell around any command line (`torchrun --nproc_per_node 8
train.py`, a script, a scheduler's job step): NAME is restored (local store, then the hub) into torch's cache dirs,
which the command's processes inherit, and what they compiled is saved (and pushed) after it. A local restore runs
while the command starts: its processes start Python and import torch before they look anything up (one that looks
sooner compiles, as it would without us). Through a hub the restore comes first, since the hub's single flight
decides before the command which node compiles. Its exit status is the command's; our lines go to stderr.

A view over the same session, store and sources as the magics, for use outside notebooks (CI jobs, shells,
scripts), with the magics' words: `explain` (`show` is kept as another name for it), `--dry-run`, `--yes`.
Options go before or after the subcommand. Settings come from the same environment variables as the magics (see
jupyter_compile_cache.core.settings).

Exit status, one meaning each:

    0  done
    1  not found: no bundle, version or file by that name
    2  usage: a bad option or value (argparse's own code)
    3  refused: a removal that needs --yes (the plan is shown, nothing removed)
    4  the hub failed: unreachable, timed out, refused this user, or its client library is missing
    5  any other error: a damaged bundle file, a disk that cannot take it
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from .._version import __version__
from ..core.commands import COMMAND_ERRORS, Commands
from ..core.errors import HubError, NotFound, NothingFits
from ..core.records import HubCheck
from ..core.store_session import StoreSession
from . import arguments, hub_commands, render, store_commands, wording
from .reporter import TextReporter, TransferBar

OK, NOT_FOUND, USAGE, REFUSED, HUB_FAILED, ERROR = 0, 1, 2, 3, 4, 5


def _parser() -> argparse.ArgumentParser:
    p = arguments.Parser(prog="jupyter-compile-cache", description="Inspect and manage compile-cache bundles.")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    store_help = "local store directory (default: $JUPYTER_COMPILE_CACHE_DIR or the user cache)"
    p.add_argument("--store", dest="store_dir", metavar="DIR", help=store_help)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, **kwargs: Any) -> argparse.ArgumentParser:
        cmd = sub.add_parser(name, **kwargs)
        # also after the subcommand; SUPPRESS keeps a --store given before it
        cmd.add_argument("--store", dest="store_dir", metavar="DIR", default=argparse.SUPPRESS, help=store_help)
        return cmd

    # `show` is explain's old name; `status`, in a shell, is the configuration (in a kernel it adds the kernel's own)
    aliases = {"explain": ["show"], "config": ["status"]}
    for name in store_commands.NAMES:
        cmd = command(name, help=store_commands.HELP[name], aliases=aliases.get(name, []))
        store_commands.add_arguments(name, cmd)
    job = command(
        "run",
        help="run COMMAND with NAME restored into torch's caches before and what it compiled saved after",
        usage="%(prog)s NAME [--hub URL] [--namespace NS] [--no-hub] [--no-save] [--precompile-processes] -- COMMAND "
        "[ARG ...]",
    )
    job.add_argument("name", metavar="NAME")
    job.add_argument("--no-hub", action="store_true", help="the local store only")
    job.add_argument("--no-save", action="store_true", help="restore only")
    job.add_argument(
        "--precompile-processes",
        action="store_true",
        help="the command's processes load and save Dynamo precompile entries too (they trace nothing restored)",
    )
    demo = command("demo", help="the quick start, then a kernel restart, in real kernels (about 40 s on 2 cores)")
    demo.add_argument("--dir", default=None, help="keep the demo's store and caches in DIR (default: a temp folder)")
    kernel = command(
        "install-kernel",
        help="install the warm kernel: each start is forked from a process that has torch and its compiler loaded",
    )
    kernel.add_argument("--name", default=None, help="kernel spec name (default: python3-compile-cache)")
    kernel.add_argument("--display-name", default=None, help="name shown in the launcher")
    where = kernel.add_mutually_exclusive_group()
    where.add_argument("--user", action="store_true", help="for this user only")
    where.add_argument("--sys-prefix", action="store_true", help="into this Python environment (sys.prefix)")
    where.add_argument("--prefix", metavar="DIR", default=None, help="under DIR/share/jupyter/kernels")
    hub = command("hub", help="the shared hub: " + " | ".join(hub_commands.NAMES))
    hub_commands.add_hub_options(hub, None)
    hub_commands.add_hub_options(job, None)
    hub_commands.add_commands(
        hub.add_subparsers(dest="hub_command", required=True, metavar="HUB_COMMAND"),
        lambda cmd: cmd.add_argument(
            "--store", dest="store_dir", metavar="DIR", default=argparse.SUPPRESS, help=store_help
        ),
    )
    return p


def _command_first(parser: argparse.ArgumentParser, words: list[str]) -> list[str]:
    """WORDS with the options given before the command (`--json list`, `--hub URL hub pull NAME`) moved to its end,
    where every command takes them: the README's "options before or after the command"."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    commands: dict[str, argparse.ArgumentParser] = dict(sub.choices)
    parsers = [parser, *commands.values()]
    for command in list(commands.values()):  # the hub's commands, one level down
        nested = [a for a in command._actions if isinstance(a, argparse._SubParsersAction)]
        parsers += [p for a in nested for p in a.choices.values()]
    valued = {o for p in parsers for a in p._actions if a.nargs != 0 and a.option_strings for o in a.option_strings}
    at = 0
    while at < len(words) and words[at].startswith("-") and words[at] != "--":
        at += 2 if words[at] in valued else 1
    if at == 0 or at >= len(words) or words[at] not in commands:
        return words
    return words[at:] + words[:at]


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    job: list[str] = []
    if "run" in words and "--" in words[words.index("run") :]:  # the command line is the job's, untouched
        cut = words.index("--", words.index("run"))
        words, job = words[:cut], words[cut + 1 :]
    parser = _parser()
    args = parser.parse_args(store_commands.words(_command_first(parser, words)))
    if args.command == "run":
        if not job:
            print(f"usage: {_usage(parser, 'run')}\nerror: no command to run: put it after --", file=sys.stderr)
            return USAGE
        return _run_job(args, job)
    if args.command == "install-kernel":
        return _install_kernel(args)
    if args.command == "demo":
        from . import demo

        try:
            demo.run(args.dir)
        except (RuntimeError, TimeoutError, OSError) as exc:
            print(f"error: the demo stopped: {exc}", file=sys.stderr)
            return ERROR
        return OK
    session = StoreSession(store_dir=args.store_dir, reporter=TextReporter())  # no cell runs: nothing of torch's side
    commands = Commands(session)
    try:
        if args.command in store_commands.NAMES or args.command in ("show", "status"):
            command = {"show": "explain", "status": "config"}.get(args.command, args.command)
            missing = store_commands.missing_store(commands, args)
            if missing:
                print(f"note: {missing}", file=sys.stderr)
            record = store_commands.run(commands, command, args)
            status = _show(record, getattr(args, "json", False))
            if command == "list" and session.hub_policy.failed_here(args.hub_url):  # the local part was listed
                return HUB_FAILED
            return status
        if args.command == "hub":
            return _hub_command(args, commands)
    except NotFound as exc:  # nothing by that name: exit status 1, as grep's
        print(render.not_found(exc), file=sys.stderr)
        # versions there, none of them signed with this secret: no bundle we can trust, not a name that is not there
        return ERROR if isinstance(exc, NothingFits) and exc.wrong_signatures else NOT_FOUND
    except FileNotFoundError as exc:
        print(f"error: no such file: {exc.filename}", file=sys.stderr)
        return NOT_FOUND
    except HubError as exc:
        print(f"error: {exc}", file=sys.stderr)
        advice = _hub_advice(str(exc))
        if advice:
            print(f"  {advice}", file=sys.stderr)
        return HUB_FAILED
    except ValueError as exc:  # a bad name, an ambiguous version id, no hub: the input, said with what to type
        print(f"error: {wording.error_text(exc)}", file=sys.stderr)
        return USAGE
    except COMMAND_ERRORS as exc:
        print(f"error: {wording.error_text(exc)}", file=sys.stderr)
        return ERROR
    return OK


def _usage(parser: argparse.ArgumentParser, command: str) -> str:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:
            return action.choices[command].format_usage().removeprefix("usage: ").strip()
    return parser.format_usage().strip()


def _run_job(args: argparse.Namespace, job: list[str]) -> int:
    """COMMAND inside a cell of NAME: the command's own exit status (127: it could not be started). Whatever our
    part meets (a hub down, a bundle for another machine), the command runs, and the line says why."""
    import subprocess

    from ..core.options import CellOptions
    from ..core.session import CompileCacheSession

    session = CompileCacheSession(store_dir=args.store_dir, reporter=TextReporter(out=sys.stderr))
    options = CellOptions(
        store_dir=args.store_dir,
        hub=args.hub_url,
        namespace=args.namespace,
        no_hub=args.no_hub,
        save=not args.no_save,
        precompile=False,  # this process compiles nothing: its children trace their own
        compiles_here=False,
        restore_beside_body=True,  # the job's processes start (Python, torch) while the restore runs
        precompile_processes=args.precompile_processes,
    )
    status = 0
    try:
        with session.cell(args.name, options) as report:
            try:
                status = subprocess.call(job)
            except OSError as exc:  # no such program: said, and nothing is saved
                print(f"error: could not start {job[0]!r}: {exc.strerror or exc}", file=sys.stderr)
                status = 127
            report.job_status = status  # the cell's line is the command's
            if status != 0:
                raise _JobFailed(status)
    except _JobFailed:
        pass
    except ValueError as exc:  # a bad NAME
        print(f"error: {exc}", file=sys.stderr)
        return USAGE
    finally:
        session.close()
    return status


class _JobFailed(Exception):
    """The command failed: the cell ends as a failed one (nothing saved)."""


def _hub_advice(message: str) -> str | None:
    """What to check when the hub failed, from the client's words (a host that does not resolve, a port that
    refuses, no answer in time)."""
    lowered = message.lower()
    where = "the hub URL (--hub, or $JUPYTER_COMPILE_CACHE_HUB)"
    if "name or service not known" in lowered or "nodename nor servname" in lowered or "name resolution" in lowered:
        return f"the host name does not resolve: check {where}"
    if "connection refused" in lowered or "refused the connection" in lowered:
        return f"nothing answers at that address: is the server running, and is the port in {where} right?"
    if "timeout" in lowered or "timed out" in lowered or "did not answer" in lowered:
        return (
            "no answer in time: check the network to it, or give it longer "
            "($JUPYTER_COMPILE_CACHE_HUB_CONNECT_TIMEOUT, $JUPYTER_COMPILE_CACHE_HUB_TIMEOUT)"
        )
    return None


def _show(record: render.Record, as_json: bool = False) -> int:
    """A command's record as text on stdout (JSON with --json); a change refused on purpose prints its plan, says
    why on stderr, and is exit status 3."""
    if as_json:
        print(json.dumps(render.as_json(record), indent=1, default=str))
        return OK
    print(repr(render.view(record)))
    refused = render.refusal(record)
    if refused:
        print(refused, file=sys.stderr)
        return REFUSED
    return OK


def run() -> int:
    """The console script: like other command-line tools, a reader that closes the pipe (`list | head`) ends us
    quietly (SIGPIPE's default), not with a traceback or an error."""
    import signal

    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    return main()


def _install_kernel(args: argparse.Namespace) -> int:
    from ..kernels.warm_kernel import DEFAULT_DISPLAY_NAME, DEFAULT_KERNEL_NAME, install_kernel_spec

    prefix = sys.prefix if args.sys_prefix else args.prefix
    try:
        path = install_kernel_spec(
            args.name or DEFAULT_KERNEL_NAME, args.display_name or DEFAULT_DISPLAY_NAME, args.user, prefix
        )
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ERROR
    print(f"installed kernel spec {args.name or DEFAULT_KERNEL_NAME!r} in {path}")
    print("its first start warms up a template; a Jupyter server of this environment starts one as it starts")
    return OK


def _hub_command(args: argparse.Namespace, commands: Commands) -> int:
    record = hub_commands.run(commands, args, lambda label: TransferBar(label, stream=sys.stderr))
    status = _show(record, getattr(args, "json", False))
    if isinstance(record, HubCheck) and (record.state.reachable is False or record.read is not None):
        return HUB_FAILED  # what it found is shown: the hub cannot be used
    return status
