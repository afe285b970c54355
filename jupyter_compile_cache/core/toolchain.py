"""The per-machine toolchain bundle: the programs torch compiles once per process to probe the CPU's vector ISAs,
kept as one bundle per CPU fingerprint in `<store>/toolchain`, and on the hub for colleagues with the same CPU.

The prewarm thread restores it before the probe and saves it after, so a restarted kernel skips the compiles.
Failures are told once, by the next cell, as the hub's are.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from ..failure import Failure
from ..storage import bundle
from ..storage.bundle import Manifest
from ..storage.hub import HubError
from ..storage.store import LocalStore
from ..torch_adapter import capture, fingerprint, layers
from . import events
from .bundle_search import BundleSearch
from .events import Event
from .hub_policy import HubPolicy
from .options import writer
from .records import CellReport


class Toolchain:
    def __init__(
        self, store_dir: Callable[[], str], hub_policy: HubPolicy, search: BundleSearch, tell: Callable[[Event], None]
    ) -> None:
        self._store_root = store_dir
        self._hub_policy = hub_policy
        self._search = search
        self._tell = tell
        self.source: str | None = None  # where this process's probe programs came from, if restored

    def store(self, store_dir: str | None = None) -> LocalStore:
        return LocalStore(os.path.join(store_dir or self._store_root(), "toolchain"), max_versions=1)

    def restore(self) -> None:
        """This machine's probe programs from the local store, else from the hub."""
        now = fingerprint.current(with_gpu=False)
        store = self.store()
        hub = self._hub_policy.for_toolchain()
        roots = capture.cache_roots()
        found = self._search.newest(  # a hub that is down: the next cell skips it instead of waiting, and says so
            fingerprint.digest(now),
            store,
            hub,
            install=lambda m, p: bundle.extract(p, m, roots, keep=layers.is_compile_result),
            on_down="quiet",
        )
        self.source = found.source.kind if found.source is not None else None

    def save(self, created: list[str]) -> None:
        """The probe programs this process built (`created`), as a bundle, in the local store and on the hub."""
        files = [p for p in created if os.path.exists(p)]
        if not files:
            return
        now = fingerprint.current(with_gpu=False)
        digest = fingerprint.digest(now)
        store = self.store()
        manifests = store.versions(digest)
        if not manifests:
            roots = capture.cache_roots()
            members = {capture.member_name(p, roots): p for p in files}
            try:
                manifest = Manifest.new(digest, now, digest, writer())
                manifests = [store.write(manifest, {k: v for k, v in members.items() if k})]
            except OSError as exc:
                self._tell(events.StepFailed(events.Step.PROBE_SAVE, Failure.of(exc), where=store.root))
                return
        hub = self._hub_policy.for_toolchain()
        if hub is not None:
            try:
                on_hub = hub.versions(digest)
            except HubError as exc:
                self._hub_policy.failed(hub, exc, None, quiet=True)
                return
            if not on_hub:
                self._hub_policy.push(hub, store, manifests[0], CellReport(digest), background=True)
