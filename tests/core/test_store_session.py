"""store_session.py: the stores a session works over, built alone where no cell runs (the CLI's listings)."""

from __future__ import annotations

import pytest

from jupyter_compile_cache.core import events
from jupyter_compile_cache.core.commands import Commands
from jupyter_compile_cache.core.events import CacheWarning, Step, StepFailed
from jupyter_compile_cache.core.store_session import StoreSession
from jupyter_compile_cache.failure import Failure


class Collected:
    """A front end that keeps what it is told."""

    def __init__(self) -> None:
        self.events: list[events.Event] = []

    def __call__(self, event: events.Event) -> None:
        self.events.append(event)

    def transfer(self, moving: events.Moving, name: str) -> events.Transfer:
        return events.NO_TRANSFER


def test_stores_alone_list_and_tell_without_the_kernels_session(tmp_path):
    told = Collected()
    stores = StoreSession(store_dir=str(tmp_path / "store"), reporter=told)
    seen: list[events.Event] = []
    stores.listeners.append(seen.append)

    def broken(event: events.Event) -> None:
        raise RuntimeError("a closed panel")

    stores.listeners.append(broken)
    try:
        commands = Commands(stores)
        assert commands.bundles(hub=False) == []
        assert stores.store().root == str(tmp_path / "store")
        assert stores.compiled_code() == {}
        stores.warn("first")
        stores.warn("second")
        said = told.events
        assert said[0] == CacheWarning("first") and said[-1] == CacheWarning("second"), said
        # the broken view was dropped, said once; the working one saw every event
        assert said.count(StepFailed(Step.VIEW, Failure("RuntimeError", "a closed panel"))) == 1, said
        assert seen[-1] == CacheWarning("second") and broken not in stores.listeners
    finally:
        stores.close()


def test_what_asks_the_compiler_needs_the_kernels_session(tmp_path):
    commands = Commands(StoreSession(store_dir=str(tmp_path / "store"), reporter=Collected()))
    with pytest.raises(TypeError, match="needs the kernel's session"):
        commands.status()
    with pytest.raises(TypeError, match="needs the kernel's session"):
        commands.set_layer("fx_graph", True)
