"""signing.py: a team secret's HMAC over the manifest covers every field and every chunk's hash."""

from __future__ import annotations

import pytest

from jupyter_compile_cache.storage.bundle import Manifest
from jupyter_compile_cache.storage.signing import SignatureError, check_signature, sign


def _manifest() -> Manifest:
    manifest = Manifest.new("net", {"torch": "x"}, "f" * 12, "alice@a")
    manifest.chunk_size, manifest.chunk_sha256 = 1 << 20, ["a" * 64, "b" * 64]
    return manifest


def test_a_signed_manifest_verifies_and_any_change_or_another_secret_breaks_it():
    manifest = _manifest()
    manifest.signature = sign(manifest, b"team")
    check_signature(manifest, b"team")
    check_signature(manifest, None)  # no secret here: nothing to check
    with pytest.raises(SignatureError, match="wrong signature"):
        check_signature(manifest, b"another team")
    manifest.chunk_sha256 = ["c" * 64, "b" * 64]  # a chunk swapped on the hub
    with pytest.raises(SignatureError, match="wrong signature"):
        check_signature(manifest, b"team")


def test_an_unsigned_manifest_is_refused_only_where_a_secret_is_set():
    manifest = _manifest()
    check_signature(manifest, None)
    with pytest.raises(SignatureError, match="unsigned"):
        check_signature(manifest, b"team")


def test_the_signature_does_not_sign_itself():
    manifest = _manifest()
    first = sign(manifest, b"team")
    manifest.signature = first
    assert sign(manifest, b"team") == first
