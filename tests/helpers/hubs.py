"""One hub of each backend for the parametrized hub suite: a real redis-server, a real 3-master Redis Cluster, a
real TLS redis-server, and a shared folder (file://). Each says how to look at a key's expiry and how to cut the
hub off in the middle of a transfer, the way that backend fails in life."""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
import time

from helpers.redis_server import RedisClusterServers, RedisServer, TlsRedisServer
from jupyter_compile_cache.storage.bundle import Manifest
from jupyter_compile_cache.storage.hub import Hub, HubConfig
from jupyter_compile_cache.storage.store import LocalStore

KINDS = ("redis", "redis-cluster", "rediss", "file")


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

    @property
    def url(self) -> str:
        raise NotImplementedError

    def hub(self, **kw) -> Hub:
        return hub_at(kw.pop("url", self.url), **kw)

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


class RedisHubUnderTest(HubUnderTest):
    kind = "redis"
    server_class: type = RedisServer

    def __init__(self, workdir) -> None:
        super().__init__(workdir)
        self.server = self.server_class(workdir)

    @property
    def url(self) -> str:
        return self.server.url

    def client(self):
        return self.server.client()

    def seconds_left(self, key: str) -> float | None:
        ttl = self.client().ttl(key)
        assert ttl != -2, f"{key} is not there"
        return None if ttl == -1 else float(ttl)

    def cut(self) -> None:
        self.server.stop()

    def restore(self) -> None:
        self.server.start()

    def stop(self) -> None:
        self.server.stop()


class TlsHubUnderTest(RedisHubUnderTest):
    kind = "rediss"
    server_class = TlsRedisServer

    def client(self):
        return self.server.client_tls()


class ClusterHubUnderTest(RedisHubUnderTest):
    kind = "redis-cluster"

    def __init__(self, workdir) -> None:
        HubUnderTest.__init__(self, workdir)
        self.server = RedisClusterServers(workdir)

    @property
    def url(self) -> str:
        return self.server.url(0)

    def client(self):
        import redis

        return redis.RedisCluster(host="127.0.0.1", port=self.server.nodes[0].port)

    def cut(self) -> None:
        for node in self.server.nodes:
            node.stop()

    def restore(self) -> None:
        for node in self.server.nodes:
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
        return None if expires == 0 else expires - time.time()

    def cut(self) -> None:
        os.rename(self.folder, self.folder + ".unmounted")

    def restore(self) -> None:
        os.rename(self.folder + ".unmounted", self.folder)

    def stop(self) -> None:
        shutil.rmtree(self.folder + ".unmounted", ignore_errors=True)


def start(kind: str, workdir) -> HubUnderTest:
    return {
        "redis": RedisHubUnderTest,
        "redis-cluster": ClusterHubUnderTest,
        "rediss": TlsHubUnderTest,
        "file": FolderHubUnderTest,
    }[kind](workdir)
