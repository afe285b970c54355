"""The docs the package's docstrings and comments send a reader to are there."""

from __future__ import annotations

import os
import re

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_every_doc_the_package_cites_exists():
    cited = {}
    package = os.path.join(REPO, "jupyter_compile_cache")
    for folder, _dirs, files in os.walk(package):
        for name in files:
            if name.endswith(".py"):
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    for doc in re.findall(r"\bdocs/[\w./-]+\.md", f.read()):
                        cited.setdefault(doc, os.path.relpath(os.path.join(folder, name), REPO))
    assert "docs/how_it_works.md" in cited  # the scan finds what the package cites
    missing = {doc: where for doc, where in cited.items() if not os.path.isfile(os.path.join(REPO, doc))}
    assert not missing, missing
