"""Sizes, ages and speeds in words, both ways: what users type ('500M', '30d') and what messages print."""

from __future__ import annotations

import math
import re


def parse_size(text: str) -> int:
    """'500M', '2G', '1.5GiB', '1000' -> bytes; anything else (empty, negative, 'inf', '1e400') is a ValueError."""
    units = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    s = str(text).strip().lower()
    s = s.removesuffix("ib") if s.endswith("ib") else s.removesuffix("b")
    num = s.rstrip("kmgt")
    unit = s[len(num) :]
    try:
        value = float(num) if re.fullmatch(r"[0-9]+(\.[0-9]*)?|\.[0-9]+", num) else -1.0
    except ValueError:
        value = -1.0
    if value < 0 or unit not in units or not math.isfinite(value * units.get(unit, 1)):
        raise ValueError(f"not a size: {text!r} (use e.g. 500M, 2G)")
    return int(value * units[unit])


def parse_age(text: str) -> float:
    """'30d', '12h', '90m', '45s', '2w', '3600' -> seconds; anything else (empty, negative, 'inf') is a ValueError."""
    units = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([smhdw]?)\s*", str(text).lower())
    if match is None:
        raise ValueError(f"not an age: {text!r} (use e.g. 30d, 12h, 90m)")
    return float(match.group(1)) * units[match.group(2)]


def speed(nbytes: int, seconds: float) -> str:
    """A transfer's rate for the one line each long step prints: "212.4 MB/s"."""
    return f"{human_bytes(int(nbytes / seconds))}/s" if seconds > 0 else "-"


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def count(n: int, noun: str) -> str:
    """'1 version', '2 versions', '1 miss', '3 misses', '1 entry', '2 entries': a number and its noun, in the right
    number (the last word of NOUN takes the plural: '1 cache hit', '2 cache hits')."""
    if n == 1:
        return f"{n} {noun}"
    if noun.endswith(("s", "sh", "ch", "x")):
        return f"{n} {noun}es"
    if noun.endswith("y") and noun[-2:-1] not in ("a", "e", "o", "u"):
        return f"{n} {noun[:-1]}ies"
    return f"{n} {noun}s"
