"""One hub of each backend for the parametrized hub suite: a real redis-server, a real 3-master Redis Cluster, a
real TLS redis-server, a real S3 protocol server (moto's, a new bucket per test), and a shared folder (file://). Each
says how to look at a key's expiry and how to cut the hub off in the middle of a transfer, the way that backend fails
in life. The servers live for the test run (starting a cluster, or making a CA, takes seconds): each test gets one
emptied (FLUSHALL on every node) and running again if the last test cut it off."""

from __future__ import annotations

import atexit
import os
import pathlib
import shutil
import struct
import tempfile
import time
from typing import Any

from jupyter_compile_cache.storage.backends.keys import braced
from jupyter_compile_cache.storage.bundle import Manifest
from jupyter_compile_cache.storage.hub import Hub, HubConfig
from jupyter_compile_cache.storage.store import LocalStore

from . import s3_server
from .azurite import AzuriteServer
from .clock import JumpingClock
from .redis_server import RedisClusterServers, RedisServer, TlsRedisServer
from .s3_server import S3Server
from .tcp_proxy import HoldingProxy

KINDS = ("redis", "redis-cluster", "rediss", "s3", "az", "file")


def local_bundle(tmp_path, size=3 << 20, name="net", fp="f" * 12):
    """A real bundle in a local store: random (incompressible) files so the payload spans several chunks."""
    store = LocalStore(str(tmp_path / f"store-{time.time_ns()}"))
    src = tmp_path / f"src-{time.time_ns()}"
    src.mkdir()
    files = {}
    for i in range(3):
        path = src / f"k{i}.so"
        path.write_bytes(os.urandom(size // 3))
        files[f"inductor/ab/k{i}.so"] = str(path)
    manifest = Manifest.new(name, {"torch": "x"}, fp, "alice@a")
    return store, store.write(manifest, files)


def hub_at(url: str, **kw) -> Hub:
    """A hub with small chunks, so small bundles span several."""
    return Hub(HubConfig(url=url, chunk_size=kw.pop("chunk_size", 256 << 10), **kw))


def pull_bytes(hub: Hub, manifest) -> bytes:
    with tempfile.TemporaryFile() as sink:  # a pull writes each chunk at its place in a file
        hub.pull(manifest, sink)
        sink.seek(0)
        return sink.read()


class HubUnderTest:
    kind = ""

    def __init__(self, workdir) -> None:
        self.workdir = workdir
        self.clock = JumpingClock()  # the clock of every hub this gives: `pass_time` moves it

    @property
    def url(self) -> str:
        raise NotImplementedError

    def hub(self, **kw) -> Hub:
        return hub_at(kw.pop("url", self.url), **{"clock": self.clock, **kw})

    def pass_time(self, seconds: float) -> None:
        """`seconds` pass for the hubs this gives and for what the hub holds: a renewal that falls due runs (on its
        thread: wait for what it does), and what expires is gone."""
        self.clock.jump(seconds)

    def seconds_left(self, key: str) -> float | None:
        """Seconds until KEY expires; None when it never does."""
        raise NotImplementedError

    def cut(self) -> None:
        """The hub goes away (server killed, share unmounted)."""
        raise NotImplementedError

    def restore(self) -> None:
        """The hub is back, with what it held."""
        raise NotImplementedError

    def stop(self) -> None:
        pass


_SERVERS: dict[str, Any] = {}  # kind -> its server (or cluster), kept for the test run


def _kept(kind: str, make: Any) -> Any:
    if kind not in _SERVERS:
        workdir = tempfile.mkdtemp(prefix=f"jcc-hub-{kind}-")
        _SERVERS[kind] = make(pathlib.Path(workdir))
        atexit.register(_stop_and_remove, _SERVERS[kind], workdir)
    return _SERVERS[kind]


def _stop_and_remove(server: Any, workdir: str) -> None:
    # the servers' append-only files are some 50 MB each: a CI disk keeps none of them after the run
    server.stop()
    shutil.rmtree(workdir, ignore_errors=True)


class RedisHubUnderTest(HubUnderTest):
    kind = "redis"
    server_class: type = RedisServer

    def __init__(self, workdir) -> None:
        super().__init__(workdir)
        self.server = _kept(self.kind, self.server_class)
        if self.server.proc is None:  # the last test cut it off
            self.restore()
        self.client().flushall()

    @property
    def url(self) -> str:
        return self.server.url

    def client(self):
        return self.server.client()

    def seconds_left(self, key: str) -> float | None:
        ttl = self.client().pttl(braced(key))  # the key as Redis holds it
        assert ttl != -2, f"{key} is not there"
        return None if ttl == -1 else ttl / 1000

    def node_clients(self) -> list[Any]:
        return [self.client()]

    def pass_time(self, seconds: float) -> None:
        """Redis expires keys by its own clock: each key's time left is shortened by `seconds` (a key with less
        left expires now, by the server's own expiry), then the hubs' clock moves."""
        for client in self.node_clients():
            expiring = []
            for key in client.scan_iter(count=1000):
                left = client.pttl(key)
                if left > seconds * 1000:
                    client.pexpire(key, int(left - seconds * 1000))
                elif left >= 0:
                    client.pexpire(key, 1)
                    expiring.append(key)
            deadline = time.monotonic() + 10
            while expiring and client.exists(*expiring) and time.monotonic() < deadline:
                time.sleep(0.01)
        super().pass_time(seconds)

    def cut(self) -> None:
        self.server.stop()

    def restore(self) -> None:
        self.server.start()


class TlsHubUnderTest(RedisHubUnderTest):
    kind = "rediss"
    server_class = TlsRedisServer

    def client(self):
        return self.server.client_tls()


class ClusterHubUnderTest(RedisHubUnderTest):
    kind = "redis-cluster"

    def __init__(self, workdir) -> None:
        HubUnderTest.__init__(self, workdir)
        self.server = _kept(self.kind, RedisClusterServers)
        if any(node.proc is None for node in self.server.nodes):  # the last test cut it off
            self.restore()
        for node in self.server.nodes:
            node.client().flushall()

    @property
    def url(self) -> str:
        return self.server.url(0)

    def client(self):
        import redis

        return redis.RedisCluster(host="127.0.0.1", port=self.server.nodes[0].port)

    def node_clients(self) -> list[Any]:
        return [node.client() for node in self.server.nodes]

    def cut(self) -> None:
        for node in self.server.nodes:
            node.stop()

    def restore(self) -> None:
        for node in self.server.nodes:
            if node.proc is None:
                node.start()
        deadline = time.time() + 10
        while time.time() < deadline:  # the cluster is usable again once every slot is served
            try:
                if self.client().cluster_info().get("cluster_state") == "ok":
                    return
            except Exception:
                pass
            time.sleep(0.1)


class FolderHubUnderTest(HubUnderTest):
    kind = "file"

    def __init__(self, workdir) -> None:
        super().__init__(workdir)
        self.folder = os.path.join(str(workdir), "team-share")
        os.makedirs(self.folder)

    @property
    def url(self) -> str:
        return f"file://{self.folder}"

    def seconds_left(self, key: str) -> float | None:
        from jupyter_compile_cache.storage.backends.folder import HEADER, FolderBackend

        with open(FolderBackend(self.url)._path(key), "rb") as f:
            _magic, expires = struct.unpack_from(HEADER.format, f.read(HEADER.size))
        return None if expires == 0 else expires - self.clock.time()

    def cut(self) -> None:
        os.rename(self.folder, self.folder + ".unmounted")

    def restore(self) -> None:
        os.rename(self.folder + ".unmounted", self.folder)

    def stop(self) -> None:
        shutil.rmtree(self.folder + ".unmounted", ignore_errors=True)


class ObjectStoreHubUnderTest(HubUnderTest):
    """A bucket (or container) of its own on the session's server of that store, reached through a proxy of its own
    (`cut` is the network gone; the server and what it holds stay). The store's variables are set in this process
    while it lives."""

    shared: dict[str, Any] = {}  # kind -> the session's server

    def __init__(self, workdir) -> None:
        super().__init__(workdir)
        server = self.shared.get(self.kind)
        if server is None or server.proc is None:
            workdir = tempfile.mkdtemp(prefix=f"{self.kind}-server-")
            server = self.shared[self.kind] = self.make_server(workdir)
            atexit.register(_stop_and_remove, server, workdir)
        self.server = server
        self.bucket = self.new_bucket()
        self.proxy = HoldingProxy(self.server.port)
        self._before = s3_server.use(self.environ(self.proxy.port))

    def make_server(self, workdir: str) -> Any:
        raise NotImplementedError

    def new_bucket(self) -> str:
        raise NotImplementedError

    def environ(self, port: int) -> dict[str, str]:
        """What a user sets to reach the server at PORT."""
        raise NotImplementedError

    @property
    def url(self) -> str:
        return f"{self.kind}://{self.bucket}/team-hub"

    def seconds_left(self, key: str) -> float | None:
        from jupyter_compile_cache.storage.backends.object_store import ObjectStoreBackend

        found = ObjectStoreBackend(self.url)._get(key, head=True)
        assert found is not None, f"{key} is not there"
        return None if found[1] == 0 else found[1] - self.clock.time()

    def cut(self) -> None:
        self.proxy.cut()

    def restore(self) -> None:
        self.proxy.restore()

    def stop(self) -> None:
        self.proxy.cut()
        s3_server.put_back(self._before)


class S3HubUnderTest(ObjectStoreHubUnderTest):
    kind = "s3"

    def make_server(self, workdir: str) -> S3Server:
        return S3Server(workdir)

    def new_bucket(self) -> str:
        return self.server.new_bucket()

    def environ(self, port: int) -> dict[str, str]:
        return {**self.server.environ(), "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"}


class AzureHubUnderTest(ObjectStoreHubUnderTest):
    kind = "az"

    def make_server(self, workdir: str) -> AzuriteServer:
        return AzuriteServer(workdir)

    def new_bucket(self) -> str:
        return self.server.new_container()

    def environ(self, port: int) -> dict[str, str]:
        return self.server.environ(port=port)


def start(kind: str, workdir) -> HubUnderTest:
    return {
        "redis": RedisHubUnderTest,
        "redis-cluster": ClusterHubUnderTest,
        "rediss": TlsHubUnderTest,
        "s3": S3HubUnderTest,
        "az": AzureHubUnderTest,
        "file": FolderHubUnderTest,
    }[kind](workdir)
