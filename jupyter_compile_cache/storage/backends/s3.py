"""The S3 backend: `s3://BUCKET/PREFIX`, on AWS S3 or any S3-compatible store (MinIO, Ceph RGW, Cloudflare R2).

Credentials, region and endpoint come the way the AWS CLI finds them: `AWS_PROFILE`, `AWS_ACCESS_KEY_ID` and
`AWS_SECRET_ACCESS_KEY`, `~/.aws/config` and `~/.aws/credentials`, an instance role; `AWS_ENDPOINT_URL` (or
`AWS_ENDPOINT_URL_S3`) for a server other than AWS. They are never part of the hub URL, a message or a stored file.

Each key is one object, `PREFIX/` then the key's `:`-separated parts, each percent-quoted, joined by `/` (so a
namespace's `/` never makes a folder of its own). Expiry is written with the object (metadata `jcc-expires`, seconds
since the epoch, 0: never); a reader takes an expired object for an absent one, and `hub gc` sweeps them (an object
store deletes nothing on its own at that grain; a lifecycle rule can add a daily sweep). `touch` rewrites the
metadata by a server-side copy of each object onto itself: no byte travels. Expiry compares clocks: the machines
sharing a hub need synchronised clocks (NTP), as with a folder hub.

The lease is an object created with `If-None-Match: *` (written only if absent); renewing it, breaking an expired one
and releasing it are writes with `If-Match` on the ETag read just before, so of two writers the store refuses the
second (412) and never lets both win. A store without conditional writes says so at the first lease, and that cell
compiles without single flight.

boto3 (the `s3` extra) is imported when the hub is first used; missing, it is a HubError like any other hub failure,
so a cell, `list` or the CLI say which extra to install and carry on with the local store.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar, TypeVar
from urllib.parse import urlsplit

from ..clock import SYSTEM_CLOCK, Clock
from . import after_fork
from .base import HubError, HubRefused
from .keys import key_of, object_name

T = TypeVar("T")

EXPIRES = "jcc-expires"  # the metadata that holds a key's expiry
RELEASED = 1.0  # the expiry of a released lease: long past
CONCURRENCY = 8  # requests in flight at once: one S3 connection moves far less than the wire carries
BUCKET_RULES = "3 to 63 lowercase letters, digits, '.' and '-'"
# What the store answers when a credential may not do a thing, and when it does not know the credential.
DENIED = {"AccessDenied", "AllAccessDisabled", "Forbidden", "403"}
UNKNOWN_CREDENTIAL = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken", "TokenRefresh"}
PRECONDITION = {"PreconditionFailed", "412", "ConditionalRequestConflict", "409"}
ABSENT = {"NoSuchKey", "404", "NotFound"}


def _check_url(url: str) -> None:
    parts = urlsplit(url)
    bucket = parts.netloc
    if parts.username is not None or parts.password is not None:
        raise ValueError("credentials never go in the URL: set AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY")
    if not 3 <= len(bucket) <= 63 or not all(c.islower() or c.isdigit() or c in ".-" for c in bucket):
        raise ValueError(f"the bucket {bucket!r} is not a bucket name ({BUCKET_RULES})")
    if parts.query or parts.fragment:
        raise ValueError("no query or fragment: the endpoint and region come from AWS_ENDPOINT_URL and AWS_REGION")


def boto3_module() -> Any:
    try:
        import boto3
    except ImportError:
        raise HubError(
            "an s3:// hub needs boto3, which is not installed: pip install 'jupyter_compile_cache[s3]'"
        ) from None
    return boto3


class S3Backend:
    SCHEMES: ClassVar[tuple[str, ...]] = ("s3",)
    USAGE: ClassVar[str] = "s3://bucket/prefix (credentials and endpoint from AWS_PROFILE, AWS_ENDPOINT_URL, ...)"
    kind = "s3"
    keys_per_call = CONCURRENCY // 2
    push_calls_in_flight = pull_calls_in_flight = 2  # CONCURRENCY requests on the wire, no pause at a call's end
    page_size = 1000  # objects per listing request: S3's most
    torch_redis_url = None
    expiry_in_place = False
    check_url = staticmethod(_check_url)

    def __init__(
        self, url: str, connect_timeout: float = 2.0, timeout: float = 10.0, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self.clock = clock
        parts = urlsplit(url)
        self.url = self.display_url = url
        self.bucket = parts.netloc
        self.prefix = "/".join(p for p in parts.path.split("/") if p)
        self.connect_timeout, self.timeout = connect_timeout, timeout
        self._client: Any = None
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        after_fork.track(self)

    # -- connection ---------------------------------------------------------------------------------------------
    @property
    def client(self) -> Any:
        with self._lock:
            if self._client is None:
                self._client = self._connect()
            return self._client

    def _connect(self) -> Any:
        boto3 = boto3_module()
        from botocore.config import Config

        session = boto3.session.Session()
        config = Config(
            connect_timeout=self.connect_timeout,
            read_timeout=self.timeout,
            retries={"max_attempts": 2, "mode": "standard"},  # one retry: a store that is down costs two timeouts
            max_pool_connections=CONCURRENCY * 2,
            # S3-compatible stores (older MinIO, R2, Ceph) refuse the CRC checksums boto3 sends by default since 1.36
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )
        try:
            return session.client("s3", region_name=session.region_name or "us-east-1", config=config)
        except Exception as exc:  # a broken profile or config file: botocore's own words say which
            raise HubError(f"hub {self.display_url}: the S3 client could not start: {_words(exc)}") from None

    @property
    def pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(CONCURRENCY, thread_name_prefix="jcc-s3")
            return self._pool

    def _object(self, key: str) -> str:
        return object_name(self.prefix, key)

    def _error(self, exc: Exception, action: str) -> HubError:
        """EXC in the user's terms: a refusal (a credential that may not ACTION, one the store does not know), a
        bucket that is not there, or the store unreachable; never a credential or a key."""
        code = _code(exc)
        if code in UNKNOWN_CREDENTIAL:
            return HubRefused(
                f"hub {self.display_url}: the store refused the credentials ({code}: a wrong key or secret, or an "
                "expired token; they come from AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)",
                "log in",
            )
        if code in DENIED:
            return HubRefused(
                f"hub {self.display_url}: this credential is not permitted to {action} here", action, True
            )
        if code == "NoSuchBucket":
            return HubError(f"hub {self.display_url}: the bucket {self.bucket!r} does not exist")
        if type(exc).__name__ in ("NoCredentialsError", "PartialCredentialsError"):
            return HubError(
                f"hub {self.display_url}: no AWS credentials found (set AWS_PROFILE, or AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY)"
            )
        return HubError(f"hub {self.display_url}: {_words(exc)}")

    def _call(self, fn: Callable[[], T], action: str = "read") -> T:
        try:
            return fn()
        except HubError:
            raise
        except Exception as exc:  # botocore's errors and the connection's: all a hub failure
            raise self._error(exc, action) from None

    def _each(self, keys: Sequence[str], fn: Callable[[str], T], action: str) -> list[T]:
        """FN(key) for every key, CONCURRENCY at a time; a refusal of some keys (and not all) is a HubRefused that
        carries the others' results (None where refused)."""
        self._call(lambda: self.client)  # a client that cannot start fails once, not once per key

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
    def _get(self, key: str) -> tuple[bytes, float, str] | None:
        """(value, expiry, ETag) of KEY, None when absent."""
        try:
            reply = self.client.get_object(Bucket=self.bucket, Key=self._object(key))
        except Exception as exc:
            if _code(exc) in ABSENT:
                return None
            raise
        return reply["Body"].read(), _expiry(reply), reply.get("ETag", "")

    def _expires(self, ttl: float | None) -> float:
        return self.clock.time() + ttl if ttl else 0.0

    def _live(self, expires: float) -> bool:
        return expires == 0 or expires > self.clock.time()

    def _head(self, key: str) -> tuple[float, str] | None:
        try:
            reply = self.client.head_object(Bucket=self.bucket, Key=self._object(key))
        except Exception as exc:
            if _code(exc) in ABSENT:
                return None
            raise
        return _expiry(reply), reply.get("ETag", "")

    def _put(self, key: str, value: bytes, expires: float, **condition: str) -> None:
        self.client.put_object(
            Bucket=self.bucket, Key=self._object(key), Body=value, Metadata={EXPIRES: repr(expires)}, **condition
        )

    # -- the protocol -------------------------------------------------------------------------------------------
    def ping(self) -> None:
        self._call(lambda: self.client.list_objects_v2(Bucket=self.bucket, Prefix=self._object("jcc:"), MaxKeys=1))

    def get(self, keys: Sequence[str]) -> list[bytes | None]:
        def value(key: str) -> bytes | None:
            found = self._get(key)
            return found[0] if found is not None and self._live(found[1]) else None

        return self._each(keys, value, "read")

    def put(self, items: Mapping[str, bytes], ttl: int | None = None) -> None:
        expires = self._expires(ttl)
        self._each(list(items), lambda key: self._put(key, items[key], expires), "write")

    def touch(self, keys: Sequence[str], ttl: int | None) -> None:
        expires = self._expires(ttl)

        def copy(key: str) -> None:
            name = self._object(key)
            try:
                self.client.copy_object(
                    Bucket=self.bucket,
                    Key=name,
                    CopySource={"Bucket": self.bucket, "Key": name},
                    Metadata={EXPIRES: repr(expires)},
                    MetadataDirective="REPLACE",
                )
            except Exception as exc:
                if _code(exc) not in ABSENT:
                    raise

        self._each(keys, copy, "write")

    def delete(self, keys: Sequence[str]) -> None:
        names = [self._object(key) for key in keys]
        for start in range(0, len(names), 1000):  # DeleteObjects takes 1000 at most
            batch = [{"Key": name} for name in names[start : start + 1000]]
            reply = self._call(
                lambda batch=batch: self.client.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True}
                ),
                "write",
            )
            for error in reply.get("Errors", []):
                if error.get("Code") not in ABSENT:
                    raise self._error(_Refusal(error.get("Code", ""), error.get("Message", "")), "write")

    def missing(self, keys: Sequence[str]) -> list[str]:
        def gone(key: str) -> bool:
            found = self._head(key)
            return found is None or not self._live(found[0])

        return [key for key, absent in zip(keys, self._each(keys, gone, "read")) if absent]

    def _objects(self, prefix: str) -> Iterator[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self._object(prefix), PaginationConfig={"PageSize": self.page_size}
        )
        for page in pages:
            for entry in page.get("Contents", []):
                yield entry["Key"]

    def list(self, prefix: str) -> list[str]:
        names = self._call(lambda: list(self._objects(prefix)))
        keys = [key_of(self.prefix, name) for name in names]
        return [key for key in keys if key is not None and key.startswith(prefix)]

    def sweep(self) -> int:
        """Delete what expired (a HEAD of each object under the prefix; an object rewritten since is kept)."""
        keys = self.list("jcc:")

        def swept(key: str) -> bool:
            found = self._head(key)
            if found is None or self._live(found[0]):
                return False
            try:
                self.client.delete_object(Bucket=self.bucket, Key=self._object(key), IfMatch=found[1])
            except Exception as exc:
                if _code(exc) in PRECONDITION | ABSENT:
                    return False
                if _code(exc) not in ("NotImplemented", "InvalidArgument", "501"):
                    raise
                self.client.delete_object(Bucket=self.bucket, Key=self._object(key))  # no conditional delete here
            return True

        return sum(self._each(keys, swept, "write"))

    # -- the lease ----------------------------------------------------------------------------------------------
    def acquire(self, key: str, token: bytes, ttl: int) -> bytes | None:
        for _ in range(5):
            if self._conditional(lambda: self._put(key, token, self._expires(ttl), IfNoneMatch="*")):
                return None
            found = self._call(lambda: self._get(key))
            if found is None:  # released in between
                continue
            holder, expires, etag = found
            if self._live(expires):
                return holder
            if self._conditional(lambda etag=etag: self._put(key, token, self._expires(ttl), IfMatch=etag)):  # break it
                return None
        return b""

    def renew(self, key: str, token: bytes, ttl: int) -> bool:
        found = self._call(lambda: self._get(key))
        if found is None or found[0] != token or not self._live(found[1]):
            return False
        return self._conditional(lambda: self._put(key, token, self._expires(ttl), IfMatch=found[2]))

    def release(self, key: str, token: bytes) -> None:
        found = self._call(lambda: self._get(key))
        if found is None or found[0] != token:
            return
        # written expired with If-Match, not deleted: conditional deletes are newer than conditional writes
        self._conditional(lambda: self._put(key, b"", RELEASED, IfMatch=found[2]))

    def _conditional(self, write: Callable[[], None]) -> bool:
        """Run a conditional WRITE: False when the store refused its condition (someone else wrote first)."""
        try:
            write()
            return True
        except Exception as exc:
            code = _code(exc)
            if code in PRECONDITION:
                return False
            if code in ("NotImplemented", "501"):
                raise HubError(
                    f"hub {self.display_url}: this store does not support conditional writes (If-None-Match), "
                    "which single flight needs"
                ) from None
            raise self._error(exc, "write") from None

    def forget_connections(self) -> Any:
        # the worker threads did not come along through the fork: a new pool too
        dropped = (self._client, self._pool)
        self._client, self._pool, self._lock = None, None, threading.Lock()
        return dropped

    def reconnect(self) -> None:
        pass  # botocore retries a broken connection on a fresh one itself

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None
        if self._client is not None:
            try:
                self._client.close()
            except Exception:  # closing is best effort: the process may be exiting
                pass
            self._client = None


class _Refusal(Exception):
    """One key's error in a DeleteObjects reply, shaped like botocore's ClientError for `_code`."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.response = {"Error": {"Code": code, "Message": message}}


def _code(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        code = str(response.get("Error", {}).get("Code", ""))
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return code or str(status or "")
    return ""


def _words(exc: Exception) -> str:
    """botocore's message with each URL cut to its endpoint (the rest names an object, which says nothing to the
    user); botocore never puts a secret in a message."""
    return re.sub(r"(https?://[^/\s\"']+)[^\s\"']*", r"\1", str(exc)) or type(exc).__name__


def _expiry(reply: Mapping[str, Any]) -> float:
    try:
        return float(reply.get("Metadata", {}).get(EXPIRES, "0"))
    except ValueError:
        return 0.0
