"""The commands on the local store that the magic and the CLI share (`list`, `explain`, `rm`, `gc`, `stats`,
`export`, `import`, `config`): each
one's arguments are defined here once, and `run` turns them into the typed options core's `Commands` take and
returns its record, so `%compile_cache gc ...` and `jupyter-compile-cache gc ...` take the same words and get the
same records. Each front end adds `--store` its own way; frontends/render.py shows the records for both."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

from ..core.commands import Commands
from ..core.options import GcOptions, RemoveOptions
from ..core.plans import NotebookPlan
from ..core.records import BundleExplanation, BundleRow
from . import arguments
from .render import Record

NAMES = ("list", "explain", "rm", "gc", "stats", "export", "import", "config")

HELP = {
    "list": "bundles here and on the hub, with a total",
    "explain": "why NAME would or would not restore here, and its last run; with no NAME, the notebook's cells",
    "rm": "delete NAME from the local store (every version)",
    "gc": "evict old, unusable or least recently used versions",
    "stats": "what the cells that used the store did: restores, hits, time saved, size",
    "export": "write the newest version of NAME to one file",
    "import": "add a bundle file made by export",
    "config": "the settings in force and where each came from, the store, the warm templates",
}


def add_arguments(command: str, parser: argparse.ArgumentParser) -> None:
    """COMMAND's own arguments (not --store) on PARSER."""
    if command == "explain":
        parser.add_argument("name", metavar="NAME", nargs="?", default=None)
        parser.add_argument(
            "--notebook",
            metavar="PATH",
            default=None,
            help="which of this notebook's %%%%compile_cache cells Run All will restore here, and why not "
            "(in a kernel, its own notebook when NAME is left out)",
        )
    if command in ("rm", "export"):
        parser.add_argument("name", metavar="NAME")
    if command in ("export", "import"):
        parser.add_argument("file", metavar="FILE")
    if command in ("list", "explain", "stats", "config"):  # the read commands
        parser.add_argument("--json", action="store_true", help="the records as JSON (a list or dict in a notebook)")
    if command == "list":  # the hub's bundles too: which hub, as every command that reaches one says it
        parser.add_argument(
            "--hub",
            dest="hub_url",
            metavar="URL",
            type=arguments.hub_url,
            default=None,
            help="redis://..., s3://bucket/prefix or file:///shared/folder (default: the configured hub)",
        )
        parser.add_argument(
            "--namespace", type=arguments.namespace, default=None, help="the hub's namespace (default: the configured)"
        )
    if command == "rm":
        parser.add_argument("--version", metavar="ID", default=None, help="only this version (an id, or its prefix)")
        parser.add_argument("--dry-run", action="store_true", help="say what would go, remove nothing")
    elif command == "gc":
        parser.add_argument(
            "--max-size",
            metavar="SIZE",
            type=arguments.size,
            default=None,
            help="evict the least recently used down to SIZE (default, when no other rule is given: "
            "CompileCache.max_size, $JUPYTER_COMPILE_CACHE_MAX_SIZE, 20G)",
        )
        parser.add_argument(
            "--older-than", metavar="AGE", type=arguments.age, help="evict versions unused for AGE (30d, 12h)"
        )
        parser.add_argument(
            "--incompatible", action="store_true", help="evict versions that cannot restore on this machine"
        )
        parser.add_argument("--dry-run", action="store_true", help="say what would go, remove nothing")
        parser.add_argument("--yes", action="store_true", help="needed when gc would empty the store")
    elif command == "stats":
        parser.add_argument("--zero", action="store_true", help="start the statistics again (shows them first)")


VALUED = ("--max-size", "--older-than", "--version")  # options whose value may look like an option ("-5G")


def words(words: list[str]) -> list[str]:
    """WORDS with a value that starts with '-' joined to its option (`--max-size -5G` -> `--max-size=-5G`), so a
    bad value is told what a value looks like instead of argparse's "expected one argument"."""
    out: list[str] = []
    for word in words:
        if out and out[-1] in VALUED and word[:1] == "-" and word[1:2].isdigit():
            out[-1] = f"{out[-1]}={word}"
        else:
            out.append(word)
    return out


def missing_store(commands: Commands, args: argparse.Namespace) -> str | None:
    """A line saying the store folder a command names (`--store DIR`) does not exist, or None: a typo in DIR must not
    read silently as an empty store."""
    named = getattr(args, "store_dir", None)
    if named is None or getattr(args, "command", None) == "import":  # an import makes the store it names
        return None
    root = commands.session.store(named).root
    return None if os.path.isdir(root) else f"no store at {root} (nothing was saved there): an empty store"


def _list(commands: Commands, args: argparse.Namespace, store_dir: str | None) -> list[BundleRow]:
    down = commands.session.hub_policy.down_url()  # before: a failure now is told by the listing itself
    rows = commands.bundles(store_dir, hub_url=args.hub_url, namespace=args.namespace)
    if down is not None:  # the hub failed a moment ago and is left alone: the rows are the local store's only
        commands.session.warn(f"the hub {down} did not answer a moment ago: only local bundles listed")
    return rows


def _explain(commands: Commands, args: argparse.Namespace, store_dir: str | None) -> BundleExplanation | NotebookPlan:
    if args.name is not None:
        if args.notebook is not None:
            raise ValueError("explain takes a NAME or --notebook PATH, not both")
        return commands.explain(args.name, store_dir)
    if args.notebook is None:
        raise ValueError("explain needs a NAME, or --notebook PATH")
    from .cell_line import parse_cell_line  # the magic's own parser, for the notebook's cells

    return commands.notebook_plan(args.notebook, parse_cell_line)


_RUN: dict[str, Callable[[Commands, argparse.Namespace, str | None], Record]] = {
    "list": lambda commands, args, store_dir: _list(commands, args, store_dir),
    "explain": lambda commands, args, store_dir: _explain(commands, args, store_dir),
    "rm": lambda commands, args, store_dir: commands.remove(
        RemoveOptions(args.name, args.version, args.dry_run, store_dir)
    ),
    "gc": lambda commands, args, store_dir: commands.gc(
        GcOptions(store_dir, args.max_size, args.older_than, args.incompatible, args.dry_run, args.yes)
    ),
    "stats": lambda commands, args, store_dir: commands.stats(store_dir, zero=args.zero),
    "export": lambda commands, args, store_dir: commands.export(args.name, args.file, store_dir),
    "import": lambda commands, args, store_dir: commands.import_file(args.file, store_dir),
    "config": lambda commands, args, store_dir: commands.config(store_dir),
}


def run(commands: Commands, command: str, args: argparse.Namespace) -> Record:
    """COMMAND's record for the parsed ARGS (BundleRows, a BundleExplanation or NotebookPlan, Removed,
    StoreStatistics), for frontends/render.py to show; NotFound when NAME is not there."""
    return _RUN[command](commands, args, getattr(args, "store_dir", None))
