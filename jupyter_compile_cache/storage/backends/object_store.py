"""Object-store hubs: `s3://BUCKET/PREFIX` (AWS S3 or any S3-compatible store: MinIO, Ceph RGW, Cloudflare R2),
`gs://BUCKET/PREFIX` (Google Cloud Storage) and `az://CONTAINER/PREFIX` (Azure Blob Storage), all through obstore, one
maintained client (docs/results.md has its measurements against boto3). Credentials come the way each cloud's own tools
find them (cloud_credentials.py; the table in docs/reference.md), never in the URL, a message or a file.

Each key is one object (storage/backends/keys.py `object_name`) with its expiry in the object's metadata, seconds
since the epoch or 0 for never (`jcc-expires`; `jccexpires` on Azure, which takes no `-` there). A reader takes an
expired object for an absent one, and `hub gc` sweeps them; expiry compares clocks, so the machines sharing a hub need
synchronised clocks (NTP). Single flight is a lease object written only if absent (S3 and Azure `If-None-Match: *`,
GCS `ifGenerationMatch=0`) and renewed, broken and released only if unchanged since it was read (the ETag; GCS the
generation): of two writers, the store refuses the second.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any, ClassVar, TypeVar
from urllib.parse import urlsplit

from ..clock import SYSTEM_CLOCK, Clock
from . import after_fork
from .base import HubError, HubRefused
from .cloud_credentials import MISSING_CREDENTIAL, aws_credentials, azure_credentials, google_credentials
from .keys import key_of, object_name

T = TypeVar("T")

# the metadata that holds a key's expiry, by scheme (the S3 hub's name since its first release)
EXPIRES = {"s3": "jcc-expires", "gs": "jcc-expires", "az": "jccexpires"}
RELEASED = 1.0  # the expiry of a released lease: long past
CONCURRENCY = 8  # requests in flight at once: one connection moves far less than the wire carries
CLOUDS = {"s3": "S3", "gs": "Google Cloud Storage", "az": "Azure Blob Storage"}
# What each cloud's store answers where the bucket or container is not there, and where the credential is unknown.
NO_CONTAINER = ("ContainerNotFound", "NoSuchBucket", "The specified bucket does not exist", "bucket does not exist")
UNKNOWN_CREDENTIAL = ("AuthenticationFailed", "failed to authenticate", "InvalidAuthenticationInfo", "invalid_grant",
                      "401 Unauthorized", "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken",
                      "ExpiredToken")  # fmt: skip


def obstore_module(scheme: str) -> Any:
    try:
        import obstore
    except ImportError:
        raise HubError(
            f"an {scheme}:// hub needs obstore, which is not installed: pip install "
            f"'jupyter_compile_cache[{'s3' if scheme == 's3' else 'cloud'}]'"
        ) from None
    return obstore


def _check_url(url: str) -> None:
    parts = urlsplit(url)
    if parts.username is not None or parts.password is not None:
        raise ValueError(f"credentials never go in the URL: {MISSING_CREDENTIAL[parts.scheme]}")
    if parts.query or parts.fragment:
        settings = {"s3": "the endpoint and region come from AWS_ENDPOINT_URL and AWS_REGION",
                    "gs": "the credentials come from GOOGLE_APPLICATION_CREDENTIALS",
                    "az": "the account and credentials come from AZURE_STORAGE_CONNECTION_STRING"}  # fmt: skip
        raise ValueError(f"no query or fragment: {settings[parts.scheme]}")
    name = parts.netloc
    if parts.scheme == "s3" and not re.fullmatch(r"[a-z0-9.-]{3,63}", name):
        raise ValueError(f"the bucket {name!r} is not a bucket name (3 to 63 lowercase letters, digits, '.' and '-')")
    if parts.scheme == "gs" and not re.fullmatch(r"[a-z0-9][a-z0-9._-]{1,221}[a-z0-9]", name):
        raise ValueError(f"the bucket {name!r} is not a bucket name (lowercase letters, digits, '.', '-', '_')")
    if parts.scheme == "az" and not re.fullmatch(r"[a-z0-9](?!.*--)[a-z0-9-]{1,61}[a-z0-9]", name):
        raise ValueError(f"the container {name!r} is not a container name (3 to 63 lowercase letters, digits, '-')")


class ObjectStoreBackend:
    SCHEMES: ClassVar[tuple[str, ...]] = tuple(CLOUDS)
    USAGE: ClassVar[str] = (
        "s3://bucket/prefix, gs://bucket/prefix, az://container/prefix (credentials, endpoint and region as the "
        "aws, gcloud and az tools find them)"
    )
    keys_per_call = CONCURRENCY // 2
    push_calls_in_flight = pull_calls_in_flight = 2  # CONCURRENCY requests on the wire, no pause at a call's end
    torch_redis_url = None
    expiry_in_place = False
    check_url = staticmethod(_check_url)

    def __init__(
        self, url: str, connect_timeout: float = 2.0, timeout: float = 10.0, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self.clock = clock
        parts = urlsplit(url)
        self.url = self.display_url = url
        self.scheme, self.bucket = parts.scheme, parts.netloc
        self.prefix = "/".join(p for p in parts.path.split("/") if p)
        self.connect_timeout, self.timeout = connect_timeout, timeout
        self.credential: str | None = None  # what supplied the credential, for messages
        self._store: Any = None
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        after_fork.track(self)

    @property
    def kind(self) -> str:
        return {"s3": "s3", "gs": "gcs", "az": "azure"}[self.scheme]

    @property
    def _container_word(self) -> str:
        return "container" if self.scheme == "az" else "bucket"

    # -- connection ---------------------------------------------------------------------------------------------
    @property
    def store(self) -> Any:
        with self._lock:
            if self._store is None:
                self._store = self._connect()
            return self._store

    def _connect(self) -> Any:
        obstore_module(self.scheme)
        from obstore.store import AzureStore, GCSStore, S3Store

        provider = None
        if self.scheme == "s3":
            config, self.credential, provider = aws_credentials(os.environ)
            config["region"] = config["region"] or "us-east-1"
            if config.get("endpoint", "").startswith("http://"):
                config["allow_http"] = "true"  # a server the user named (MinIO on a private network, a test's)
        elif self.scheme == "az":
            config, self.credential = azure_credentials(os.environ)
            if "account_name" not in config and "use_emulator" not in config:
                raise HubError(
                    f"hub {self.display_url}: no Azure storage account: set AZURE_STORAGE_CONNECTION_STRING, or "
                    "AZURE_STORAGE_ACCOUNT (with AZURE_STORAGE_KEY, AZURE_STORAGE_SAS_TOKEN or `az login`)"
                )
            if config.get("endpoint", "").startswith("http://"):
                config["allow_http"] = "true"  # an emulator (Azurite) or a private endpoint the user named
        else:
            config, self.credential = google_credentials(os.environ)
        options = {"connect_timeout": f"{self.connect_timeout}s", "timeout": f"{self.timeout}s"}
        if config.pop("allow_http", None):  # a client option: GCS's configuration does not take it
            options["allow_http"] = "true"
        # one retry, as for S3: a store that is down costs two timeouts, not obstore's ten retries over 3 minutes
        retry = {"max_retries": 1, "retry_timeout": timedelta(seconds=self.timeout)}
        kind = {"s3": S3Store, "gs": GCSStore, "az": AzureStore}[self.scheme]
        extra = {"credential_provider": provider} if provider is not None else {}
        try:
            return kind(self.bucket, config=config, client_options=options, retry_config=retry, **extra)
        except Exception as exc:  # a key file that is not there or not one: obstore's words say which
            raise HubError(f"hub {self.display_url}: the {CLOUDS[self.scheme]} client could not start: "
                           f"{_words(exc)}") from None  # fmt: skip

    @property
    def pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(CONCURRENCY, thread_name_prefix=f"jcc-{self.scheme}")
            return self._pool

    def _object(self, key: str) -> str:
        return object_name(self.prefix, key)

    def _error(self, exc: Exception, action: str) -> HubError:
        """EXC in the user's terms: no credential, a credential the store does not know or that may not ACTION, a
        bucket or container that is not there, or the store unreachable; never a credential or a key."""
        import obstore.exceptions as errors

        text = str(exc)
        where = f"hub {self.display_url}"
        if any(code in text for code in NO_CONTAINER):
            return HubError(f"{where}: the {self._container_word} {self.bucket!r} does not exist")
        if "token request" in text.lower() or "169.254.169.254" in text or "metadata.google" in text:
            # no key of its own: the token had to come from the machine, and did not
            if self.credential is None:
                missing = MISSING_CREDENTIAL[self.scheme]
                return HubError(f"{where}: no {CLOUDS[self.scheme]} credential found: {missing}")
            return HubError(f"{where}: no token from {self.credential}: {_words(exc)}")
        code = next((code for code in UNKNOWN_CREDENTIAL if code in text), None)
        if isinstance(exc, errors.UnauthenticatedError) or code is not None:
            return HubRefused(
                f"{where}: the store refused the credential from {self.credential or 'this machine'} "
                f"({code + ': ' if code else ''}a wrong key or secret, or an expired token)",
                "log in",
            )
        if isinstance(exc, errors.PermissionDeniedError) or "403 Forbidden" in text:
            return HubRefused(f"{where}: this credential is not permitted to {action} here", action, True)
        return HubError(f"{where}: {_words(exc)}")

    def _call(self, fn: Callable[[], T], action: str = "read") -> T:
        try:
            return fn()
        except HubError:
            raise
        except Exception as exc:  # obstore's errors and the connection's: all a hub failure
            raise self._error(exc, action) from None

    def _each(self, keys: Sequence[str], fn: Callable[[str], T], action: str) -> list[T]:
        """FN(key) for every key, CONCURRENCY at a time; a refusal of some keys (and not all) is a HubRefused that
        carries the others' results (None where refused)."""
        self._call(lambda: self.store)  # a client that cannot start fails once, not once per key

        def one(key: str) -> tuple[T | None, Exception | None]:
            try:
                return fn(key), None
            except Exception as exc:  # collected: one key's failure must not hide the others'
                return None, exc

        outcomes = list(self.pool.map(one, keys)) if len(keys) > 1 else [one(key) for key in keys]
        refusal = None
        for _value, exc in outcomes:
            if exc is None:
                continue
            error = exc if isinstance(exc, HubError) else self._error(exc, action)
            if not isinstance(error, HubRefused) or not error.denied:
                raise error
            refusal = error
        values: list[Any] = [value for value, _exc in outcomes]
        if refusal is not None:
            raise HubRefused(str(refusal), refusal.action, True, values)
        return values

    # -- one object -----------------------------------------------------------------------------------------------
    def _absent(self, exc: Exception) -> bool:
        import obstore.exceptions as errors

        if not isinstance(exc, (errors.NotFoundError, FileNotFoundError)):
            return False
        if any(code in str(exc) for code in NO_CONTAINER):
            raise self._error(exc, "read") from None
        return True

    def _get(self, key: str, head: bool = False) -> tuple[bytes, float, dict[str, str]] | None:
        """(value, expiry, version) of KEY (no value with HEAD), None when absent."""
        obstore = obstore_module(self.scheme)

        try:
            reply = obstore.get(self.store, self._object(key), options={"head": True} if head else None)
        except Exception as exc:
            if self._absent(exc):
                return None
            raise
        version = {name: reply.meta[name] for name in ("e_tag", "version") if reply.meta.get(name)}
        value = b"" if head else bytes(reply.bytes())
        try:
            expires = float(reply.attributes.get(EXPIRES[self.scheme], "0"))
        except ValueError:
            expires = 0.0
        return value, expires, version

    def _put(self, key: str, value: bytes, expires: float, mode: Any = None) -> None:
        obstore = obstore_module(self.scheme)

        obstore.put(self.store, self._object(key), value, attributes={EXPIRES[self.scheme]: repr(expires)}, mode=mode,
                    use_multipart=False)  # fmt: skip

    def _expires(self, ttl: float | None) -> float:
        return self.clock.time() + ttl if ttl else 0.0

    def _live(self, expires: float) -> bool:
        return expires == 0 or expires > self.clock.time()

    # -- the protocol -------------------------------------------------------------------------------------------
    def ping(self) -> None:
        obstore = obstore_module(self.scheme)

        def first_page() -> None:
            for _page in obstore.list(self.store, prefix=self._object("jcc"), chunk_size=1):
                break

        self._call(first_page)

    def get(self, keys: Sequence[str]) -> list[bytes | None]:
        def value(key: str) -> bytes | None:
            found = self._get(key)
            return found[0] if found is not None and self._live(found[1]) else None

        return self._each(keys, value, "read")

    def put(self, items: Mapping[str, bytes], ttl: int | None = None) -> None:
        expires = self._expires(ttl)
        self._each(list(items), lambda key: self._put(key, items[key], expires), "write")

    def touch(self, keys: Sequence[str], ttl: int | None) -> None:
        """The value written again with the new expiry (an object store rewrites metadata only with the object; the
        hub never asks this of a backend whose `expiry_in_place` is False, but the protocol has it)."""
        expires = self._expires(ttl)

        def rewrite(key: str) -> None:
            found = self._get(key)
            if found is not None:
                self._put(key, found[0], expires)

        self._each(keys, rewrite, "write")

    def delete(self, keys: Sequence[str]) -> None:
        obstore = obstore_module(self.scheme)

        def remove(key: str) -> None:
            try:
                obstore.delete(self.store, self._object(key))
            except Exception as exc:
                if not self._absent(exc):
                    raise

        self._each(keys, remove, "write")

    def missing(self, keys: Sequence[str]) -> list[str]:
        def gone(key: str) -> bool:
            found = self._get(key, head=True)
            return found is None or not self._live(found[1])

        return [key for key, absent in zip(keys, self._each(keys, gone, "read")) if absent]

    def list(self, prefix: str) -> list[str]:
        obstore = obstore_module(self.scheme)

        # obstore lists a folder (whole path parts): the folder around PREFIX, then the keys that start with it
        folder = self._object(prefix).rpartition("/")[0]

        def names() -> list[str]:
            return [entry["path"] for page in obstore.list(self.store, prefix=folder or None) for entry in page]

        keys = [key_of(self.prefix, name) for name in self._call(names)]
        return [key for key in keys if key is not None and key.startswith(prefix)]

    def sweep(self) -> int:
        """Delete what expired. No store here deletes on a condition, so an object rewritten between the read of its
        expiry and the delete goes too; a hub rewrites a key only for a lease or a version pushed again, and a pull
        that then misses a chunk is a miss, never another answer."""
        obstore = obstore_module(self.scheme)

        def swept(key: str) -> bool:
            found = self._get(key, head=True)
            if found is None or self._live(found[1]):
                return False
            try:
                obstore.delete(self.store, self._object(key))
            except Exception as exc:
                if not self._absent(exc):
                    raise
            return True

        return sum(self._each(self.list("jcc:"), swept, "write"))

    # -- the lease ----------------------------------------------------------------------------------------------
    def acquire(self, key: str, token: bytes, ttl: int) -> bytes | None:
        for _ in range(5):
            if self._conditional(lambda: self._put(key, token, self._expires(ttl), mode="create")):
                return None
            found = self._call(lambda: self._get(key))
            if found is None:  # released in between
                continue
            holder, expires, version = found
            if self._live(expires):
                return holder
            if self._conditional(lambda version=version: self._put(key, token, self._expires(ttl), mode=version)):
                return None  # broken: it had expired
        return b""

    def renew(self, key: str, token: bytes, ttl: int) -> bool:
        found = self._call(lambda: self._get(key))
        if found is None or found[0] != token or not self._live(found[1]):
            return False
        return self._conditional(lambda: self._put(key, token, self._expires(ttl), mode=found[2]))

    def release(self, key: str, token: bytes) -> None:
        found = self._call(lambda: self._get(key))
        if found is None or found[0] != token:
            return
        self._conditional(lambda: self._put(key, b"", RELEASED, mode=found[2]))  # written expired, on a condition

    def _conditional(self, write: Callable[[], None]) -> bool:
        """Run a conditional WRITE: False when the store refused its condition (someone else wrote first)."""
        import obstore.exceptions as errors

        try:
            write()
            return True
        except (errors.AlreadyExistsError, errors.PreconditionError, FileExistsError):
            return False
        except Exception as exc:
            if isinstance(exc, errors.NotSupportedError) or "501 Not Implemented" in str(exc):
                raise HubError(
                    f"hub {self.display_url}: this store does not support conditional writes (If-None-Match), "
                    "which single flight needs"
                ) from None
            raise self._error(exc, "write") from None

    def forget_connections(self) -> Any:
        # the worker threads did not come along through the fork: a new pool too
        dropped = (self._store, self._pool)
        self._store, self._pool, self._lock = None, None, threading.Lock()
        return dropped

    def reconnect(self) -> None:
        pass  # obstore retries a broken connection on a fresh one itself

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None
        self._store = None


def _words(exc: Exception) -> str:
    """What obstore's error says, in a line: the server's status and code, or the connection's failure, with the
    endpoint and never the object (which says nothing to the user) nor a secret (obstore puts none in a message)."""
    text = str(exc)
    endpoint = re.search(r"(https?://[^/\s\"']+)", text)
    where = endpoint.group(1) if endpoint else "the store"
    status = re.search(r"non-2xx status code: (\d{3}[^:<]*)", text)
    if status:
        code = re.search(r"<Code>(\w+)</Code>", text)
        return f"{where} answered {status.group(1).strip()}" + (f" ({code.group(1)})" if code else "")
    if "ConnectionRefused" in text or "tcp connect error" in text:
        return f"{where} refused the connection (is the server up, and the endpoint right?)"
    if "Timeout" in text or "timed out" in text:
        return f"{where} did not answer in time"
    if "error sending request" in text or "connection closed" in text.lower():
        return f"the connection to {where} failed (is the server up, and the endpoint right?)"
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    first = re.sub(r"^Generic \w+ error: ", "", first)
    return re.sub(r"(https?://[^/\s\"']+)[^\s\"']*", r"\1", first)
