"""The shared hub: bundles in a team's store of blobs, reached through one `Backend` (storage/backends: Redis, a
single server or a Cluster, in the clear or over TLS; S3 or an S3-compatible store; or a shared folder, `file://`).

Keys, for namespace NS, bundle NAME, fingerprint id FP and version V (the second part is the key's group: every key
of one backend call shares it, storage/backends/keys.py):

    jcc:NS/NAME:chunk:FP:V:<i>   slices of the payload, a few MB each, each zstd-compressed when that helps
    jcc:NS/NAME:manifest:FP:V    the manifest (fingerprint, sizes, sha256 of every chunk, signature), written
                                 last: the commit point, so a reader never sees a half-written bundle
    jcc:NS/NAME:lease:FP         who is compiling NAME right now (atomic lease with expiry, renewed while it runs)
    jcc:NS/NAME:pushing:FP:V     a push of version V is at work (S3 only: see below)
    jcc:NS/:name:NAME            NAME has versions here (for `hub ls`; earlier versions wrote jcc:NS:name:NAME,
                                 still read)

So every key of namespace NS lies under `jcc:NS/`: one access rule per team (docs/how_it_works.md gives the Redis ACL
lines and an S3 bucket policy). A namespace below it (`NS/toolchain`, ...) falls under the same rule.

A writer killed mid-push leaves nothing behind for more than a few minutes (storage/chunk_expiry.py: a short expiry
until the commit, or on S3 a `pushing` key that claims the chunks). Before the manifest is written the push checks
that every chunk is still there (a Redis with an eviction policy may have dropped some), so no reader ever finds a
manifest whose chunks were gone when it landed.

With a team secret every manifest carries an HMAC-SHA256 (storage/signing.py) that covers every chunk's hash; a
pulled bundle without a valid signature is refused. Every pulled chunk is hashed before it is decompressed
(storage/chunks.py), and the restore from the local store hashes every member again.

Chunks are compressed and checked on worker threads while the main thread talks to the backend, a few chunks ahead
at most, so memory stays flat whatever the bundle's size.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from ..units import count
from . import bundle, chunks, file_copy
from .backends import Backend, open_backend, redact
from .backends.base import HubError, HubRefused
from .bundle import DamagedBundle, Manifest
from .chunk_expiry import push_expiry
from .clock import SYSTEM_CLOCK, Clock
from .lease import HOST, Lease, process_alive
from .signing import SignatureError, check_signature, sign
from .store import Removal

__all__ = ["Hub", "HubConfig", "HubError", "HubRefused", "Lease", "SignatureError", "check_signature"]

AHEAD = 4  # chunks being compressed or checked on worker threads at once
ORPHAN_TTL = 300  # seconds an uncommitted chunk lives (renewed while its push runs)
MAX_MANIFEST_BYTES = 16 << 20  # a 1 GB bundle's manifest is about 100 KB; a larger one is hostile
MAX_VERSIONS = 50  # versions of one name read per listing, newest first

Progress = Callable[[int, int], None]  # (bytes done, bytes total)


@dataclass
class HubConfig:
    url: str
    namespace: str = "default"
    secret: bytes | None = None
    ttl: int | None = None  # seconds a pushed bundle lives; None: until gc or rm
    chunk_size: int = chunks.DEFAULT_CHUNK
    connect_timeout: float = 2.0
    timeout: float = 10.0
    orphan_ttl: int = ORPHAN_TTL
    clock: Clock = field(default=SYSTEM_CLOCK, compare=False, repr=False)


class Hub:
    """One namespace of one hub. The backend is opened on first use (a bad URL or a missing client library is a
    HubError then, like any other hub failure); pass one to share its connection between hubs of one URL."""

    def __init__(self, config: HubConfig, backend: Backend | None = None) -> None:
        self.config = config
        self._backend = backend

    @property
    def backend(self) -> Backend:
        if self._backend is None:
            config = self.config
            self._backend = open_backend(config.url, config.connect_timeout, config.timeout, config.clock)
        return self._backend

    @property
    def display_url(self) -> str:
        return redact(self.config.url)

    # -- keys -----------------------------------------------------------------------------------------------
    def _prefix(self, name: str) -> str:
        return f"jcc:{self.config.namespace}/{name}"

    def _name_key(self, name: str) -> str:
        return f"jcc:{self.config.namespace}/:name:{name}"

    def _old_name_key(self, name: str) -> str:
        return f"jcc:{self.config.namespace}:name:{name}"

    def _refused(self, exc: HubRefused, action: str) -> HubRefused:
        """A refusal in the user's terms: which team's bundles this user may not read or write (the server's own
        words quote key names). A read-only hub's own words say it best."""
        if not exc.denied or getattr(self.backend, "read_only", False):
            return exc
        user = getattr(self.backend, "user", None)
        who = f"user {user!r}" if user else "this user"
        return HubRefused(
            f"hub {self.display_url}: {who} is not permitted to {action} {self.config.namespace!r}'s bundles",
            action,
            True,
            exc.values,
        )

    @contextlib.contextmanager
    def _as_this_user(self, action: str) -> Iterator[None]:
        """A refusal of the hub inside is told in the user's terms (`_refused`)."""
        try:
            yield
        except HubRefused as exc:
            raise self._refused(exc, action) from None

    def _manifest_key(self, name: str, fp: str, version: str) -> str:
        return f"{self._prefix(name)}:manifest:{fp}:{version}"

    def _chunk_key(self, name: str, fp: str, version: str, index: int) -> str:
        return f"{self._prefix(name)}:chunk:{fp}:{version}:{index}"

    def _pushing_key(self, name: str, fp: str, version: str) -> str:
        return f"{self._prefix(name)}:pushing:{fp}:{version}"

    def _lease_key(self, name: str, fp: str) -> str:
        return f"{self._prefix(name)}:lease:{fp}"

    # -- reading ------------------------------------------------------------------------------------------------
    def ping(self) -> float:
        """Seconds the backend took to answer."""
        start = time.perf_counter()
        self.backend.ping()
        return time.perf_counter() - start

    def names(self) -> list[str]:
        """The names with versions here that this user may read. A listing (Redis's SCAN) shows key names whatever
        the user's access rules: each name's key is read too, so another team's names are never shown."""
        found: set[str] = set()
        for prefix in (self._name_key(""), self._old_name_key("")):
            try:
                keys = self.backend.list(prefix)
                values = self._readable(keys)
            except HubRefused as exc:
                if prefix == self._old_name_key(""):  # an older version's keys, outside the team's access rule
                    continue
                raise self._refused(exc, "read") from None
            found.update(key[len(prefix) :] for key, value in zip(keys, values) if value is not None)
        return sorted(found)

    def _readable(self, keys: list[str]) -> list[bytes | None]:
        """The values of KEYS, None for those expired or that this user may not read; a HubRefused when it may
        read none of them."""
        try:
            return self.backend.get(keys)
        except HubRefused as exc:
            if exc.values is None or all(v is None for v in exc.values):
                raise
            return exc.values

    def holds(self, manifest: Manifest) -> bool:
        """Whether the hub has MANIFEST's version committed: one request (its manifest's key), no listing."""
        key = self._manifest_key(manifest.name, manifest.fingerprint_id, manifest.version)
        with self._as_this_user("read"):
            return not self.backend.missing([key])

    def versions(self, name: str) -> list[Manifest]:
        """Committed versions of NAME, newest first (signatures are checked by the caller, who reports them). A
        manifest this user may not read is skipped; when it may read none, that is a HubRefused."""
        with self._as_this_user("read"):
            keys = self.backend.list(f"{self._prefix(name)}:manifest:")
            values = self._readable(keys)  # the refused ones are skipped like expired ones
        out = []
        for key, raw in zip(keys, values):
            if raw is None or len(raw) > MAX_MANIFEST_BYTES:  # expired or removed since the listing; or hostile
                continue
            try:
                manifest = Manifest.from_json(json.loads(raw))
            except (ValueError, TypeError, DamagedBundle):
                continue
            if manifest.name == name and key == self._manifest_key(name, manifest.fingerprint_id, manifest.version):
                out.append(manifest)
        out.sort(key=lambda m: m.created, reverse=True)
        return out[:MAX_VERSIONS]

    def listing(self) -> tuple[list[Manifest], list[str]]:
        """Every version of every name this user may read (for `hub ls` and `list`), and the names it may not: an
        access rule may confine a user to some of a namespace's bundles, and the listing skips the rest."""
        manifests, refused = [], []
        for name in self.names():
            try:
                manifests += self.versions(name)
            except HubRefused as exc:
                if not exc.denied:
                    raise
                refused.append(name)
        return manifests, refused

    def pull(self, manifest: Manifest, sink: IO[bytes], progress: Progress | None = None) -> None:
        """Write the payload of `manifest` into the file `sink`, verifying every chunk; raises HubError on any
        problem. Chunks are checked, decompressed and written at their place on worker threads while the next
        arrive, into buffers each thread reuses."""
        hashes = manifest.chunk_sha256 or []
        flags = manifest.chunk_compressed or [False] * len(hashes)
        size = manifest.chunk_size or 0
        if not hashes:
            raise chunks.DamagedChunk(f"bundle {manifest.name!r} version {manifest.version} lists no chunks")
        fits = (len(hashes) - 1) * size < manifest.payload_bytes <= len(hashes) * size
        if len(flags) != len(hashes) or not 0 < size <= chunks.MAX_CHUNK or not fits:
            raise chunks.DamagedChunk(
                f"bundle {manifest.name!r} version {manifest.version} has an inconsistent chunk list"
            )
        sink.flush()
        fd = sink.fileno()
        name, fp, version = manifest.name, manifest.fingerprint_id, manifest.version

        def fetch(indices: range) -> list[tuple[int, bytes | None]]:
            return list(zip(indices, self.backend.get([self._chunk_key(name, fp, version, i) for i in indices])))

        def received() -> Iterator[tuple[int, bytes | None]]:
            step = self.backend.keys_per_call
            calls = (range(start, min(start + step, len(hashes))) for start in range(0, len(hashes), step))
            with file_copy.ordered(fetch, calls, self.backend.pull_calls_in_flight) as fetches:
                for fetched in fetches:
                    yield from fetched

        def place(item: tuple[int, bytes | None]) -> int:
            i, data = item
            expected = min(size, manifest.payload_bytes - i * size)
            view = chunks.decode(data, hashes[i], flags[i], expected, f"chunk {i} of {name!r}")
            file_copy.pwrite_all(fd, view, i * size)
            return expected

        done = 0
        with self._as_this_user("read"), file_copy.ordered(place, received(), AHEAD) as placing:
            for placed in placing:
                done += placed
                if progress:
                    progress(done, manifest.payload_bytes)

    # -- writing ------------------------------------------------------------------------------------------------
    def push(self, manifest: Manifest, payload_path: str, progress: Progress | None = None) -> Manifest:
        """Upload the chunks, then commit the signed manifest. Returns the manifest as pushed."""
        with self._as_this_user("write"):
            return self._push(manifest, payload_path, progress)

    def _push(self, manifest: Manifest, payload_path: str, progress: Progress | None) -> Manifest:
        size, orphan_ttl = self.config.chunk_size, self.config.orphan_ttl
        name, fp, version = manifest.name, manifest.fingerprint_id, manifest.version
        # A format 1 payload is a zstd stream already, and older versions read its chunks as they are.
        compress = manifest.format >= 2
        hashes: list[str] = []
        flags: list[bool] = []
        sizes: list[int] = []  # each chunk's raw bytes
        ttl = self.config.ttl
        clock = self.config.clock
        marker, prefix = self._pushing_key(name, fp, version), f"{self._prefix(name)}:chunk:{fp}:{version}:"
        expiry = push_expiry(self.backend, self.config.ttl, orphan_ttl, self.config.clock, marker, prefix)

        def keys(count: int) -> list[str]:
            return [self._chunk_key(name, fp, version, i) for i in range(count)]

        def calls(encoded: Iterator[chunks.Encoded]) -> Iterator[dict[str, bytes]]:
            batch: dict[str, bytes] = {}
            for data, compressed, digest, raw_bytes in encoded:
                batch[self._chunk_key(name, fp, version, len(hashes))] = data
                hashes.append(digest)
                flags.append(compressed)
                sizes.append(raw_bytes)
                if len(batch) >= self.backend.keys_per_call:
                    yield batch
                    batch = {}
            if batch:
                yield batch

        def send(batch: dict[str, bytes]) -> int:
            self.backend.put(batch, ttl=expiry.chunk_ttl)
            return len(batch)

        sent, done, renewed = 0, 0, clock.monotonic()
        with open(payload_path, "rb") as f:
            pieces = iter(lambda: f.read(size), b"")
            encode = chunks.encode if compress else chunks.as_is
            with (
                file_copy.ordered(encode, pieces, AHEAD) as encoded,
                file_copy.ordered(send, calls(encoded), self.backend.push_calls_in_flight) as sending,
            ):
                for count_sent in sending:
                    done += sum(sizes[sent : sent + count_sent])
                    sent += count_sent
                    if clock.monotonic() - renewed > orphan_ttl / 3:  # a long push keeps its first chunks alive
                        expiry.renew(keys(sent))
                        renewed = clock.monotonic()
                    if progress:
                        progress(done, manifest.payload_bytes)
        pushed = Manifest.from_json(manifest.to_json())
        pushed.chunk_size, pushed.chunk_sha256 = size, hashes
        pushed.chunk_compressed = flags if compress else None
        pushed.signature = sign(pushed, self.config.secret) if self.config.secret else None
        # The commit: chunks kept for good (or the bundle's ttl), checked to be all there still (a Redis that evicts
        # under memory pressure may have dropped some), then the manifest, the one key readers look for. The name's
        # key has another group than the bundle's keys: it goes in a call of its own.
        written = keys(len(hashes))
        gone = expiry.kept(written)
        if gone:
            expiry.abandon(written)
            raise HubError(
                f"hub {self.display_url}: {len(gone)} of the {count(len(hashes), 'chunk')} of {name!r} were gone "
                "from the hub before the push could commit (evicted under memory pressure?); nothing was published"
            )
        self.backend.put({self._manifest_key(name, fp, version): json.dumps(pushed.to_json()).encode()}, ttl)
        self.backend.put({self._name_key(name): b""}, ttl)
        expiry.done()
        return pushed

    def missing_chunks(self, manifest: Manifest) -> int:
        """How many of a committed version's chunks are not on the hub (evicted, expired, removed by hand): such a
        version cannot be pulled."""
        count = len(manifest.chunk_sha256 or [])
        keys = [self._chunk_key(manifest.name, manifest.fingerprint_id, manifest.version, i) for i in range(count)]
        with self._as_this_user("read"):
            return len(self.backend.missing(keys))

    def remove(self, name: str, version: str | None = None, dry_run: bool = False) -> list[Removal]:
        """Delete one version or all of NAME; returns what went (with `dry_run`, what would go)."""
        removed = []
        with self._as_this_user("write"):
            for manifest in self.versions(name):
                if version not in (None, manifest.version):
                    continue
                removed.append(Removal(name, manifest.version, manifest.payload_bytes))
                if not dry_run:
                    self._delete_version(manifest)
            if not dry_run and not self.versions(name):
                self._forget(name)
        return removed

    def _forget(self, name: str) -> None:
        # one call per key: the two have other groups
        self.backend.delete([self._name_key(name)])
        self.backend.delete([self._old_name_key(name)])

    def _delete_version(self, manifest: Manifest) -> None:
        name, fp, version = manifest.name, manifest.fingerprint_id, manifest.version
        # manifest first: from then on no reader picks the version up
        self.backend.delete([self._manifest_key(name, fp, version)])
        count = len(manifest.chunk_sha256 or [])
        self.backend.delete([self._chunk_key(name, fp, version, i) for i in range(count)])

    def gc(
        self,
        keep: int = 3,
        dry_run: bool = False,
        keep_member: Callable[[str], bool] | None = None,
        progress: Callable[[Manifest], Progress] | None = None,
    ) -> list[Removal]:
        """Keep the newest `keep` (at least 1) complete versions per name and fingerprint, remove incomplete ones
        (chunks evicted or expired), forget names left without a version, and let the backend drop what expired;
        then every version kept that holds members `keep_member` refuses is pushed again without them and the old
        one removed (`_slim`; `progress(manifest)` shows its pull and push). Returns what went (with `dry_run`,
        what would go)."""
        if keep < 1:
            raise ValueError(f"keep must be 1 or more, not {keep}: to delete every version of a name, use rm")
        removed, slimmed = [], []
        with self._as_this_user("write"):
            for name in self.names():
                seen: dict[str, int] = {}
                left = 0
                for manifest in self.versions(name):
                    complete = not self.missing_chunks(manifest)  # one whose chunks were evicted helps nobody
                    seen[manifest.fingerprint_id] = seen.get(manifest.fingerprint_id, 0) + complete
                    if complete and seen[manifest.fingerprint_id] <= keep:
                        left += 1
                        if keep_member is not None:
                            slimmed += self._slim(manifest, keep_member, dry_run, progress)
                        continue
                    removed.append(Removal(name, manifest.version, manifest.payload_bytes))
                    if not dry_run:
                        self._delete_version(manifest)
                if not dry_run and not left:
                    self._forget(name)
            if not dry_run:
                if not self.backend.expiry_in_place:
                    self._remove_unclaimed_chunks()
                self.backend.sweep()
        return slimmed + removed

    def _slim(
        self,
        manifest: Manifest,
        keep_member: Callable[[str], bool],
        dry_run: bool,
        progress: Callable[[Manifest], Progress] | None = None,
    ) -> list[Removal]:
        """MANIFEST's version pulled (every chunk verified), its members that `keep_member` takes pushed as a new
        version of the same time and fingerprint (`bundle.copy_slim`), then the old one deleted: a removal that
        `kept` the new one, or nothing where no member goes. A version this hub could not sign again as it was
        signed (a valid signature needs this team's secret; an unsigned one stays unsigned) is left as it is: gc
        never turns a bundle readers refuse into one they take."""
        dropped = [m for m in manifest.members if not keep_member(m.name)]
        if not dropped or manifest.format < 2 or bool(manifest.signature) != bool(self.config.secret):
            return []
        try:
            check_signature(manifest, self.config.secret)
        except SignatureError:
            return []
        freed = sum(m.size for m in dropped)
        if dry_run:
            return [Removal(manifest.name, manifest.version, freed, kept=manifest.version)]
        shown = progress(manifest) if progress is not None else None
        whole = manifest.payload_bytes  # one bar: the pull, then the push of what is left (scaled to the pull's size)
        with tempfile.TemporaryDirectory(prefix="jcc-hub-gc-") as scratch:
            slim_path = os.path.join(scratch, "slim")
            with open(os.path.join(scratch, "pulled"), "w+b") as pulled, open(slim_path, "wb") as out:
                self.pull(manifest, pulled, shown and (lambda done, total: shown(done, 2 * whole)))
                slim = bundle.copy_slim(pulled, manifest, keep_member, out)
            pushing = shown and (lambda done, total: shown(whole + done * whole // max(total, 1), 2 * whole))
            self._push(slim, slim_path, pushing)
        self._delete_version(manifest)
        return [Removal(manifest.name, manifest.version, freed, kept=slim.version)]

    def _remove_unclaimed_chunks(self) -> None:
        """Delete the chunks of versions that neither a manifest nor a live push marker claims: what a push killed
        midway left, where chunks carry no short expiry of their own (`_push`)."""
        chunks: dict[tuple[str, str, str], list[str]] = {}
        claims: list[tuple[tuple[str, str, str], str]] = []
        namespace = self.config.namespace
        for key in self.backend.list(f"jcc:{namespace}/"):
            parts = key.split(":")
            name = parts[1][len(namespace) + 1 :]
            if len(parts) < 5 or not name or "/" in name:  # the list of names, or a namespace below this one
                continue
            version = (name, parts[3], parts[4])
            if parts[2] == "chunk":
                chunks.setdefault(version, []).append(key)
            elif parts[2] in ("manifest", "pushing"):
                claims.append((version, key))
        listed: dict[str, list[str]] = {}  # per name: one backend call holds one group's keys
        for version, key in claims:
            if version in chunks:
                listed.setdefault(version[0], []).append(key)
        live = {key for keys in listed.values() for key in set(keys) - set(self.backend.missing(keys))}
        claimed = {version for version, key in claims if key in live}
        for version, keys in chunks.items():
            if version not in claimed:
                self.backend.delete(keys)

    # -- single flight ------------------------------------------------------------------------------------------
    def lease_holder(self, name: str, fp: str) -> dict[str, Any] | None:
        """Who holds NAME's lease now (None: nobody); a holder on this machine whose process has ended is nobody,
        though its lease has not expired yet."""
        raw = self.backend.get([self._lease_key(name, fp)])[0]
        if raw is None:
            return None
        try:
            info = json.loads(raw)
        except ValueError:
            return {"holder": "unknown"}
        if not isinstance(info, dict):
            return {"holder": "unknown"}
        pid = info.get("pid")
        if info.get("host") == HOST and isinstance(pid, int) and not process_alive(pid):
            return None
        return info

    def lease(self, name: str, fp: str, holder: str) -> Lease:
        key, clock = self._lease_key(name, fp), self.config.clock
        return Lease(self.backend, key, holder, refused=lambda exc: self._refused(exc, "write"), clock=clock)
