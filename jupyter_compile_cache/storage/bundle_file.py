"""One bundle version as one file, to hand over by hand (`export NAME FILE`, `import FILE`): a plain tar of the
manifest (`manifest.json`) and the payload as the store keeps it (`payload.pack`, or `payload.tar.zst` for format
1). Importing reads the two expected regular members only, never extracts, and the store verifies every member."""

from __future__ import annotations

import io
import json
import tarfile

from .bundle import BundleError, DamagedBundle, Manifest, check_name, short_id, verify_payload
from .store import LocalStore

MANIFEST = "manifest.json"
PAYLOADS = {2: "payload.pack", 1: "payload.tar.zst"}  # by bundle format


def export_bundle(store: LocalStore, manifest: Manifest, path: str) -> None:
    """The version MANIFEST of STORE into a file at PATH, verified first: a damaged version is quarantined, as a
    restore would, and nothing is written."""
    try:
        verify_payload(store.payload_path(manifest), manifest)
    except (DamagedBundle, OSError) as exc:
        store.quarantine(manifest, str(exc))
        raise DamagedBundle(
            f"{manifest.name} version {short_id(manifest.version)} is damaged ({exc}): moved to quarantine, nothing "
            "exported"
        ) from None
    data = json.dumps(manifest.to_json()).encode()
    with tarfile.open(path, "w") as tar:
        info = tarfile.TarInfo(MANIFEST)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        tar.add(store.payload_path(manifest), arcname=PAYLOADS[manifest.format])


def import_bundle(store: LocalStore, path: str) -> tuple[Manifest, bool]:
    """The version in the file, in STORE, and whether it is new there (False: the store held it already)."""
    not_ours = f"{path} is not a bundle exported by jupyter_compile_cache"
    try:
        tar = tarfile.open(path, "r:")  # export writes a plain tar
    except tarfile.ReadError:
        raise BundleError(f"{not_ours} (not a tar file)") from None
    try:
        with tar:
            return _import_from(store, tar, path, not_ours)
    except (tarfile.TarError, EOFError) as exc:  # a file cut short: "unexpected end of data" named nothing
        raise BundleError(f"{path} is cut short or damaged ({exc}): nothing was imported") from None


def _import_from(store: LocalStore, tar: tarfile.TarFile, path: str, not_ours: str) -> tuple[Manifest, bool]:
    """The version in TAR (opened from PATH) into STORE."""
    members = {m.name: m for m in tar.getmembers()}
    payloads = set(members) & set(PAYLOADS.values())
    if set(members) != {MANIFEST, *payloads} or len(payloads) != 1:
        raise BundleError(not_ours)
    if not all(m.isreg() for m in members.values()):
        raise BundleError(not_ours)
    raw = tar.extractfile(members[MANIFEST])
    payload = tar.extractfile(members[payloads.pop()])
    if raw is None or payload is None:
        raise BundleError(not_ours)
    manifest = Manifest.from_json(json.load(raw))
    check_name(manifest.name)
    if PAYLOADS.get(manifest.format) not in members:
        raise BundleError(f"{path}: its payload is not of its manifest's format {manifest.format}")
    if any(v.version == manifest.version for v in store.versions(manifest.name)):
        return manifest, False
    return store.adopt(manifest, payload), True
