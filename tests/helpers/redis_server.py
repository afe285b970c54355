"""A real redis-server for tests, started on a free loopback port."""

from __future__ import annotations


class RedisServer:
    """A real redis-server on a free loopback port, with append-only persistence so a restart keeps data."""

    def __init__(self, workdir, extra_args=(), port=None, ready=None) -> None:
        import shutil

        self.binary = shutil.which("redis-server")
        if self.binary is None:
            raise RuntimeError("redis-server is not installed: run `make setup` (apt-get install redis-server)")
        self.workdir = workdir
        self.extra_args = list(extra_args)
        self.port = port or free_port()
        self._ready = ready or (lambda: redis_ping(self.port))
        self.proc = None
        self.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        import subprocess
        import time

        import redis

        self.proc = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.workdir),
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--save",
                "",
                "--protected-mode",
                "no",
                *self.extra_args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                self._ready()
                return
            except redis.AuthenticationError:
                return  # up, and wants a password
            except redis.ConnectionError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None

    def client(self):
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port)


def redis_ping(port: int) -> None:
    import redis

    redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=0.2).ping()


def free_port(bus: bool = False) -> int:
    """A free loopback port; with `bus`, one whose cluster bus port (port + 10000) is free too."""
    import socket

    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if not bus:
            return port
        if port + 10000 < 65536:
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port + 10000))
                    return port
                except OSError:
                    continue


class RedisClusterServers:
    """A real Redis Cluster on loopback: `masters` redis-server processes in cluster mode, joined with
    `redis-cli --cluster create` (no replicas). `url` names the first node; any node's URL works."""

    def __init__(self, workdir, masters: int = 3) -> None:
        import shutil
        import subprocess
        import time

        import redis

        cli = shutil.which("redis-cli")
        if cli is None:
            raise RuntimeError("redis-cli is not installed: run `make setup` (apt-get install redis-server)")
        self.nodes: list[RedisServer] = []
        for i in range(masters):
            node_dir = workdir / f"node{i}"
            node_dir.mkdir()
            port = free_port(bus=True)
            self.nodes.append(
                RedisServer(
                    node_dir,
                    [
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        "nodes.conf",
                        "--cluster-node-timeout",
                        "5000",
                    ],
                    port=port,
                )
            )
        addresses = [f"127.0.0.1:{n.port}" for n in self.nodes]
        subprocess.run(
            [cli, "--cluster", "create", *addresses, "--cluster-replicas", "0", "--cluster-yes"],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=30,
        )
        deadline = time.time() + 20
        while time.time() < deadline:
            states = [redis.Redis(port=n.port).cluster("info").get("cluster_state") for n in self.nodes]
            if all(state == "ok" for state in states):
                return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("the Redis Cluster did not reach cluster_state:ok")

    def url(self, node: int = 0) -> str:
        return f"redis://127.0.0.1:{self.nodes[node].port}/0"

    def node_for_slot(self, slot: int) -> RedisServer:
        import redis

        for start, end, master, *_replicas in redis.Redis(port=self.nodes[0].port).execute_command("CLUSTER SLOTS"):
            if start <= slot <= end:
                return next(n for n in self.nodes if n.port == int(master[1]))
        raise LookupError(slot)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


class TlsRedisServer(RedisServer):
    """A real redis-server speaking only TLS, with a CA and a server certificate (for 127.0.0.1) made by openssl;
    `wrong_ca` is another CA, which did not sign the server's certificate."""

    def __init__(self, workdir) -> None:
        self.certs = workdir / "certs"
        self.certs.mkdir()
        self.ca = str(self.certs / "ca.pem")
        self.wrong_ca = str(self.certs / "wrong-ca.pem")
        _make_certificates(self.certs)
        self.tls_port = free_port()
        super().__init__(
            workdir,
            [
                "--port", "0",
                "--tls-port", str(self.tls_port),
                "--tls-cert-file", str(self.certs / "server.pem"),
                "--tls-key-file", str(self.certs / "server.key"),
                "--tls-ca-cert-file", self.ca,
                "--tls-auth-clients", "no",
            ],
            ready=lambda: _tls_ping(self.tls_port, self.ca),
        )  # fmt: skip

    def client_tls(self):
        import redis

        return redis.Redis(host="127.0.0.1", port=self.tls_port, ssl=True, ssl_ca_certs=self.ca)

    def url_with(self, ca: str) -> str:
        return f"rediss://127.0.0.1:{self.tls_port}/0?ssl_ca_certs={ca}"

    @property
    def url(self) -> str:
        return self.url_with(self.ca)


def _make_certificates(directory) -> None:
    import subprocess

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True, timeout=60)

    for ca in ("ca", "wrong-ca"):
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN=test {ca}",
                "-keyout", f"{ca}.key", "-out", f"{ca}.pem")  # fmt: skip
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", "server.key",
            "-out", "server.csr")  # fmt: skip
    (directory / "san.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2",
            "-extfile", "san.cnf", "-out", "server.pem")  # fmt: skip


def _tls_ping(port: int, ca: str) -> None:
    import redis

    redis.Redis(host="127.0.0.1", port=port, ssl=True, ssl_ca_certs=ca, socket_connect_timeout=0.2).ping()


class AclUsers:
    """Team users on a real redis-server, made with the very `ACL SETUSER` lines the docs give an admin
    (storage/backends/redis.py `acl_rule`): team-a and team-b each confined to their namespace, team-a-ro reading
    team-a's bundles only. The default user stays the admin (no password) for setting the scene."""

    USERS = {"team-a": ("team-a", False), "team-a-ro": ("team-a", True), "team-b": ("team-b", False)}

    def __init__(self, server: RedisServer) -> None:
        from jupyter_compile_cache.storage.backends.redis import acl_rule

        self.server = server
        admin = server.client()
        for user, (namespace, read_only) in self.USERS.items():
            rule = acl_rule(user, self.password(user), namespace, read_only)
            admin.execute_command(*rule.split())

    @staticmethod
    def password(user: str) -> str:
        return f"pw-of-{user}"

    def url(self, user: str, password: str | None = None) -> str:
        return f"redis://{user}:{password or self.password(user)}@127.0.0.1:{self.server.port}/0"

    @property
    def admin_url(self) -> str:
        return self.server.url
