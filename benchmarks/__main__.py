"""`python -m benchmarks NAME [options]`: run one benchmark; with no NAME, list them."""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys

from benchmarks import harness

HERE = os.path.dirname(os.path.abspath(__file__))
NOT_BENCHMARKS = {"harness", "__main__"}  # the harness; `_case` and other private modules are left out too


def benchmarks() -> dict[str, str]:
    """{name: the first line of its docstring}, without importing any (some import torch)."""
    found = {}
    for module in sorted(pkgutil.iter_modules([HERE]), key=lambda m: m.name):
        if module.name.startswith("_") or module.name in NOT_BENCHMARKS:
            continue
        with open(os.path.join(HERE, f"{module.name}.py"), encoding="utf-8") as f:
            text = f.read()
        doc = text.split('"""', 2)[1] if text.lstrip().startswith('"""') else ""
        first = " ".join(doc.split("\n\n")[0].split())
        sentence = first.split(". ")[0].rstrip(":.")
        found[module.name] = sentence if len(sentence) <= 110 else sentence[:107].rsplit(" ", 1)[0] + " ..."
    return found


def main(argv: list[str]) -> int:
    known = benchmarks()
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python -m benchmarks NAME [options]  (NAME --help: its options)\n")
        width = max(map(len, known))
        for name, line in known.items():
            print(f"  {name:<{width}}  {line}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in known:
        print(f"no benchmark {name!r}; there are: {', '.join(known)}", file=sys.stderr)
        return 2
    return harness.run(name, importlib.import_module(f"benchmarks.{name}"), rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
