"""A static https server for tests: Python's own `http.server` serving a folder over TLS, with a CA and a server
certificate for 127.0.0.1 made by openssl (as for the TLS Redis), reached through a TCP proxy that can cut the network.
A client trusts it the way a user trusts a private CA: `SSL_CERT_FILE` names the CA's file."""

from __future__ import annotations

import functools
import http.server
import ssl
import threading

from .redis_server import _make_certificates
from .tcp_proxy import HoldingProxy


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args) -> None:  # noqa: A002 (http.server's name)
        pass


class HttpsServer:
    def __init__(self, workdir, folder) -> None:
        self.certs = workdir / "certs"
        self.certs.mkdir()
        _make_certificates(self.certs)
        self.ca = str(self.certs / "ca.pem")
        self.folder = folder
        handler = functools.partial(_Quiet, directory=str(folder))
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(str(self.certs / "server.pem"), str(self.certs / "server.key"))
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.proxy = HoldingProxy(self.server.server_address[1])

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.proxy.port}/hub"

    def stop(self) -> None:
        self.proxy.cut()
        self.server.shutdown()
        self.server.server_close()
