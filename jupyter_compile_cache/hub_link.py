"""The session's dealings with the hub, apart from fetching (sources.py does that): which hub a cell uses, pushing
after a save, the single-flight lease, status, and pointing torch's own Redis caches at the hub.

Composed into the session (`session.hub_link`). Every hub failure becomes one warning per hub and session and a
minute without that hub: a hub never breaks a cell or the local store. The Redis protocol itself is in hub.py.
"""

from __future__ import annotations

import importlib
import os
import time
from collections.abc import Callable
from typing import Any, TextIO

from . import fingerprint
from .bundle import Manifest
from .hub import HubConfig, HubError, Lease, RedisHub, redact
from .records import CellOptions, CellReport, RestoreResult, writer
from .settings import CompileCache
from .sources import HubSource, TransferBar
from .store import LocalStore

DOWN_SECONDS = 60  # a hub that failed is left alone this long, instead of paying its timeout in every cell
# torch's own Redis-backed caches, switched on by --torch-remote
TORCH_REMOTE_SWITCHES = (
    ("torch._inductor.config", "fx_graph_remote_cache"),
    ("torch._inductor.config", "autotune_remote_cache"),
    ("torch._functorch.config", "enable_remote_autograd_cache"),
)
TORCH_REDIS_ENV = "TORCHINDUCTOR_REDIS_URL"


class HubLink:
    def __init__(
        self, settings: CompileCache, warn: Callable[[str, CellReport | None], None], out: Callable[[], TextIO]
    ) -> None:
        self.settings = settings
        self._warn = warn
        self._out = out
        self._down_until: dict[str, float] = {}
        self._warned: set[str] = set()
        self._untold: dict[str, str] = {}  # failures found in the background, told by the next cell
        self._trust_warned = False
        self._clients: dict[tuple, Any] = {}  # one Redis connection pool per URL, shared by the session's hubs
        self._torch_before: dict[tuple[str, str], Any] | None = None  # what --torch-remote changed, for close()

    # -- which hub --------------------------------------------------------------------------------------------
    def for_cell(self, opts: CellOptions) -> RedisHub | None:
        """The hub this cell uses, or None (off, not configured, or found down in the last minute)."""
        if opts.no_hub:
            return None
        config = HubConfig.from_settings(self.settings, opts.hub, opts.namespace, opts.ttl)
        if config is None:
            return None
        if self._is_down(config.url):
            untold = self._untold.pop(config.url, None)
            if untold is not None and config.url not in self._warned:  # found down in the background: say it here
                self._warned.add(config.url)
                self._warn(f"{untold}; carrying on without the hub (the local store is unaffected)", None)
            return None
        if config.secret is None and not self._trust_warned:
            self._trust_warned = True
            self._warn(
                "no team secret is set (CompileCache.secret / JUPYTER_COMPILE_CACHE_SECRET): bundles pulled from the "
                "hub are trusted as they are (they contain pickled code); set one to sign and verify them",
                None,
            )
        return RedisHub(config, self._clients)

    def for_toolchain(self) -> RedisHub | None:
        """The session's hub, in a namespace of its own for the CPU probe programs (one bundle per CPU
        fingerprint, out of the way of the team's bundle names)."""
        return self.for_cell(CellOptions(namespace=f"{self.settings.namespace}/toolchain"))

    def _is_down(self, url: str) -> bool:
        return self._down_until.get(url, 0) > time.time()

    def failed(self, hub: RedisHub, exc: Exception, report: CellReport | None, quiet: bool = False) -> None:
        """One warning per hub and session, then a minute without it. `quiet` (a background thread): the warning
        waits for the next cell that would have used the hub."""
        self._down_until[hub.config.url] = time.time() + DOWN_SECONDS
        if quiet:
            self._untold[hub.config.url] = str(exc)
        elif hub.config.url not in self._warned:
            self._warned.add(hub.config.url)
            self._warn(f"{exc}; carrying on without the hub (the local store is unaffected)", report)
        elif report is not None:
            report.warnings.append(str(exc))

    def status(self, force: bool = False) -> dict[str, Any]:
        """The session's hub: redacted URL, namespace, cluster or not, reachable or not, latency.

        A hub found down in the last minute is not pinged again unless `force`d (`%compile_cache hub status`):
        the panel refreshes after every cell and must not add a connect timeout to each.
        """
        config = HubConfig.from_settings(self.settings)
        if config is None:
            return {"url": None}
        hub = RedisHub(config, self._clients)
        info: dict[str, Any] = {"url": hub.display_url, "namespace": config.namespace, "signed": bool(config.secret)}
        if not force and self._is_down(config.url):
            info["reachable"], info["error"] = False, "unreachable a moment ago (not retried yet)"
            return info
        try:
            info["latency_ms"] = hub.ping() * 1000
            info["reachable"] = True
            info["cluster"] = hub.is_cluster
            self._down_until.pop(config.url, None)
        except HubError as exc:
            info["reachable"], info["error"] = False, str(exc)
        return info

    # -- push and single flight ---------------------------------------------------------------------------------
    def push(
        self,
        hub: RedisHub,
        store: LocalStore,
        manifest: Manifest,
        report: CellReport,
        quiet: bool,
        background: bool = False,
    ) -> None:
        """`background`: from a thread other than the cell's, so a failure is told by the next cell (`failed`)."""
        if self._is_down(hub.config.url):  # it failed earlier in this cell: don't pay its timeout again
            return
        bar = TransferBar(f"pushing {manifest.name!r} to the hub", quiet)
        try:
            HubSource(hub).push(manifest, store, bar)
            report.pushed = True
        except HubError as exc:
            self.failed(hub, exc, report, quiet=background)
        finally:
            bar.close()

    def single_flight(
        self,
        hub: RedisHub | None,
        name: str,
        opts: CellOptions,
        report: CellReport,
        restore: Callable[[], RestoreResult],
    ) -> Lease | None:
        """If nothing was restored, take NAME's lease on the hub, or wait (`--wait`) for the collaborator who holds
        it, calling `restore` every second until their bundle arrives."""
        if hub is None or not opts.save or (report.restore is not None and report.restore.restored):
            return None
        if self._is_down(hub.config.url):  # the restore just found it down
            return None
        fp = fingerprint.digest(fingerprint.current())
        try:
            lease = hub.lease(name, fp, writer())
            holder = lease.acquire()
        except HubError as exc:
            self.failed(hub, exc, report)
            return None
        if holder is None:
            return lease
        since = time.time() - float(holder.get("since", time.time()))
        message = f"{name!r} is being compiled by {holder.get('holder')} (for {since:.0f} s)"
        if opts.wait <= 0:
            print(f"compile_cache: {message}; compiling here too (use --wait SECONDS to wait for it)", file=self._out())
            return None
        print(f"compile_cache: {message}; waiting up to {opts.wait:.0f} s for that bundle", file=self._out())
        deadline = time.time() + opts.wait
        while time.time() < deadline:
            time.sleep(min(1.0, max(0.0, deadline - time.time())))
            result = restore()
            if result.restored:
                report.restore = result
                return None
            try:
                if hub._call(lambda: hub.client.exists(lease.key)) == 0:  # the holder finished or died, no bundle
                    break
            except HubError:
                break
        print(f"compile_cache: no bundle for {name!r} arrived; compiling", file=self._out())
        return None

    # -- torch's own Redis caches -------------------------------------------------------------------------------
    def point_torch_at(self, hub: RedisHub) -> None:
        """`--torch-remote`: torch's FX graph, AOTAutograd and autotune caches use the hub too (they then share
        graphs compiled outside our cells). `close()` puts back what was there."""
        if self._torch_before is None:
            self._torch_before = {("env", TORCH_REDIS_ENV): os.environ.get(TORCH_REDIS_ENV)}
            for module, attr in TORCH_REMOTE_SWITCHES:
                mod = importlib.import_module(module)
                if hasattr(mod, attr):
                    self._torch_before[(module, attr)] = getattr(mod, attr)
        os.environ[TORCH_REDIS_ENV] = hub.config.url
        for module, attr in self._torch_before:
            if module != "env":
                setattr(importlib.import_module(module), attr, True)

    @property
    def torch_remote(self) -> str | None:
        """The hub torch's own Redis caches use since a `--torch-remote` cell (for the rest of the kernel), or None."""
        return redact(os.environ.get(TORCH_REDIS_ENV)) if self._torch_before is not None else None

    def close(self) -> None:
        """Undo `point_torch_at` and drop the connections."""
        before, self._torch_before = self._torch_before, None
        for (module, attr), value in (before or {}).items():
            if module == "env":
                if value is None:
                    os.environ.pop(attr, None)
                else:
                    os.environ[attr] = value
            else:
                setattr(importlib.import_module(module), attr, value)
        for client in self._clients.values():
            try:
                client.close()
            except Exception:  # closing is best effort: the process may be exiting
                pass
        self._clients.clear()
