"""A read-only hub over plain https: `https://host/path`, the bundles a publisher put on any static web server or
public bucket URL. `jupyter-compile-cache hub publish DIR` writes them: a folder hub's layout (storage/backends/
folder.py: each key one file, a 12-byte header with its expiry, then the value) and the listing a static server
cannot make, `jcc-index.json`. Serve DIR as it is (nginx, `python -m http.server`, GitHub Pages, a bucket's website).

Pulls check every chunk's digest, and the signature where a team secret is set, as on every hub (storage/hub.py).
Anything that would write (a push, a lease, `hub rm`, `hub gc`) is refused in one line. The server's certificate is
checked against the system's CAs (`SSL_CERT_FILE` names another bundle), and `HTTPS_PROXY` is used, as by pip and
curl. Plain `http://` is not a hub URL: it is more often a Redis address with the wrong scheme than a web server.
"""

from __future__ import annotations

import json
import os
import socket
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar, NoReturn
from urllib.parse import quote, urlsplit

from ..clock import SYSTEM_CLOCK, Clock
from . import after_fork
from .base import HubError, HubRefused
from .folder import HEADER, MAGIC, FolderBackend, key_path

INDEX = "jcc-index.json"  # the listing: {"format": 1, "keys": [...]}
MAX_INDEX_BYTES = 64 << 20  # a listing larger than this is not one of ours
CONCURRENCY = 8


def _check_url(url: str) -> None:
    parts = urlsplit(url)
    if not parts.hostname:
        raise ValueError("an https hub is https://host/path")
    if parts.password is not None or parts.query or parts.fragment:
        raise ValueError("no password, query or fragment: an https hub is public, its bundles signed")


def write_index(folder: str) -> int:
    """Write FOLDER's listing (every live key of the folder hub there) for a static server; returns how many keys
    it lists. Written under a temporary name, then renamed: a reader sees the old listing or the new one."""
    keys = sorted(FolderBackend(f"file://{os.path.abspath(folder)}").list("jcc:"))
    path = os.path.join(folder, INDEX)
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "w") as f:
        json.dump({"format": 1, "keys": keys}, f)
    os.replace(temporary, path)
    return len(keys)


class HttpsBackend:
    SCHEMES: ClassVar[tuple[str, ...]] = ("https",)
    USAGE: ClassVar[str] = "https://host/path (read-only: a folder `hub publish DIR` wrote, served as static files)"
    kind = "https"
    read_only = True  # its refusals are worded here (storage/hub.py `_refused`)
    keys_per_call = CONCURRENCY // 2
    push_calls_in_flight = pull_calls_in_flight = 2
    torch_redis_url = None
    expiry_in_place = True  # nothing is written here: the hub never asks
    check_url = staticmethod(_check_url)

    def __init__(
        self, url: str, connect_timeout: float = 2.0, timeout: float = 10.0, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self.clock = clock
        self.url = self.display_url = url.rstrip("/")
        self.timeout = max(connect_timeout, timeout)  # urllib has one timeout for the connection and each read
        self._opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=ssl.create_default_context()))
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        after_fork.track(self)

    @property
    def pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(CONCURRENCY, thread_name_prefix="jcc-https")
            return self._pool

    def _address(self, key: str) -> str:
        return self.url + "/" + "/".join(quote(part, safe="") for part in key_path(key))

    def _fetch(self, address: str, limit: int | None = None, header_only: bool = False) -> bytes | None:
        """The body at ADDRESS (its first HEADER.size bytes with HEADER_ONLY, where the server takes a Range), None
        when the server has no such file; every other failure a HubError in our words."""
        request = urllib.request.Request(
            address, headers={"Range": f"bytes=0-{HEADER.size - 1}"} if header_only else {}
        )
        try:
            with self._opener.open(request, timeout=self.timeout) as reply:
                body = reply.read(HEADER.size if header_only else (limit + 1 if limit else -1))
        except urllib.error.HTTPError as exc:
            if exc.code in (404, 410):
                return None
            if exc.code in (401, 403):
                refused = f"hub {self.display_url}: the server refused to serve it ({exc.code})"
                raise HubRefused(refused, "read", True) from None
            raise HubError(f"hub {self.display_url}: the server answered {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise HubError(f"hub {self.display_url}: {_words(exc, self.timeout)}") from None
        if limit is not None and len(body) > limit:
            raise HubError(f"hub {self.display_url}: {address.rsplit('/', 1)[-1]} is larger than any of ours")
        return body

    def _parsed(self, body: bytes | None) -> tuple[float, bytes] | None:
        if body is None or len(body) < HEADER.size:
            return None
        magic, expires = HEADER.unpack_from(body)
        return (expires, body[HEADER.size :]) if magic == MAGIC else None

    def _live(self, expires: float) -> bool:
        return expires == 0 or expires > self.clock.time()

    # -- reading ------------------------------------------------------------------------------------------------
    def ping(self) -> None:
        if self._fetch(f"{self.url}/{INDEX}", header_only=True) is None:
            raise HubError(
                f"hub {self.display_url}: no {INDEX} there (is this the URL of a folder `hub publish` wrote?)"
            )

    def get(self, keys: Sequence[str]) -> list[bytes | None]:
        def value(key: str) -> bytes | None:
            found = self._parsed(self._fetch(self._address(key)))
            return found[1] if found is not None and self._live(found[0]) else None

        return list(self.pool.map(value, keys)) if len(keys) > 1 else [value(key) for key in keys]

    def missing(self, keys: Sequence[str]) -> list[str]:
        def gone(key: str) -> bool:
            found = self._parsed(self._fetch(self._address(key), header_only=True))
            return found is None or not self._live(found[0])

        return [key for key, absent in zip(keys, self.pool.map(gone, keys)) if absent]

    def list(self, prefix: str) -> list[str]:
        body = self._fetch(f"{self.url}/{INDEX}", limit=MAX_INDEX_BYTES)
        if body is None:
            raise HubError(
                f"hub {self.display_url}: no {INDEX} there (is this the URL of a folder `hub publish` wrote?)"
            )
        try:
            keys = json.loads(body)["keys"]
        except (ValueError, KeyError, TypeError):
            raise HubError(f"hub {self.display_url}: its {INDEX} is not a listing of ours") from None
        return [key for key in keys if isinstance(key, str) and key.startswith(prefix)]

    # -- writing: refused ---------------------------------------------------------------------------------------
    def _read_only(self) -> NoReturn:
        raise HubRefused(
            f"hub {self.display_url}: an https hub is read-only (its publisher writes it with "
            "`jupyter-compile-cache hub publish DIR` and serves DIR)",
            "write",
            denied=True,
        )

    def put(self, items: Mapping[str, bytes], ttl: int | None = None) -> None:
        self._read_only()

    def touch(self, keys: Sequence[str], ttl: int | None) -> None:
        self._read_only()

    def delete(self, keys: Sequence[str]) -> None:
        self._read_only()

    def acquire(self, key: str, token: bytes, ttl: int) -> bytes | None:
        self._read_only()

    def renew(self, key: str, token: bytes, ttl: int) -> bool:
        self._read_only()

    def release(self, key: str, token: bytes) -> None:
        self._read_only()

    def sweep(self) -> int:
        self._read_only()

    def forget_connections(self) -> Any:
        # the worker threads did not come along through the fork
        dropped = self._pool
        self._pool, self._lock = None, threading.Lock()
        return dropped

    def reconnect(self) -> None:
        pass  # a connection per request

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None


def _words(exc: BaseException, timeout: float) -> str:
    reason = getattr(exc, "reason", exc)
    if isinstance(reason, ssl.SSLCertVerificationError):
        return (
            f"the server's certificate is not trusted ({reason.verify_message}; SSL_CERT_FILE names the CA bundle "
            "to trust)"
        )
    if isinstance(reason, ConnectionRefusedError):
        return "the server refused the connection (is it up, and the URL right?)"
    if isinstance(reason, (socket.timeout, TimeoutError)):
        return f"the server did not answer within {timeout:g} s"
    if isinstance(reason, socket.gaierror):
        return "the host name is not known"
    if isinstance(reason, ConnectionError):
        return "the connection broke"
    return str(getattr(reason, "strerror", None) or reason)
