"""Command line: `jupyter-compile-cache list | explain NAME | explain --notebook PATH | stats | rm NAME | gc
| export NAME FILE | import FILE | install-kernel | demo | hub ls|push|pull|rm|gc`
(also `python -m jupyter_compile_cache`).

A view over the same session, store and sources as the magics, for use outside notebooks (CI jobs, shells,
scripts), with the magics' words: `explain` (`show` is kept as another name for it), `--dry-run`, `--yes`.
Options go before or after the subcommand. Exit status: 0 done, 1 nothing by that name (or a removal that needs
--yes), 2 an error (bad input, an unreadable bundle, a hub that fails). Settings come from the same environment
variables as the magics (see jupyter_compile_cache.core.settings).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from .._version import __version__
from ..core.commands import COMMAND_ERRORS, Commands, version_named
from ..core.events import NoTeamSecret
from ..core.records import NotebookPlan, bundle_name, short_id
from ..core.session import CompileCacheSession
from ..units import count, human_bytes, speed
from . import arguments, store_commands, tables
from .reporter import TextReporter, TransferBar


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

    for name in store_commands.NAMES:
        aliases = ["show"] if name == "explain" else []
        store_commands.add_arguments(name, command(name, help=store_commands.HELP[name], aliases=aliases))
    export = command("export", help="write the newest version of NAME to one file")
    export.add_argument("name")
    export.add_argument("file")
    command("import", help="add a bundle file made by export").add_argument("file")
    demo = command("demo", help="the quick start, then a kernel restart, in real kernels (about a minute)")
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
    hub = command("hub", help="the shared hub (Redis or a folder): ls | push NAME | pull NAME | rm NAME | gc")

    def hub_options(parser: argparse.ArgumentParser, default: Any) -> None:
        parser.add_argument(
            "--hub",
            dest="hub_url",
            type=arguments.hub_url,
            default=default,
            help="redis://[user:password@]host:port/db or file:///shared/folder (default: $JUPYTER_COMPILE_CACHE_HUB)",
        )
        parser.add_argument(
            "--namespace",
            type=arguments.namespace,
            default=default,
            help="default: $JUPYTER_COMPILE_CACHE_NAMESPACE or 'default'",
        )

    hub_options(hub, None)
    hub_sub = hub.add_subparsers(dest="hub_command", required=True, metavar="HUB_COMMAND")

    def hub_command(name: str, **kwargs: Any) -> argparse.ArgumentParser:
        cmd = hub_sub.add_parser(name, **kwargs)
        hub_options(cmd, argparse.SUPPRESS)
        cmd.add_argument("--store", dest="store_dir", metavar="DIR", default=argparse.SUPPRESS, help=store_help)
        return cmd

    hub_command("ls", help="bundles on the hub").add_argument("--json", action="store_true", help="the records as JSON")
    hub_push = hub_command("push", help="push the newest version of NAME")
    hub_push.add_argument("name")
    hub_push.add_argument(  # only a push makes something that lives
        "--ttl", type=arguments.ttl_seconds, default=None, help="seconds the pushed bundle lives on the hub"
    )
    hub_command("pull", help="pull the newest version of NAME").add_argument("name")
    hub_rm = hub_command("rm", help="delete NAME from the hub (every version needs --yes)")
    hub_rm.add_argument("name")
    hub_rm.add_argument("--version", default=None, help="only this version")
    hub_rm.add_argument("--dry-run", action="store_true", help="say what would go, remove nothing")
    hub_rm.add_argument("--yes", action="store_true", help="needed to delete every version of NAME")
    hub_gc = hub_command("gc", help="keep the newest versions of each name and machine, delete the rest")
    hub_gc.add_argument(
        "--keep",
        type=arguments.keep_versions,
        default=3,
        metavar="N",
        help="versions kept per name and machine (1 or more; default 3)",
    )
    hub_gc.add_argument("--dry-run", action="store_true", help="say what would go, remove nothing")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(store_commands.words(list(sys.argv[1:] if argv is None else argv)))
    if args.command == "install-kernel":
        return _install_kernel(args)
    if args.command == "demo":
        from . import demo

        try:
            demo.run(args.dir)
        except (RuntimeError, TimeoutError, OSError) as exc:
            print(f"error: the demo stopped: {exc}", file=sys.stderr)
            return 2
        return 0
    session = CompileCacheSession(store_dir=args.store_dir, reporter=TextReporter())
    commands = Commands(session)
    try:
        if args.command in store_commands.NAMES or args.command == "show":
            command = "explain" if args.command == "show" else args.command
            missing = store_commands.missing_store(commands, args)
            if missing:
                print(f"note: {missing}", file=sys.stderr)
            return _show(command, args, store_commands.run(commands, command, args))
        if args.command == "export":
            exported = commands.export(args.name, args.file)
            if exported is None:
                print(f"no bundle named {args.name!r} in {session.store().root}", file=sys.stderr)
                return 1
            print(f"exported {args.name!r} version {exported.version} to {args.file}")
        elif args.command == "import":
            imported = commands.import_file(args.file)
            m = imported.manifest
            state = "imported" if imported.new else "already in the store:"
            print(f"{state} {m.name!r} version {m.version} ({human_bytes(m.payload_bytes)})")
        elif args.command == "hub":
            return _hub_command(args, commands)
    except COMMAND_ERRORS as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def _show(command: str, args: argparse.Namespace, record: Any) -> int:
    """A store command's record as text (or JSON with --json); 1 when NAME is not there or the removal needs --yes."""
    if isinstance(record, NotebookPlan):
        print(_json(store_commands.as_json(record)) if args.json else repr(tables.NotebookPlanView(record)))
    elif command in ("list", "explain", "stats") and args.json and (command != "explain" or record.versions):
        print(_json(store_commands.as_json(record)))
    elif command == "list":
        print(repr(tables.BundleTable(record)))
    elif command == "stats":
        print(repr(tables.StatsView(record)))
    elif command == "explain":
        if not record.versions:
            print(f"no bundle named {args.name!r} in {record.store_dir}", file=sys.stderr)
            return 1
        print(repr(tables.Explanation(record)))
    elif command == "rm" and not record.removals:
        print(f"no bundle named {args.name!r} in {record.where}", file=sys.stderr)
        return 1
    else:
        lines = tables.removal_lines(record.removals, record.where, record.dry_run)
        if record.refused:
            print("\n".join(lines[:-1]))
            print(f"{record.refused}: nothing removed; run again with --yes", file=sys.stderr)
            return 1
        print("\n".join(lines))
    return 0


def _json(data: object) -> str:
    return json.dumps(data, indent=1, default=str)


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
        return 2
    print(f"installed kernel spec {args.name or DEFAULT_KERNEL_NAME!r} in {path}")
    return 0


def _hub_command(args: argparse.Namespace, commands: Commands) -> int:
    hub = commands.hub(args.hub_url, args.namespace, getattr(args, "ttl", None))
    if hub is None:
        print(
            "error: no hub: pass --hub redis://host:port/0 (or file:///shared/folder) or set JUPYTER_COMPILE_CACHE_HUB",
            file=sys.stderr,
        )
        return 2
    store = commands.session.store()
    where = f"the hub {hub.display_url} namespace {hub.namespace!r}"
    if args.hub_command in ("push", "pull", "rm"):
        bundle_name(args.name)
    if args.hub_command == "ls":
        rows = commands.hub_bundles(hub)
        if args.json:
            print(_json(store_commands.as_json(rows)))
        else:
            print(where.removeprefix("the "))
            print(repr(tables.BundleTable(rows)))
    elif args.hub_command == "push":
        bar = TransferBar(f"pushing {args.name!r}", stream=sys.stderr)
        try:
            pushed = commands.hub_push(hub, args.name, bar)
        finally:
            bar.close()
        if pushed is None:
            print(f"no bundle named {args.name!r} in {store.root}", file=sys.stderr)
            return 1
        seconds = time.perf_counter() - bar.start
        print(
            f"pushed {args.name!r} version {pushed.version} ({human_bytes(pushed.payload_bytes)}, "
            f"{count(len(pushed.chunk_sha256 or []), 'chunk')}) to {hub.display_url} in {seconds:.2f} s "
            f"({speed(pushed.payload_bytes, seconds)})"
        )
    elif args.hub_command == "pull":
        if hub.hub.config.secret is None:  # as kernels say it: what is pulled is not verified as the team's
            print(f"warning: {NoTeamSecret().text()}", file=sys.stderr)
        found = commands.hub_pull(
            hub, args.name, lambda _source, m: TransferBar(f"pulling {m.name!r}", stream=sys.stderr)
        )
        local = found.manifest
        if local is None:
            reasons = "".join(f"\n  {line}" for line in found.skipped)
            lead = (
                f"wrong signature (another team's secret?): no version of {args.name!r} on the hub is signed with "
                "this JUPYTER_COMPILE_CACHE_SECRET"
                if found.wrong_signatures
                else f"no bundle named {args.name!r} on the hub matches this machine"
            )
            print(f"{lead}{reasons}", file=sys.stderr)
            return 1
        for line in found.skipped:
            print(f"skipped {line}", file=sys.stderr)
        # the speed of the transfer itself (find's fetch of this version), not of listing and checking first
        seconds = found.fetch_seconds
        print(
            f"pulled {args.name!r} version {short_id(local.version)} ({human_bytes(local.payload_bytes)}) into "
            f"{store.root} in {seconds:.2f} s ({speed(local.payload_bytes, seconds)})"
        )
    elif args.hub_command == "rm":
        try:
            version = version_named(args.name, [m.version for m in hub.versions(args.name)], args.version, where)
        except ValueError as exc:
            print(exc, file=sys.stderr)
            return 1
        plan = hub.remove(args.name, version, dry_run=True)
        if not plan:
            print(f"no bundle named {args.name!r} on {where}", file=sys.stderr)
            return 1
        everything = version is None or len(hub.versions(args.name)) <= len(plan)
        if everything and not (args.dry_run or args.yes):
            print("\n".join(tables.removal_lines(plan, where, dry_run=True)[:-1]))
            print(
                f"this removes every version of {args.name!r} from the team's hub: nothing removed; "
                "run again with --yes",
                file=sys.stderr,
            )
            return 1
        done = plan if args.dry_run else hub.remove(args.name, version)
        print("\n".join(tables.removal_lines(done, where, args.dry_run)))
    elif args.hub_command == "gc":
        print("\n".join(tables.removal_lines(hub.gc(args.keep, dry_run=args.dry_run), where, args.dry_run)))
    return 0
