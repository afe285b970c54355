"""The Redis backend: `redis://`, `rediss://` (TLS), `unix://`, and `redis+cluster://` (a Redis Cluster named
outright; a `redis://` URL that names a cluster node works too: the node is asked once).

Every key is written with its group (storage/backends/keys.py: one bundle, `namespace/name`) as its hash tag,
`jcc:{namespace/name}:...`, so on a cluster one bundle lives in one slot: a call's keys go to the one node that
serves them, as a plain client, so pipelines work as on a single server and a hung node costs one timeout per round
trip. Listing is `SCAN MATCH`, on that node when the prefix names a whole tag, else on every primary. Leases are
`SET NX EX`, renewed and released by compare-and-act scripts (Redis's documented lock pattern: an old holder never
extends or deletes a collaborator's lease).

redis-py is imported when the hub is first used; missing, it is a HubError like any other hub failure, so a cell,
`list` or the CLI say which extra to install and carry on with the local store.
"""

from __future__ import annotations

import errno
import os
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, TypeVar
from urllib.parse import urlsplit

from ..clock import SYSTEM_CLOCK, Clock
from . import after_fork
from .base import HubConnectionLost, HubError, HubRefused
from .keys import braced, unbraced
from .url import redact

# The password for a URL that names no password (redis://USER@host/0): what a notebook cell or `%config` shows then
# holds none. The URL's own password wins.
PASSWORD_ENV = "JUPYTER_COMPILE_CACHE_HUB_PASSWORD"
SCAN_COUNT = 10_000  # keys the server looks at per SCAN round trip: few round trips on a large database

_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"
_RENEW = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('expire', KEYS[1], ARGV[2]) else return 0 end"

T = TypeVar("T")


# The commands the hub sends (our lease scripts call GET, DEL and EXPIRE themselves), for a team's ACL user.
WRITER_COMMANDS = "+@connection +info +scan +get +exists +set +expire +persist +unlink +del +eval +multi +exec +discard"
READER_COMMANDS = "+@connection +info +scan +get +exists"


def acl_rule(user: str, password: str, namespace: str, read_only: bool = False) -> str:
    """The Redis `ACL SETUSER` line for a team's user: NAMESPACE's keys (and those of the namespaces below it, e.g.
    `NS/toolchain`) and nothing else; with `read_only`, reading them only (restores work; pushes and leases are
    refused, and told once). Every key of a namespace starts with `jcc:{NAMESPACE/` here (storage/hub.py's layout,
    the group in braces)."""
    keys = f"%R~jcc:{{{namespace}/*" if read_only else f"~jcc:{{{namespace}/*"
    commands = READER_COMMANDS if read_only else WRITER_COMMANDS
    return f"ACL SETUSER {user} reset on >{password} {keys} -@all {commands}"


def redis_module() -> Any:
    try:
        import redis
    except ImportError:
        raise HubError(
            "the hub needs redis-py, which is not installed: pip install 'jupyter_compile_cache[hub]'"
        ) from None
    return redis


def _check_url(url: str) -> None:
    """A URL redis-py can open: redis://[user:password@]host[:port][/db], rediss://..., unix:///path,
    redis+cluster://host:port; redis-py's own rules (query options) where it is loaded already: importing it here would
    add 0.25 s to `%load_ext`, and a URL it refuses is a HubError at first use anyway."""
    import sys
    from urllib.parse import parse_qs

    parts = urlsplit(url)
    parts.port  # noqa: B018  (raises ValueError for a port that is not a number in range)
    if parts.scheme == "unix":
        if not parts.path:
            raise ValueError("no socket path")
    elif not parts.hostname:
        raise ValueError("no host")
    query = parse_qs(parts.query)
    db = (parts.path.strip("/") if parts.scheme != "unix" else "") or query.get("db", ["0"])[0]
    if not db.isdigit():
        raise ValueError(f"the database {db!r} is not a number")
    tls_options = sorted(name for name in query if name.startswith("ssl_"))
    if tls_options and parts.scheme != "rediss":
        raise ValueError(f"{tls_options[0]} is an option of TLS URLs: rediss://host:port/db?{tls_options[0]}=...")
    for name in ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile"):
        for path in query.get(name, []):
            if not os.path.isfile(path):
                raise ValueError(f"the file {path} that {name} names is not there")
    connection = sys.modules.get("redis.connection")
    if connection is not None:
        connection.parse_url(_plain(url))


def _plain(url: str) -> str:
    return "redis://" + url.removeprefix("redis+cluster://") if url.startswith("redis+cluster://") else url


def _tag(key: str) -> str | None:
    start = key.find("{")
    end = key.find("}", start + 1)
    return key[start : end + 1] if start >= 0 and end > start + 1 else None


def _handshake_bounded(redis: Any) -> type:
    """redis-py's TLS connection, its handshake bounded by the connect timeout: redis-py runs it under the read
    timeout, so a `rediss://` URL on a plain Redis port stalled a cell 10 s though the connect timeout was 2 s."""

    class HandshakeBoundedSSLConnection(redis.connection.SSLConnection):
        def _wrap_socket_with_ssl(self, sock: Any) -> Any:
            sock.settimeout(self.socket_connect_timeout)
            wrapped = super()._wrap_socket_with_ssl(sock)
            wrapped.settimeout(self.socket_timeout)
            return wrapped

    return HandshakeBoundedSSLConnection


class RedisBackend:
    SCHEMES: ClassVar[tuple[str, ...]] = ("redis", "rediss", "unix", "redis+cluster")
    USAGE: ClassVar[str] = (
        "redis://host:port/db, rediss://... for TLS, redis+cluster://host:port, unix:///path/to/socket"
    )
    keys_per_call = 2  # chunks per pipeline: more makes redis-py's reply buffer copy more
    push_calls_in_flight = 2  # 1 GB: 0.95-1.01x the client's floor with two, 1.09-1.36x with one
    pull_calls_in_flight = 1  # a second connection's 16 MB reply buffer made a pull's memory vary (87-120 MB)
    expiry_in_place = True
    check_url = staticmethod(_check_url)

    def __init__(
        self, url: str, connect_timeout: float = 2.0, timeout: float = 10.0, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self.url = url  # `clock` is not used: Redis expires keys by its own clock
        self.display_url = redact(url)
        self.connect_timeout, self.timeout = connect_timeout, timeout
        self._client: Any = None
        self._lock = threading.Lock()
        after_fork.track(self)

    # -- connection ---------------------------------------------------------------------------------------------
    @property
    def client(self) -> Any:
        """One client for every thread of the process (its pool lends each command a connection of its own). Made
        under a lock: two threads that each made one left one of them unreferenced, and collecting a redis-py client
        closes its pool, connections in use included: another thread's reply was cut off."""
        client = self._client
        if client is None:
            with self._lock:
                if self._client is None:
                    self._client = self._call(self._connect)
                client = self._client
        return client

    def forget_connections(self) -> Any:
        client, self._client, self._lock = self._client, None, threading.Lock()
        return client

    def reconnect(self) -> None:
        """After a lost connection: the idle connections are dropped, so the next call opens a fresh one; those
        other threads are using stay theirs."""
        client = self._client
        if client is not None and not self.is_cluster:
            client.connection_pool.disconnect(inuse_connections=False)

    @property
    def is_cluster(self) -> bool:
        from redis.cluster import RedisCluster

        return isinstance(self.client, RedisCluster)

    @property
    def kind(self) -> str:
        return "redis cluster" if self.is_cluster else "redis"

    def _connect(self) -> Any:
        redis = redis_module()
        options = {
            "socket_connect_timeout": self.connect_timeout,
            "socket_timeout": self.timeout,
            "health_check_interval": 0,
            # redis-py reads replies in pieces of this size: with its 64 KiB default a pull takes about twice as long
            "socket_read_size": 16 << 20,
        }
        url = _plain(self.url)
        password = os.environ.get(PASSWORD_ENV)
        if password and urlsplit(url).password is None:  # kept out of the URL, so out of notebooks and `%config`
            options["password"] = password
        single = dict(options)
        if url.startswith("rediss://") and hasattr(redis.connection.SSLConnection, "_wrap_socket_with_ssl"):
            single["connection_class"] = _handshake_bounded(redis)
        try:
            client = redis.Redis.from_url(url, retry_on_timeout=False, **single)
        except ValueError as exc:
            raise HubError(f"bad hub URL {self.display_url}: {exc}") from None
        if not self.url.startswith("redis+cluster://"):
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
        return RedisCluster.from_url(url, retry=Retry(NoBackoff(), 1), **options)

    def _node(self, key: str) -> Any:
        """The client for KEY's slot: on a cluster the node serving it, as a plain client."""
        client = self.client
        if not self.is_cluster:
            return client
        return client.get_node_from_key(key).redis_connection

    @property
    def torch_redis_url(self) -> str | None:
        """torch's remote caches open `redis.Redis.from_url(URL)`: a single server, its password in the URL. A hub
        not connected yet is taken for what its URL says (torch finds a server that is down on its own)."""
        cluster = self.url.startswith("redis+cluster://") or (self._client is not None and self.is_cluster)
        if cluster or (os.environ.get(PASSWORD_ENV) and urlsplit(_plain(self.url)).password is None):
            return None
        return _plain(self.url)

    @property
    def user(self) -> str:
        return urlsplit(_plain(self.url)).username or "default"

    def _refusal(self, exc: Exception, action: str) -> HubRefused | None:
        """The server's refusal, in words that name no key (an ACL's raw message quotes them); None when EXC is
        no refusal. ACTION: what the call was doing, "read" or "write"."""
        redis = redis_module()
        errors = redis.exceptions
        if isinstance(exc, redis.AuthenticationError):
            return HubRefused(
                f"hub {self.display_url}: the hub refused the login of user {self.user!r} (a wrong password, an "
                "unknown or disabled user, or a hub that needs a user and password in its URL)",
                "log in",
            )
        if isinstance(exc, getattr(errors, "NoPermissionError", ())) or str(exc).startswith("NOPERM"):
            message = f"hub {self.display_url}: user {self.user!r} is not permitted to {action} here"
            return HubRefused(message, action, denied=True)
        if isinstance(exc, getattr(errors, "OutOfMemoryError", ())) or str(exc).startswith("OOM"):
            return HubRefused(
                f"hub {self.display_url}: the hub is full (Redis reached its maxmemory and evicts nothing): "
                "nothing more can be written until space is freed (`hub gc`)",
                "write",
            )
        if isinstance(exc, getattr(errors, "ReadOnlyError", ())):
            return HubRefused(f"hub {self.display_url}: the server is a read-only replica", "write")
        return None

    def _call(self, fn: Callable[[], T], action: str = "read") -> T:
        """Run a Redis operation; every failure becomes a HubError (a HubRefused when the server refused it) whose
        message never holds the password or a key."""
        redis = redis_module()
        try:
            return fn()
        except HubError:
            raise
        except redis.RedisError as exc:
            refusal = self._refusal(exc, action)
            if refusal is not None:
                raise refusal from None
            # broken under a call, not refused at connect (a server that is down: redis-py has retried that already)
            lost = isinstance(exc, redis.ConnectionError) and "connecting to" not in str(exc)
            raise self._failure(exc, lost) from None
        except (AttributeError, ValueError) as exc:
            # redis-py reading a reply on a connection closed under it calls readline() on None, or reads a closed
            # buffer (its own comment in cluster.py says so): a connection error, never the user's cell's
            raise HubConnectionLost(f"hub {self.display_url}: the connection closed under a reply ({exc})") from None
        except (TimeoutError, OSError) as exc:
            raise self._failure(exc) from None

    def _failure(self, exc: Exception, lost: bool = False) -> HubError:
        """EXC in words without the password; `lost`: a connection that broke (reset, closed), which a retry on a
        fresh one may get past, unlike a timeout or a refusal."""
        message = str(exc).replace(self.url, self.display_url)
        if "password" in message.lower() and "invalid" not in message.lower():
            message = type(exc).__name__
        if "CERTIFICATE_VERIFY_FAILED" in message:
            message = (
                f"the hub's TLS certificate is not trusted ({message}); pass the CA that signed it in the URL: "
                "rediss://host:port/0?ssl_ca_certs=/path/to/ca.pem"
            )
        kind = HubConnectionLost if lost else HubError
        return kind(f"hub {self.display_url}: {_in_our_words(message) or type(exc).__name__}")

    # -- the protocol -------------------------------------------------------------------------------------------
    def ping(self) -> None:
        self._call(lambda: self.client.ping())

    def _each(self, keys: Sequence[str], command: Callable[[Any, str], Any], transaction: bool = False) -> list[Any]:
        """COMMAND(pipeline, key) for every key, in one round trip to the node that serves them; a reply that is an
        error comes back in its place (the caller says what it means)."""
        pipe = self._node(keys[0]).pipeline(transaction=transaction)
        for key in keys:
            command(pipe, key)
        return pipe.execute(raise_on_error=False)

    def _replies(self, keys: Sequence[str], command: Callable[[Any, str], Any], action: str, **kw: Any) -> list[Any]:
        """`_each`'s replies, an error raised as a HubError; a refusal (an ACL that allows some of the keys and not
        others) as a HubRefused carrying the allowed ones' replies (None where refused)."""
        replies = self._call(lambda: self._each(keys, command, **kw), action)
        refusal = None
        for i, reply in enumerate(replies):
            if isinstance(reply, Exception):
                refusal = self._refusal(reply, action)
                if refusal is None:
                    raise self._failure(reply)
                replies[i] = None
        if refusal is not None:
            raise HubRefused(str(refusal), refusal.action, refusal.denied, replies)
        return replies

    def get(self, keys: Sequence[str]) -> list[bytes | None]:
        keys = [braced(key) for key in keys]
        return self._replies(keys, lambda pipe, key: pipe.get(key), "read") if keys else []

    def put(self, items: Mapping[str, bytes], ttl: int | None = None) -> None:
        values = {braced(key): value for key, value in items.items()}
        if values:
            self._replies(list(values), lambda pipe, key: pipe.set(key, values[key], ex=ttl), "write")

    def touch(self, keys: Sequence[str], ttl: int | None) -> None:
        keys = [braced(key) for key in keys]
        if keys:  # in one transaction: every chunk of a bundle kept, or none

            def expire(pipe: Any, key: str) -> Any:
                return pipe.expire(key, ttl) if ttl else pipe.persist(key)

            self._replies(keys, expire, "write", transaction=True)

    def delete(self, keys: Sequence[str]) -> None:
        keys = [braced(key) for key in keys]
        if keys:
            self._call(lambda: self._node(keys[0]).unlink(*keys), "write")

    def missing(self, keys: Sequence[str]) -> list[str]:
        there = self._replies([braced(k) for k in keys], lambda pipe, key: pipe.exists(key), "read") if keys else []
        return [key for key, found in zip(keys, there) if not found]

    def list(self, prefix: str) -> list[str]:
        prefix = braced(prefix)
        pattern = "".join("\\" + c if c in "*?[]\\" else c for c in prefix) + "*"

        def scan() -> list[str]:
            if not self.is_cluster:
                nodes = [self.client]
            elif _tag(prefix) is not None:
                nodes = [self._node(prefix)]
            else:
                nodes = [node.redis_connection for node in self.client.get_primaries()]
            return [unbraced(k.decode()) for node in nodes for k in node.scan_iter(match=pattern, count=SCAN_COUNT)]

        return self._call(scan)

    def acquire(self, key: str, token: bytes, ttl: int) -> bytes | None:
        key = braced(key)
        node = self._call(lambda: self._node(key))
        for _ in range(3):  # the holder's lease may expire between our SET and GET: then try again
            if self._call(lambda: node.set(key, token, nx=True, ex=ttl), "write"):
                return None
            holder = self._call(lambda: node.get(key))
            if holder is not None:
                return holder
        return b""

    def renew(self, key: str, token: bytes, ttl: int) -> bool:
        key = braced(key)
        return bool(self._call(lambda: self._node(key).eval(_RENEW, 1, key, token, ttl), "write"))

    def release(self, key: str, token: bytes) -> None:
        key = braced(key)
        self._call(lambda: self._node(key).eval(_RELEASE, 1, key, token), "write")

    def sweep(self) -> int:
        return 0  # Redis expires keys itself

    def close(self) -> None:
        if self._client is not None:
            try:
                self._client.close()
            except Exception:  # closing is best effort: the process may be exiting
                pass
            self._client = None


def _in_our_words(message: str) -> str:
    """redis-py's commonest connection failures said as ours ('Error 111 connecting to h:1. Connection refused.')."""
    connecting = re.match(r"Error (-?\d+) connecting to (\S+?)\.? (.*?)\.?$", message)
    if connecting:
        number, where, reason = int(connecting.group(1)), connecting.group(2), connecting.group(3)
        if number == errno.ECONNREFUSED:
            return f"{where} refused the connection (is the server up, and the URL right?)"
        if number in (-2, -3, -5):  # the resolver's: no such name, a temporary failure, no address
            return f"the host of {where} is not known ({reason})"
        return f"could not connect to {where}: {reason}"
    timeout = re.match(r"Timeout connecting to server", message)
    if timeout:
        return "the server did not answer in time"
    reading = re.match(r"Timeout (?:reading from|writing to) (\S+)", message)
    if reading:  # connected, then no answer: something listens there that does not speak Redis, or one stalled
        return f"{reading.group(1)} took the connection but did not answer in time (is it a Redis server, and up?)"
    if "DB index is out of range" in message:
        return "the server has no database of the URL's number (the /N after the port: 0 to 15 unless configured)"
    if message.startswith("Connection closed by server"):
        return "the server closed the connection (is it a Redis server, and the URL right?)"
    if message.startswith("Protocol Error"):
        return f"the server is not a Redis server (it answered {message.partition(':')[2].strip()})"
    return message
