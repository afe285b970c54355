"""argparse pieces shared by the magics and the CLI: a parser that takes no abbreviations and suggests the nearest
option on a typo, and types that refuse a bad value with a message that says the rule (argparse puts the option's
name in front of it: "argument --ttl: must be ...")."""

from __future__ import annotations

import argparse
import difflib
import math
import re
from typing import Any, NoReturn

from ..core.options import hub_url as check_hub_url
from ..core.options import namespace as check_namespace
from ..units import parse_age, parse_size

USAGE_WIDTH = 100  # usage lines are wrapped here: they are quoted in every error


class Parser(argparse.ArgumentParser):
    """argparse without abbreviations (`--no-restor` is a typo, not `--no-restore`), whose errors suggest the
    nearest option or command ("did you mean --no-restore?") and whose usage wraps at USAGE_WIDTH."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("formatter_class", lambda prog: argparse.HelpFormatter(prog, width=USAGE_WIDTH))
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        super().error(with_suggestion(message, self))


def _options(parser: argparse.ArgumentParser, command: str = "") -> dict[str, list[str]]:
    """Every option string of PARSER and of its sub-commands' parsers (unknown words reach the top parser), each with
    the commands that take it."""
    out: dict[str, list[str]] = {}
    for action in parser._actions:
        for option in action.option_strings:
            if option.startswith("--"):
                out.setdefault(option, []).append(command)
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if name == sub.prog.split()[-1]:  # an alias names a command already walked
                    for option, commands in _options(sub, f"{command} {name}".strip()).items():
                        out.setdefault(option, []).extend(commands)
    return out


def with_suggestion(message: str, parser: argparse.ArgumentParser) -> str:
    """argparse's MESSAGE, with the nearest option to an unknown one or the nearest command to an invalid choice."""
    unknown = re.match(r"unrecognized arguments: (.*)", message)
    if unknown:
        options = _options(parser)
        hints = []
        words = unknown.group(1).split()
        if words and words[0][:1] != "-" and any(a.dest == "name" and not a.option_strings for a in parser._actions):
            hints.append("a bundle NAME is one word, without spaces: join the words (my_model)")
        for word in words:
            typed = word.split("=")[0]
            if typed[:1] != "-":
                continue
            if typed in options:  # a real option, of other commands
                takers = ", ".join(f"`{c}`" if c else "the command line itself" for c in options[typed])
                hints.append(f"{typed} is an option of {takers} only")
                continue
            close = [o for o in options if o.startswith(typed)] or difflib.get_close_matches(typed, options, 1, 0.6)
            if close:
                hints.append(f"{word}: did you mean {' or '.join(close[:3])}?")
        return "; ".join([message, *hints])
    invalid = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
    if invalid:
        choices = re.findall(r"'([^']*)'|(\S+?)(?:,|$)", invalid.group(2))
        names = [a or b for a, b in choices]
        close = difflib.get_close_matches(invalid.group(1), names, n=1, cutoff=0.6)
        if close:
            return f"{message}; did you mean {close[0]}?"
    return message


def _checked(text: str, check: type | object) -> object:
    try:
        return check(text)  # type: ignore[operator]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def ttl_seconds(text: str) -> int:
    """Seconds a pushed bundle lives: a whole number, 1 or more."""
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of seconds, 1 or more, not {text!r}")
    return int(text)


def wait_seconds(text: str) -> float:
    """Seconds to wait: 0 or more, finite."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, 0 or more, not {text!r}")
    return value


def keep_versions(text: str) -> int:
    """Versions to keep per name and machine: 1 or more (deleting every version is `rm`'s job, with --yes)."""
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(
            f"must be a whole number, 1 or more, not {text!r} (to delete every version of a name: hub rm NAME --yes)"
        )
    return int(text)


def size(text: str) -> int:
    """A size in bytes: 500M, 2G, 1.5GiB, 1000."""
    return _checked(text, parse_size)  # type: ignore[return-value]


def age(text: str) -> float:
    """An age in seconds: 30d, 12h, 90m, 45s, 2w, or a plain number of seconds."""
    return _checked(text, parse_age)  # type: ignore[return-value]


def namespace(text: str) -> str:
    return _checked(text, check_namespace)  # type: ignore[return-value]


def hub_url(text: str) -> str:
    return _checked(text, check_hub_url)  # type: ignore[return-value]
