"""A TCP forwarder between a client and a real server that can hold back chosen requests (a slow network that
opens the window a race needs, deterministically) or cut every connection and refuse new ones (the network gone)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable


class HoldingProxy:
    """Forwards 127.0.0.1:<port> to `target_port`. While `hold` returns True for a request's bytes, that request
    waits until `let_go()`; `held` is set as soon as one is waiting."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.hold: Callable[[bytes], bool] = lambda _data: False
        # While `drop` returns True for a request's bytes, its connection is closed instead (a load balancer or NAT
        # that drops a connection under a reply); new connections are still taken.
        self.drop: Callable[[bytes], bool] = lambda _data: False
        self.held = threading.Event()
        self._go = threading.Event()
        self.port = 0
        self._sockets: list[socket.socket] = []
        self._listen()

    def _listen(self) -> None:
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", self.port))
        self._listener.listen(64)
        self.port = self._listener.getsockname()[1]
        self._sockets.append(self._listener)
        threading.Thread(target=self._accept, args=(self._listener,), daemon=True).start()

    def cut(self) -> None:
        """Every connection reset, new ones refused (the server's host gone from the network)."""
        sockets, self._sockets = self._sockets, []
        for s in sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def restore(self) -> None:
        """The network is back: the same port takes connections again."""
        self._listen()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def let_go(self) -> None:
        self._go.set()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:  # the server itself is gone: the client sees its connection close
                client.close()
                continue
            self._sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, requests: bool) -> None:
        try:
            while data := src.recv(65536):
                if requests and self.drop(data):
                    return
                if requests and self.hold(data):
                    self.held.set()
                    self._go.wait(30)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._go.set()
        for s in self._sockets:
            s.close()
