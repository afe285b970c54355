"""A TCP forwarder between a client and a real server that can hold back chosen requests: a slow network that
opens the window a race needs, deterministically."""

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
        self.held = threading.Event()
        self._go = threading.Event()
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.port = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = [self._listener]
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def let_go(self) -> None:
        self._go.set()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target_port))
            self._sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, requests: bool) -> None:
        try:
            while data := src.recv(65536):
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
