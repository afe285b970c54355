"""argparse types shared by the magics and the CLI: each refuses a bad value with a message that says the rule, and
argparse puts the option's name in front of it ("argument --ttl: must be ...")."""

from __future__ import annotations

import argparse
import math

from ..core.records import hub_url as check_hub_url
from ..core.records import namespace as check_namespace
from ..units import parse_age, parse_size


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
