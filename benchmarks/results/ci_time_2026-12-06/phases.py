"""CI logs cut into the phases of `.ci/run`, as one table: `python3 phases.py LOG...`. Each line of a log carries the
second it appeared (`bash .ci/run | while IFS= read -r l; do echo "$(date +%s) $l"; done`)."""

from __future__ import annotations

import re
import sys

PASSED = re.compile(r"=+ (.*(?:passed|failed).*) in [\d.]+s")


def phases(path: str) -> dict[str, object]:
    with open(path) as f:
        rows = [(int(t), s) for t, _, s in (line.partition(" ") for line in f.read().splitlines()) if t.isdigit()]

    def first(pattern: str) -> int:
        return next(t for t, s in rows if re.search(pattern, s))

    start, lint, lane, end = rows[0][0], first(r"ruff check \."), first(r"pytest -n \d+ --dist"), first(r"^exit ")
    passed = [(t, PASSED.search(s).group(1)) for t, s in rows if PASSED.search(s)]  # type: ignore[union-attr]
    return {
        "setup": lint - start,
        "ruff, pyright": lane - lint,
        "first lane": passed[0][0] - lane,
        "quiet tests": passed[1][0] - passed[0][0],
        "the rest, notebooks, oldest torch": end - passed[1][0],
        "total": end - start,
        "tests": " + ".join(count for _, count in passed),
    }


if __name__ == "__main__":
    runs = {path.rsplit("/", 1)[-1]: phases(path) for path in sys.argv[1:]}
    print("| phase | " + " | ".join(runs) + " |")
    print("|---|" + "--:|" * len(runs))
    for key in next(iter(runs.values())):
        print(f"| {key} | " + " | ".join(str(r[key]) for r in runs.values()) + " |")
