"""The hub's commands, which the magic and the CLI share (`hub ls | check | push | pull | publish | rm | gc`): each
one's arguments are defined here once, and `run` turns them into core's `Commands` calls and returns the record, so
`%compile_cache hub push NAME` and `jupyter-compile-cache hub push NAME` take the same words and get the same records.
Each front end adds its own options (`--store`) and its own progress bars; frontends/render.py shows the records."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any, Protocol

from ..core.commands import Commands
from ..core.errors import NoHub
from ..core.events import NoTeamSecret
from ..core.options import RemoveOptions
from ..core.records import short_id
from . import arguments
from .event_wording import event_text
from .render import Record

NAMES = ("ls", "check", "push", "pull", "publish", "rm", "gc")
ALIASES = {"check": ["status"]}  # `hub status`: the name the magic has always had
HELP = {
    "ls": "bundles on the hub",
    "check": "try the hub: its answer, reading, writing and the team secret",
    "push": "push the newest version of NAME, or of every name (--all)",
    "pull": "pull the newest version of NAME",
    "publish": "write the local store's newest versions into DIR, to serve as a read-only https:// hub",
    "rm": "delete NAME from the hub (every version needs --yes)",
    "gc": "keep the newest versions of each name and machine, delete the rest",
}


class Bar(Protocol):
    def __call__(self, done: int, total: int) -> None: ...

    def close(self) -> None: ...


def add_hub_options(parser: argparse.ArgumentParser, default: Any) -> None:
    """--hub and --namespace, on `hub` itself (DEFAULT None) and on each of its commands (argparse.SUPPRESS: a value
    given before the command stays)."""
    parser.add_argument(
        "--hub",
        dest="hub_url",
        metavar="URL",
        type=arguments.hub_url,
        default=default,
        help="redis://[user:password@]host:port/db, s3://, gs://, az://bucket/prefix, https://host/path or "
        "file:///shared/folder (default: $JUPYTER_COMPILE_CACHE_HUB)",
    )
    parser.add_argument(
        "--namespace",
        metavar="NS",
        type=arguments.namespace,
        default=default,
        help="default: $JUPYTER_COMPILE_CACHE_NAMESPACE or 'default'",
    )


def add_commands(sub: Any, options: Callable[[argparse.ArgumentParser], object]) -> None:
    """The hub's commands on SUB (the `hub` parser's subparsers); OPTIONS adds a front end's own to each."""
    parsers = {}
    for name in NAMES:
        parsers[name] = cmd = sub.add_parser(name, help=HELP[name], aliases=ALIASES.get(name, []))
        add_hub_options(cmd, argparse.SUPPRESS)
        options(cmd)
    for name in ("ls", "check"):
        parsers[name].add_argument("--json", action="store_true", help="the record as JSON")
    pushing = parsers["push"].add_mutually_exclusive_group(required=True)
    pushing.add_argument("name", metavar="NAME", nargs="?")
    pushing.add_argument("--all", action="store_true", help="every name whose newest local version the hub lacks")
    parsers["push"].add_argument(  # only a push makes something that lives
        "--ttl", type=arguments.ttl_seconds, default=None, help="seconds the pushed bundle lives on the hub"
    )
    parsers["pull"].add_argument("name", metavar="NAME")
    parsers["publish"].add_argument("dir", metavar="DIR")
    parsers["rm"].add_argument("name", metavar="NAME")
    parsers["rm"].add_argument("--version", default=None, help="only this version")
    parsers["rm"].add_argument("--dry-run", action="store_true", help="say what would go, remove nothing")
    parsers["rm"].add_argument("--yes", action="store_true", help="needed to delete every version of NAME")
    parsers["gc"].add_argument(
        "--keep",
        type=arguments.keep_versions,
        default=3,
        metavar="N",
        help="versions kept per name and machine (1 or more; default 3)",
    )
    parsers["gc"].add_argument("--dry-run", action="store_true", help="say what would go, remove nothing")


def command_of(args: argparse.Namespace) -> str:
    """The command ARGS ask for, an alias taken to its name."""
    return next((name for name, aliases in ALIASES.items() if args.hub_command in aliases), args.hub_command)


def run(commands: Commands, args: argparse.Namespace, bar: Callable[[str], Bar]) -> Record:
    """The record of the hub command ARGS ask for; BAR(label) gives a transfer's progress display, closed when its
    transfer ends. NoHub where no hub is named or set; the hub's failures are raised (HubError)."""
    shown: list[Bar] = []

    def bar_for(label: str) -> Bar:  # one at a time: the last one closed as the next starts
        for done in shown:
            done.close()
        shown[:] = [bar(label)]
        return shown[0]

    name = command_of(args)
    store_dir = getattr(args, "store_dir", None)
    try:
        if name == "publish":
            return commands.publish(args.dir, lambda bundle: bar_for(f"pushing {bundle!r}"), store_dir)
        hub = commands.hub(args.hub_url, args.namespace, getattr(args, "ttl", None))
        if hub is None:
            raise NoHub()
        if name == "check":
            return commands.hub_check(hub)
        if name == "ls":
            return commands.hub_bundles(hub)
        if name == "push" and args.all:
            return commands.push_all(hub, lambda bundle: bar_for(f"pushing {bundle!r}"), store_dir)
        if name == "push":
            return commands.push(args.name, hub, bar_for(f"pushing {args.name!r}"), store_dir)
        if name == "pull":
            if hub.hub.config.secret is None:  # as kernels say it: what is pulled is not verified as the team's
                print(f"warning: {event_text(NoTeamSecret())}", file=sys.stderr)
            return commands.hub_pull(hub, args.name, lambda _source, m: bar_for(f"pulling {m.name!r}"), store_dir)
        if name == "rm":
            return commands.remove(RemoveOptions(args.name, args.version, args.dry_run), hub, yes=args.yes)
        return commands.hub_gc(
            hub, args.keep, args.dry_run, lambda m: bar_for(f"{m.name!r} {short_id(m.version)}: torch's build aids out")
        )
    finally:
        for done in shown:
            done.close()
