"""A command's answers that are not results: no such bundle, version or fitting version, no hub. Each front end
words them and tells them as it tells errors (a usage error in a notebook, exit status 1 in a shell)."""

from __future__ import annotations

from collections.abc import Sequence

from ..storage.backends.base import HubError as HubError  # a hub that failed: each front end tells it
from ..storage.sources import Place, Skip


class NotFound(LookupError):
    """No bundle NAME (or no version of it) in WHERE: a command's answer that each front end words and tells as it
    tells errors (a usage error in a notebook, exit status 1 in a shell). `names`: the bundles WHERE holds, for the
    near matches the message names."""

    def __init__(self, name: str, where: Place, names: Sequence[str] = ()) -> None:
        super().__init__(name, where)
        self.name, self.where, self.names = name, where, list(names)


class NoSuchVersion(NotFound):
    """NAME is in WHERE, but none of its versions is VERSION (`known`: the short ids it has)."""

    def __init__(self, name: str, where: Place, version: str, known: str) -> None:
        super().__init__(name, where)
        self.version, self.known = version, known


class NothingFits(NotFound):
    """NAME is in WHERE, but no version of it can be pulled here: each one's reason in `skipped`; `wrong_signatures`
    when versions were refused as signed with another team's secret."""

    def __init__(self, name: str, where: Place, skipped: list[Skip], wrong_signatures: bool) -> None:
        super().__init__(name, where)
        self.skipped, self.wrong_signatures = skipped, wrong_signatures


class NoHub(ValueError):
    """A hub command with no hub: none configured, or the one configured failed a moment ago (the front ends say
    how to set one)."""

    def __str__(self) -> str:
        return "no hub"


class NotANotebook(OSError):
    """The file a command was asked to read as a notebook is none (not JSON, no list of cells): told in one line
    (exit status 5 in a shell), with no plan of nothing before it."""

    def __init__(self, path: str, detail: str) -> None:
        super().__init__(path, detail)
        self.path, self.detail = path, detail
