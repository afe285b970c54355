"""How the store's commands show and name versions: a row of `list`, the functions a version's entries are for
against this kernel's code (`explain`), the one version a prefix names, the place a command worked on."""

from __future__ import annotations

from ..storage.bundle import Manifest, matching_versions, short_id
from ..storage.sources import HubSource, LocalSource, Place
from ..storage.store import LocalStore
from .errors import NoSuchVersion
from .machine_fit import MachineFit
from .records import (
    NOT_COMPILED,
    OTHER_CODE,
    THIS_CODE,
    BundleRow,
)


def hub_where(hub: HubSource) -> Place:
    """The hub and namespace a command works on."""
    return Place(hub.kind, hub.display_url, hub.namespace)


def store_where(store: LocalStore) -> Place:
    """The local store a command works on."""
    return LocalSource(store).where


def bundle_row(m: Manifest, fit: MachineFit, last_used: float | None, where: str) -> BundleRow:
    return BundleRow(
        name=m.name,
        version=m.version,
        short_id=short_id(m.version),
        bytes=m.payload_bytes,
        files=len(m.members),
        created=m.created,
        last_used=last_used,
        writer=m.writer,
        where=where,
        compatible=fit.fits(m),
        mismatches=fit.mismatches(m),
        fingerprint_id=m.fingerprint_id,
    )


def version_named(name: str, versions: list[str], given: str | None, where: Place) -> str | None:
    """The one version `given` names among NAME's (None: all of them); a ValueError says when it names none or
    several, and which there are."""
    if given is None or not versions:  # no such NAME: the removal says so
        return given
    matching = matching_versions(versions, given)
    if len(matching) == 1:
        return matching[0]
    known = ", ".join(short_id(v) for v in versions[:8]) + (" ..." if len(versions) > 8 else "")
    if matching:
        raise ValueError(f"version {given!r} of {name!r} is ambiguous: {len(matching)} versions start so ({known})")
    raise NoSuchVersion(name, where, given, known)


def functions_against(manifest: Manifest, compiled: dict[str, str]) -> list[tuple[str, str]] | None:
    """The functions a version's entries are for, each against the code this kernel compiled under that name."""
    functions = manifest.stats.get("functions")
    if not isinstance(functions, dict):
        return None
    out = []
    for entry in functions.values():
        if not isinstance(entry, dict) or not isinstance(entry.get("function"), str):
            continue
        function, digest = entry["function"], entry.get("digest")
        verdict = (
            NOT_COMPILED if function not in compiled else THIS_CODE if compiled[function] == digest else OTHER_CODE
        )
        out.append((function, verdict))
    return sorted(out)
