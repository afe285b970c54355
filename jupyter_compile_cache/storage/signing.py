"""Team signatures on hub manifests: an HMAC-SHA256 over the manifest's canonical JSON, which covers every chunk's
sha256, so a bundle altered on the hub (or pushed without the team's secret) is refused before it is pulled."""

from __future__ import annotations

import hashlib
import hmac
import json

from .backends.base import HubError
from .bundle import Manifest


class SignatureError(HubError):
    """A pulled manifest is unsigned, or not signed with this team's secret."""


def canonical(manifest: Manifest) -> bytes:
    data = manifest.to_json()
    data.pop("signature", None)
    return json.dumps(data, sort_keys=True, separators=(",", ":"), default=str).encode()


def sign(manifest: Manifest, secret: bytes) -> str:
    return hmac.new(secret, canonical(manifest), hashlib.sha256).hexdigest()


def check_signature(manifest: Manifest, secret: bytes | None) -> None:
    """Nothing without a secret; else raise SignatureError unless MANIFEST carries this secret's signature."""
    if secret is None:
        return
    if not manifest.signature:
        raise SignatureError(
            f"bundle {manifest.name!r} version {manifest.version} is unsigned (no signature) but a team secret is set"
        )
    if not hmac.compare_digest(manifest.signature, sign(manifest, secret)):
        raise SignatureError(
            f"bundle {manifest.name!r} version {manifest.version} has a wrong signature "
            "(not signed with this team's secret, or altered)"
        )
