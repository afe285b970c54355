"""A real redis-server for tests, started on a free loopback port."""

from __future__ import annotations


class RedisServer:
    """A real redis-server on a free loopback port, with append-only persistence so a restart keeps data."""

    def __init__(self, workdir, extra_args=()) -> None:
        import shutil

        self.binary = shutil.which("redis-server")
        if self.binary is None:
            raise RuntimeError("redis-server is not installed: run `make setup` (apt-get install redis-server)")
        self.workdir = workdir
        self.extra_args = list(extra_args)
        self.port = free_port()
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
                redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=0.2).ping()
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


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
