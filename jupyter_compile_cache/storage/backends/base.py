"""What a hub backend must do: a store of blobs by key, with expiry and an atomic lease. Nothing else.

Keys are text made of `:`-separated parts (the hub's layout, storage/hub.py; storage/backends/keys.py). Every key of
one call to `get`, `put`, `touch` or `delete` belongs to one bundle, so a backend that shards (a Redis Cluster) can
serve the call from one place. Chunking, compression, digests and signatures sit above this protocol and are written
once for every backend.

Any failure of the place the blobs live (down, slow, full, refusing) is a `HubError`, with a message that never
holds a password: the caller treats it as a miss and carries on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar, Protocol

from ..clock import SYSTEM_CLOCK, Clock


class HubError(Exception):
    """The hub failed (down, timed out, full, hostile data); the caller treats it as a miss and carries on."""


class HubConnectionLost(HubError):
    """The connection broke under a call (reset, or closed under a reply): unlike a server that refuses to connect, a
    timeout or a refusal, a call on a fresh connection may well succeed, so a pull is retried (storage/sources.py
    `find`)."""


class HubRefused(HubError):
    """The hub answered and refused (an ACL, a read-only credential, a folder's permissions, a wrong password, a full
    hub): no timeout, and what the user may do still works. `action`: "read", "write" or "log in"; `denied`: the user
    lacks the permission; `values`: for a `get` refused for some keys, the allowed ones' values (None where refused)."""

    def __init__(
        self, message: str, action: str, denied: bool = False, values: list[bytes | None] | None = None
    ) -> None:
        super().__init__(message)
        self.action, self.denied, self.values = action, denied, values


class Backend(Protocol):
    SCHEMES: ClassVar[tuple[str, ...]]  # the URL schemes it serves
    USAGE: ClassVar[str]  # what its URLs look like, for messages
    display_url: str  # the URL with any password hidden, for messages
    keys_per_call: int  # chunks the hub asks for (or sends) in one call: what keeps this backend's wire busy
    # calls a push or a pull keeps in flight at once: with two, the next call's requests are on the wire while the
    # last of one call's finish (S3's push took 1.43x the client's floor one call at a time). Memory in flight is
    # fixed: calls in flight x keys_per_call chunks, plus the few being checked or written.
    push_calls_in_flight: int
    pull_calls_in_flight: int
    # True where `touch` rewrites only the expiry (Redis, a folder); False where it rewrites the whole value (S3: a
    # copy of each object), so the hub writes chunks with their final expiry at once (storage/hub.py `_push`)
    expiry_in_place: bool

    def __init__(
        self, url: str, connect_timeout: float = 2.0, timeout: float = 10.0, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        """Nothing is connected yet: the first call connects (and its failure is that call's HubError). `clock`
        stamps and reads expiries where the backend keeps them itself; a server with its own (Redis) ignores it."""
        ...

    @staticmethod
    def check_url(url: str) -> None:
        """Raise ValueError, in words, for a URL of its schemes that it cannot open (no connection is made)."""
        ...

    @property
    def kind(self) -> str:
        """ "redis", "redis cluster", "s3", "gcs", "azure", "folder": for `status` and the panel."""
        ...

    @property
    def torch_redis_url(self) -> str | None:
        """The Redis URL torch's own remote caches can use for this hub (`--torch-remote`), None where there is none."""
        ...

    def ping(self) -> None:
        """Raise HubError unless the backend answers."""
        ...

    def get(self, keys: Sequence[str]) -> list[bytes | None]:
        """The values of KEYS, None for a key that is absent or expired."""
        ...

    def put(self, items: Mapping[str, bytes], ttl: int | None = None) -> None:
        """Store each value whole (a reader sees the old value, or none, or the new one: never part of one);
        with TTL, the key is gone that many seconds from now."""
        ...

    def touch(self, keys: Sequence[str], ttl: int | None) -> None:
        """Set the keys' expiry to TTL seconds from now, or clear it (None)."""
        ...

    def delete(self, keys: Sequence[str]) -> None:
        """Remove the keys (absent ones are no error)."""
        ...

    def missing(self, keys: Sequence[str]) -> list[str]:
        """The KEYS that are absent or expired (a store that evicts under memory pressure may have dropped them)."""
        ...

    def list(self, prefix: str) -> list[str]:
        """Every key that starts with PREFIX, in no order. A backend whose listing carries no expiry (an object
        store) may list expired keys too: `get` gives None for them, and `sweep` removes them."""
        ...

    def acquire(self, key: str, token: bytes, ttl: int) -> bytes | None:
        """Take KEY for TOKEN for TTL seconds if nobody holds it (one atomic step): None when taken, else the
        current holder's token."""
        ...

    def renew(self, key: str, token: bytes, ttl: int) -> bool:
        """Extend the lease if TOKEN still holds it (one step); False when it expired or someone else holds it."""
        ...

    def release(self, key: str, token: bytes) -> None:
        """Drop the lease if TOKEN holds it (one step): a holder whose lease expired never drops another's."""
        ...

    def sweep(self) -> int:
        """Remove what expired or a crashed writer left, where the backend does not do that itself; returns how
        many keys or files went."""
        ...

    def reconnect(self) -> None:
        """After a HubConnectionLost: the next call uses a fresh connection (a no-op where there is none)."""
        ...

    def close(self) -> None: ...
