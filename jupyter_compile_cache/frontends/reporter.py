"""How the text front ends (the magic, the CLI, scripts) say the session's events: each as one line,
`compile_cache: ...` on stdout, warnings as `compile_cache: warning: ...` on stderr; transfers that take over a second
as a tqdm bar (a widget in a notebook, text in a terminal)."""

from __future__ import annotations

import sys
import time
from typing import IO, Any, TextIO

from ..core.events import Event, Moving, Transfer
from .event_wording import event_text, transfer_label


class TextReporter:
    def __init__(self, out: TextIO | None = None, err: TextIO | None = None, prefix: str = "compile_cache: ") -> None:
        self._out, self._err, self.prefix = out, err, prefix

    @property
    def out(self) -> TextIO:
        return self._out or sys.stdout  # looked up at each event: IPython swaps sys.stdout per cell

    @property
    def err(self) -> TextIO:
        return self._err or sys.stderr

    def __call__(self, event: Event) -> None:
        if event.level == "warning":
            print(f"{self.prefix}warning: {event_text(event)}", file=self.err)
        else:
            print(f"{self.prefix}{event_text(event)}", file=self.out)

    def transfer(self, moving: Moving, name: str) -> Transfer:
        return TransferBar(transfer_label(moving, name), stream=self._err)


class TransferBar:
    """A `tqdm.auto` bar for a transfer (a widget in a notebook, text in a terminal), made only once the transfer has
    taken more than a second: a quick restore never imports tqdm (in a kernel that can cost a tenth of a second)."""

    DELAY = 1.0

    def __init__(self, label: str, quiet: bool = False, stream: IO[str] | None = None) -> None:
        self.label, self.quiet, self.stream = label, quiet, stream
        self.start = time.perf_counter()
        self.bar: Any = None

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            if self.quiet or time.perf_counter() - self.start < self.DELAY:
                return
            if self.stream is None:  # a widget in a notebook, text in a terminal
                from tqdm.auto import tqdm
            else:  # a stream named: text on it
                from tqdm import tqdm

            self.bar = tqdm(
                desc=self.label,
                unit="B",
                unit_scale=True,
                unit_divisor=1024,
                file=self.stream,
                leave=False,
                total=total,
            )
        if self.bar.total != total:
            self.bar.total = total
        self.bar.update(done - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.refresh()  # its true last figures, not those its rate limit let through: a notebook keeps them
            self.bar.close()
