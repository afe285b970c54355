"""The shared hub: bundles on a team's Redis: a single server, or a Redis Cluster (found by asking the node the URL
names, so the same redis://host:port URL works for both; every key of one bundle shares a hash slot), in the clear
or over TLS (rediss://host:port/0?ssl_ca_certs=/path/ca.pem, redis-py's URL parameters).

Keys, for namespace NS, bundle NAME, fingerprint id FP and version V (all of one NAME share a cluster slot):

    jcc:{NS/NAME}:chunk:FP:V:<i>   slices of the payload, a few MB each, each zstd-compressed when that helps
    jcc:{NS/NAME}:manifest:FP:V    the manifest (fingerprint, sizes, sha256 of every chunk, signature), written
                                   last: the commit point, so a reader never sees a half-written bundle
    jcc:{NS/NAME}:index            sorted set of "FP:V" by creation time
    jcc:{NS/NAME}:lease:FP         who is compiling NAME right now (SET NX with expiry, renewed while it runs)
    jcc:{NS}:names                 set of bundle names

Chunks are written with a one-hour expiry that the commit clears (or sets to --ttl), so an interrupted push
leaves nothing behind. With a team secret every manifest carries an HMAC-SHA256 over its canonical JSON, which
covers every chunk's hash; a pulled bundle without a valid signature is refused. Every pulled chunk is hashed
before it is decompressed (to exactly the size the manifest implies, never more), and the restore from the local
store hashes every member again.

Chunks are compressed and checked on worker threads while the main thread talks to Redis, a few chunks ahead at
most, so memory stays flat whatever the bundle's size. Throughput is bounded by one Redis server's single thread
and its link: docs/how_it_works.md says when a team should move to bigger chunks or a Redis Cluster.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any

from . import file_copy
from .bundle import DamagedBundle, Manifest
from .hub_url import redact
from .store import Removal

__all__ = ["HubConfig", "HubError", "Lease", "RedisHub", "SignatureError", "redis_module"]

DEFAULT_CHUNK = 4 << 20
MIN_CHUNK = 256 << 10
MAX_CHUNK = 64 << 20  # a manifest asking for bigger chunks is refused: what one chunk may hold in memory
PIPELINE_CHUNKS = 2  # chunks per round trip (more makes redis-py's reply buffer copy more)
AHEAD = 4  # chunks being compressed or checked on worker threads at once
ORPHAN_TTL = 3600  # seconds an uncommitted chunk lives
LEASE_TTL = 30

Progress = Callable[[int, int], None]  # (bytes done, bytes total)


class HubError(Exception):
    """The hub failed (down, timed out, hostile data); the caller treats it as a miss and carries on."""


class SignatureError(HubError):
    pass


def redis_module() -> Any:
    """redis-py, imported when the hub is first used; missing, it is a HubError like any other hub failure, so a
    cell, `list` or the CLI tell the user which extra to install and carry on with the local store."""
    try:
        import redis
    except ImportError:
        raise HubError(
            "the hub needs redis-py, which is not installed: pip install 'jupyter_compile_cache[hub]'"
        ) from None
    return redis


def canonical(manifest: Manifest) -> bytes:
    data = manifest.to_json()
    data.pop("signature", None)
    return json.dumps(data, sort_keys=True, separators=(",", ":"), default=str).encode()


def sign(manifest: Manifest, secret: bytes) -> str:
    return hmac.new(secret, canonical(manifest), hashlib.sha256).hexdigest()


def check_signature(manifest: Manifest, secret: bytes | None) -> None:
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


@dataclass
class HubConfig:
    url: str
    namespace: str = "default"
    secret: bytes | None = None
    ttl: int | None = None  # seconds a pushed bundle lives; None: until gc or rm
    chunk_size: int = DEFAULT_CHUNK
    connect_timeout: float = 2.0
    timeout: float = 10.0


class RedisHub:
    def __init__(self, config: HubConfig, clients: dict[tuple, Any] | None = None) -> None:
        self.config = config
        self._client: Any = None
        # A session passes its dict here so all its hubs of one URL share a connection pool: a cell talks to the
        # hub up to three times (pull on a miss, lease, push) and should connect (and AUTH) once, not each time.
        self._clients = clients

    @property
    def display_url(self) -> str:
        return redact(self.config.url)

    @property
    def client(self) -> Any:
        key = (self.config.url, self.config.connect_timeout, self.config.timeout)
        if self._client is None and self._clients is not None:
            self._client = self._clients.get(key)
        if self._client is None:
            self._client = self._connect()
            if self._clients is not None:
                self._clients[key] = self._client
        return self._client

    @property
    def is_cluster(self) -> bool:
        from redis.cluster import RedisCluster

        return isinstance(self.client, RedisCluster)

    def _of(self, name: str) -> Any:
        """The client for NAME's keys. On a cluster: the node serving their one hash slot, as a plain client, so
        pipelines and MULTI/EXEC work as on a single server, and a hung node costs one timeout per round trip
        (the cluster client's pipeline retries each command of a failed pipeline on its own)."""
        client = self.client
        if not self.is_cluster:
            return client
        return client.get_node_from_key(f"{self._prefix(name)}:index").redis_connection

    def _connect(self) -> Any:
        """A client for the URL: asks the node whether it belongs to a cluster (one round trip, once per URL)."""
        redis = redis_module()
        options = {
            "socket_connect_timeout": self.config.connect_timeout,
            "socket_timeout": self.config.timeout,
            "health_check_interval": 0,
            # redis-py reads replies in pieces of this size: with its 64 KiB default a pull takes about twice as long
            "socket_read_size": 16 << 20,
        }
        try:
            client = redis.Redis.from_url(self.config.url, retry_on_timeout=False, **options)
        except ValueError as exc:
            raise HubError(f"bad hub URL {self.display_url}: {exc}") from None
        try:
            cluster = bool(client.info("cluster").get("cluster_enabled"))
        except redis.ResponseError:  # INFO refused (ACL, managed service): a single server
            cluster = False
        if not cluster:
            return client
        client.close()
        from redis.backoff import NoBackoff
        from redis.cluster import RedisCluster
        from redis.retry import Retry

        # One retry: a node that is down or stopped costs a bounded number of timeouts, never a hang.
        return RedisCluster.from_url(self.config.url, retry=Retry(NoBackoff(), 1), **options)

    def _call(self, fn: Callable[[], Any]) -> Any:
        """Run a Redis operation; every failure becomes a HubError whose message never holds the password."""
        redis = redis_module()

        try:
            return fn()
        except HubError:
            raise
        except (TimeoutError, redis.RedisError, OSError) as exc:
            message = str(exc).replace(self.config.url, self.display_url)
            if "password" in message.lower() and "invalid" not in message.lower():
                message = type(exc).__name__
            if "CERTIFICATE_VERIFY_FAILED" in message:
                message = (
                    f"the hub's TLS certificate is not trusted ({message}); pass the CA that signed it in the URL: "
                    "rediss://host:port/0?ssl_ca_certs=/path/to/ca.pem"
                )
            raise HubError(f"hub {self.display_url}: {message or type(exc).__name__}") from None

    # -- keys -----------------------------------------------------------------------------------------------
    def _prefix(self, name: str) -> str:
        return f"jcc:{{{self.config.namespace}/{name}}}"

    def _names_key(self) -> str:
        return f"jcc:{{{self.config.namespace}}}:names"

    def _manifest_key(self, name: str, fp: str, version: str) -> str:
        return f"{self._prefix(name)}:manifest:{fp}:{version}"

    def _chunk_key(self, name: str, fp: str, version: str, index: int) -> str:
        return f"{self._prefix(name)}:chunk:{fp}:{version}:{index}"

    # -- reading ------------------------------------------------------------------------------------------------
    def ping(self) -> float:
        start = time.perf_counter()
        self._call(lambda: self.client.ping())
        return time.perf_counter() - start

    def names(self) -> list[str]:
        return sorted(n.decode() for n in self._call(lambda: self.client.smembers(self._names_key())))

    def versions(self, name: str) -> list[Manifest]:
        """Committed versions of NAME, newest first (signatures are checked by the caller, who reports them)."""
        prefix = self._prefix(name)
        entries = self._call(lambda: self._of(name).zrevrange(f"{prefix}:index", 0, 50))
        out = []
        for entry in entries:
            fp, _, version = entry.decode().partition(":")
            raw = self._call(lambda fp=fp, version=version: self._of(name).get(self._manifest_key(name, fp, version)))
            if raw is None:  # expired or removed
                continue
            try:
                manifest = Manifest.from_json(json.loads(raw))
            except (ValueError, DamagedBundle):
                continue
            if manifest.name == name and manifest.version == version:
                out.append(manifest)
        return out

    def pull(self, manifest: Manifest, sink: IO[bytes], progress: Progress | None = None) -> None:
        """Write the payload of `manifest` into the file `sink`, verifying every chunk; raises HubError on any
        problem. Chunks are checked, decompressed and written at their place on worker threads while the next
        arrive, into buffers each thread reuses."""
        chunks = manifest.chunk_sha256 or []
        flags = manifest.chunk_compressed or [False] * len(chunks)
        size = manifest.chunk_size or 0
        if not chunks:
            raise HubError(f"bundle {manifest.name!r} version {manifest.version} lists no chunks")
        fits = (len(chunks) - 1) * size < manifest.payload_bytes <= len(chunks) * size
        if len(flags) != len(chunks) or not 0 < size <= MAX_CHUNK or not fits:
            raise HubError(f"bundle {manifest.name!r} version {manifest.version} has an inconsistent chunk list")
        sink.flush()
        fd = sink.fileno()

        def received() -> Iterator[tuple[int, bytes | None]]:
            for start in range(0, len(chunks), PIPELINE_CHUNKS):
                indices = range(start, min(start + PIPELINE_CHUNKS, len(chunks)))

                def fetch(indices: range = indices) -> list[bytes | None]:
                    pipe = self._of(manifest.name).pipeline(transaction=False)
                    for i in indices:
                        pipe.get(self._chunk_key(manifest.name, manifest.fingerprint_id, manifest.version, i))
                    return pipe.execute()

                yield from zip(indices, self._call(fetch))

        def place(item: tuple[int, bytes | None]) -> int:
            i, data = item
            what = f"chunk {i} of {manifest.name!r}"
            if data is None:
                raise HubError(f"{what} is missing on the hub (evicted?)")
            if hashlib.sha256(data).hexdigest() != chunks[i]:
                raise HubError(f"{what} fails its sha256 check")
            expected = min(size, manifest.payload_bytes - i * size)
            if flags[i]:
                view = _decompress(data, expected, what)
            elif len(data) == expected:
                view = memoryview(data)
            else:
                raise HubError(f"{what} is not the size its manifest implies")
            file_copy.pwrite_all(fd, view, i * size)
            return expected

        done = 0
        for placed in file_copy.in_order(place, received(), AHEAD):
            done += placed
            if progress:
                progress(done, manifest.payload_bytes)

    # -- writing ------------------------------------------------------------------------------------------------
    def push(self, manifest: Manifest, payload_path: str, progress: Progress | None = None) -> Manifest:
        """Upload chunks in pipelines, then commit the signed manifest. Returns the manifest as pushed."""
        size = self.config.chunk_size
        name, fp, version = manifest.name, manifest.fingerprint_id, manifest.version
        # A format 1 payload is a zstd stream already, and older versions read its chunks as they are.
        compress = manifest.format >= 2
        hashes: list[str] = []
        flags: list[bool] = []
        done = 0
        with open(payload_path, "rb") as f:
            pieces = iter(lambda: f.read(size), b"")
            batch: list[bytes] = []
            encoded = file_copy.in_order(_encode if compress else _as_is, pieces, AHEAD)
            for data, compressed, digest, raw_bytes in encoded:
                batch.append(data)
                hashes.append(digest)
                flags.append(compressed)
                done += raw_bytes
                if len(batch) < PIPELINE_CHUNKS:
                    continue
                self._send_chunks(name, fp, version, len(hashes) - len(batch), batch)
                batch = []
                if progress:
                    progress(done, manifest.payload_bytes)
            if batch:
                self._send_chunks(name, fp, version, len(hashes) - len(batch), batch)
                if progress:
                    progress(done, manifest.payload_bytes)
        pushed = Manifest.from_json(manifest.to_json())
        pushed.chunk_size, pushed.chunk_sha256 = size, hashes
        pushed.chunk_compressed = flags if compress else None
        pushed.signature = sign(pushed, self.config.secret) if self.config.secret else None
        data = json.dumps(pushed.to_json(), default=str)
        ttl = self.config.ttl

        def commit() -> None:
            # The names set is in another hash slot than the bundle's keys: add the name first, on its own (a name
            # without versions lists nothing), so the commit below stays in the bundle's slot.
            self.client.sadd(self._names_key(), name)
            pipe = self._of(name).pipeline(transaction=True)
            for i in range(len(hashes)):
                key = self._chunk_key(name, fp, version, i)
                pipe.expire(key, ttl) if ttl else pipe.persist(key)
            pipe.set(self._manifest_key(name, fp, version), data, ex=ttl)
            pipe.zadd(f"{self._prefix(name)}:index", {f"{fp}:{version}": pushed.created})
            pipe.execute()

        self._call(commit)
        return pushed

    def _send_chunks(self, name: str, fp: str, version: str, base: int, batch: list[bytes]) -> None:
        def send() -> None:
            pipe = self._of(name).pipeline(transaction=False)
            for offset, data in enumerate(batch):
                pipe.set(self._chunk_key(name, fp, version, base + offset), data, ex=ORPHAN_TTL)
            pipe.execute()

        self._call(send)

    def _payload_bytes(self, name: str, fp: str, version: str) -> int:
        raw = self._call(lambda: self._of(name).get(self._manifest_key(name, fp, version)))
        try:
            return int(json.loads(raw).get("payload_bytes", 0)) if raw is not None else 0
        except (ValueError, TypeError, AttributeError):
            return 0

    def remove(self, name: str, version: str | None = None, dry_run: bool = False) -> list[Removal]:
        """Delete one version or all of NAME; returns what went (with `dry_run`, what would go)."""
        removed = []
        prefix = self._prefix(name)
        for entry in self._call(lambda: self._of(name).zrange(f"{prefix}:index", 0, -1)):
            fp, _, v = entry.decode().partition(":")
            if version not in (None, v):
                continue
            removed.append(Removal(name, v, self._payload_bytes(name, fp, v)))
            if not dry_run:
                self._delete_version(name, fp, v)
        if version is None and not dry_run:
            self._call(lambda: self._of(name).unlink(f"{prefix}:index"))
            self._call(lambda: self.client.srem(self._names_key(), name))
        return removed

    def _delete_version(self, name: str, fp: str, version: str) -> None:
        prefix = self._prefix(name)
        raw = self._call(lambda: self._of(name).get(self._manifest_key(name, fp, version)))
        count = 0
        if raw is not None:
            try:
                count = len(json.loads(raw).get("chunk_sha256") or [])
            except (ValueError, TypeError, AttributeError):
                count = 0
        # manifest first: from then on no reader picks the version up
        self._call(lambda: self._of(name).unlink(self._manifest_key(name, fp, version)))
        keys = [self._chunk_key(name, fp, version, i) for i in range(count)]
        if keys:
            self._call(lambda: self._of(name).unlink(*keys))
        self._call(lambda: self._of(name).zrem(f"{prefix}:index", f"{fp}:{version}"))

    def gc(self, keep: int = 3, dry_run: bool = False) -> list[Removal]:
        """Keep the newest `keep` (at least 1) versions per name and fingerprint, and drop index entries whose
        manifest expired; returns what went (with `dry_run`, what would go)."""
        if keep < 1:
            raise ValueError(f"keep must be 1 or more, not {keep}: to delete every version of a name, use rm")
        removed = []
        for name in self.names():
            seen: dict[str, int] = {}
            prefix = self._prefix(name)
            for entry in self._call(lambda n=name, p=prefix: self._of(n).zrevrange(f"{p}:index", 0, -1)):
                fp, _, version = entry.decode().partition(":")
                size = self._payload_bytes(name, fp, version)
                exists = self._call(lambda n=name, f=fp, v=version: self._of(n).exists(self._manifest_key(n, f, v)))
                seen[fp] = seen.get(fp, 0) + 1
                if not exists or seen[fp] > keep:
                    if not dry_run:
                        self._delete_version(name, fp, version)
                    removed.append(Removal(name, version, size))
            if not dry_run and not self._call(lambda n=name, p=prefix: self._of(n).zcard(f"{p}:index")):
                self._call(lambda n=name: self.client.srem(self._names_key(), n))
        return removed

    # -- single flight ------------------------------------------------------------------------------------------
    def lease(self, name: str, fp: str, holder: str) -> Lease:
        return Lease(self, f"{self._prefix(name)}:lease:{fp}", holder)


# Redis's documented lock pattern: compare the holder's token and act in one server-side step, so a lease that
# expired and was taken by a collaborator in between is never deleted or extended by its old holder.
_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"
_RENEW = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('expire', KEYS[1], ARGV[2]) else return 0 end"


class Lease:
    """`SET NX EX` lease that a thread renews while the cell runs; a dead holder's lease simply expires."""

    def __init__(self, hub: RedisHub, key: str, holder: str, ttl: int = LEASE_TTL) -> None:
        self.hub, self.key, self.ttl = hub, key, ttl
        self.token = json.dumps({"holder": holder, "since": time.time(), "id": uuid.uuid4().hex})
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def acquire(self) -> dict[str, Any] | None:
        """Take the lease; returns None on success, else the current holder's info."""
        hub = self.hub
        if hub._call(lambda: hub.client.set(self.key, self.token, nx=True, ex=self.ttl)):
            self._thread = threading.Thread(target=self._renew, name="jcc-lease", daemon=True)
            self._thread.start()
            return None
        raw = hub._call(lambda: hub.client.get(self.key))
        try:
            return json.loads(raw) if raw else {"holder": "unknown", "since": time.time()}
        except ValueError:
            return {"holder": "unknown", "since": time.time()}

    def _renew(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            try:
                if not self.hub.client.eval(_RENEW, 1, self.key, self.token, self.ttl):
                    return  # expired and maybe taken by someone else: not ours to extend
            except Exception:  # the hub went away: the lease expires by itself
                return

    def held(self) -> bool:
        """Whether anyone holds this lease now (a holder that finished or died has let it go)."""
        hub = self.hub
        return bool(hub._call(lambda: hub.client.exists(self.key)))

    def release(self) -> None:
        self._stop.set()
        if self._thread is None:
            return
        try:
            self.hub.client.eval(_RELEASE, 1, self.key, self.token)
        except Exception:  # the hub went away: the lease expires by itself
            pass


# -- chunk encoding, on worker threads (zstd and hashlib release the GIL) ----------------------------------------
_SAMPLE = 64 << 10


def _encode(piece: bytes) -> tuple[bytes, bool, str, int]:
    """(stored bytes, compressed?, their sha256, raw length). A sample decides: kernels that do not compress
    (cubins, random weights) are sent as they are, without spending a compression pass on them."""
    import zstandard

    sample = piece[:_SAMPLE]
    if len(zstandard.ZstdCompressor(level=1).compress(sample)) < 0.9 * len(sample):
        data = zstandard.ZstdCompressor(level=3).compress(piece)
        if len(data) < len(piece):
            return data, True, hashlib.sha256(data).hexdigest(), len(piece)
    return _as_is(piece)


def _as_is(piece: bytes) -> tuple[bytes, bool, str, int]:
    return piece, False, hashlib.sha256(piece).hexdigest(), len(piece)


def _decompress(data: bytes, expected: int, what: str) -> memoryview:
    """`data` decompressed into this thread's buffer, which it must fill exactly."""
    import zstandard

    buf = file_copy.buffer(expected)
    try:  # the frame's declared size is checked first: a hostile chunk cannot make us write past `expected`
        if zstandard.frame_content_size(data) != expected:
            raise HubError(f"{what} does not decompress to the size its manifest implies")
        reader = zstandard.ZstdDecompressor().stream_reader(data)
        done = 0
        while done < expected and (n := reader.readinto(buf[done:expected])):
            done += n
        if done != expected or reader.read(1):
            raise HubError(f"{what} does not decompress to the size its manifest implies")
    except zstandard.ZstdError as exc:
        raise HubError(f"{what} fails to decompress: {exc}") from None
    return buf[:expected]
