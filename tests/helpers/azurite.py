"""A real Azure Blob Storage server for tests: Azurite, Microsoft's emulator (from npm; .ci/setup installs it into
the venv, `$VENV/share/azurite`), on a free loopback port, reached through a TCP proxy that can cut the network. The
client side is configured the Azure way, with `AZURE_STORAGE_CONNECTION_STRING`, as a user's would be."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import uuid

from .redis_server import free_port
from .tcp_proxy import HoldingProxy

ACCOUNT = "devstoreaccount1"  # Azurite's well-known account and key (public, in Microsoft's documentation)
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def azurite_command() -> str:
    """The azurite-blob program: $JCC_TEST_AZURITE, the venv's (.ci/setup), or one on PATH."""
    for candidate in (
        os.environ.get("JCC_TEST_AZURITE"),
        os.path.join(sys.prefix, "share", "azurite", "node_modules", ".bin", "azurite-blob"),
        shutil.which("azurite-blob"),
    ):
        if candidate and os.path.exists(candidate):
            return candidate
    raise RuntimeError("Azurite is not installed: make setup-dev installs it (npm install azurite)")


class AzuriteServer:
    def __init__(self, workdir) -> None:
        self.workdir = str(workdir)
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.start()
        self.proxy = HoldingProxy(self.port)

    def start(self) -> None:
        log = open(os.path.join(self.workdir, f"azurite-{self.port}.log"), "ab")
        self.proc = subprocess.Popen(
            [
                azurite_command(),
                "--blobHost",
                "127.0.0.1",
                "--blobPort",
                str(self.port),
                "--inMemoryPersistence",
                "--skipApiVersionCheck",
                "--silent",
            ],  # fmt: skip
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"Azurite exited with {self.proc.returncode}") from None
                time.sleep(0.1)
        raise RuntimeError("Azurite did not answer within 30 s")

    def connection_string(self, port: int | None = None, key: str = KEY) -> str:
        """What a user sets; through the proxy unless PORT names another."""
        endpoint = f"http://127.0.0.1:{port or self.proxy.port}/{ACCOUNT}"
        return f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={key};BlobEndpoint={endpoint};"

    def environ(self, **kw) -> dict[str, str]:
        return {"AZURE_STORAGE_CONNECTION_STRING": self.connection_string(**kw)}

    def new_container(self) -> str:
        from azure.storage.blob import BlobServiceClient

        name = f"hub-{uuid.uuid4().hex[:12]}"
        BlobServiceClient.from_connection_string(self.connection_string(port=self.port)).create_container(name)
        return name

    def stop(self) -> None:
        self.proxy.cut()
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None
