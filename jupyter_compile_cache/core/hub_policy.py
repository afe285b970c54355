"""How a session uses the hub: which hub a cell gets, pushing after a save, the single-flight lease, the hub's
state, and pointing torch's own Redis caches at it. Fetching is storage/sources.py's `find`.

Every hub failure becomes one warning per hub and session and a minute without that hub: a hub never breaks a
cell or the local store. The hub's key layout is storage/hub.py, its backends storage/backends/; the session and
the front ends reach the hub through this object and the `Source` protocol only.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..storage.backends import Backend, open_backend, redact
from ..storage.bundle import Manifest
from ..storage.hub import Hub, HubConfig, HubError, HubRefused, Lease
from ..storage.sources import HubSource
from ..storage.store import LocalStore
from .events import (
    NO_TRANSFER,
    CollaboratorCompiling,
    Event,
    HubRefusal,
    HubUnavailable,
    NoBundleArrived,
    NoTeamSecret,
    NoTorchRemote,
    Transfer,
)
from .options import CellOptions
from .records import CellReport, HubState, RestoreResult
from .settings import CompileCache

if TYPE_CHECKING:
    from ..torch_adapter.compiler import RemoteCaches

DOWN_SECONDS = 60  # a hub that failed is left alone this long, instead of paying its timeout in every cell
# A cell asks a hub that has not answered in the last DOWN_SECONDS for a ping, and waits this long for it: a hub that
# takes connections and never answers cost a cell its read timeout twice (19-22 s) before it was found down.
ANSWER_SECONDS = 2.0


def hub_config(
    settings: CompileCache, url: str | None = None, namespace: str | None = None, ttl: int | None = None
) -> HubConfig | None:
    """The hub of these settings, with a cell's or command's overrides; None when there is no hub."""
    url = url or settings.hub
    if not url or url == "off":
        return None
    return HubConfig(
        url=url,
        namespace=namespace or settings.namespace,
        secret=settings.secret.encode() if settings.secret else None,
        ttl=ttl or settings.hub_ttl or None,
        connect_timeout=settings.hub_connect_timeout,
        timeout=settings.hub_timeout,
        chunk_size=settings.hub_chunk_bytes,
    )


class HubPolicy:
    def __init__(self, settings: CompileCache, tell: Callable[[Event, CellReport | None], None]) -> None:
        self.settings = settings
        self._tell = tell
        self._down_until: dict[str, float] = {}
        self._answered_at: dict[str, float] = {}  # url -> when it last answered a cell's ping
        self._warned: set[str] = set()
        self._untold: dict[str, str] = {}  # failures found in the background, told by the next cell
        self._trust_warned = False
        self._no_torch_remote_told: set[str] = set()
        # One backend (and so one connection pool) per URL, shared by the session's hubs: a cell talks to the hub up
        # to three times (pull on a miss, lease, push) and should connect (and AUTH) once, not each time.
        self._backends: dict[tuple[str, float, float], Backend] = {}
        self.remote_caches: RemoteCaches | None = None  # what --torch-remote changed in torch, for close()

    # -- which hub --------------------------------------------------------------------------------------------
    def for_cell(self, opts: CellOptions, quiet: bool = False) -> HubSource | None:
        """The hub this cell uses, or None (off, not configured, found down in the last minute, or silent now);
        `quiet`: asked from a background thread (a failure is told by the next cell, as in `failed`)."""
        if opts.no_hub:
            return None
        config = hub_config(self.settings, opts.hub, opts.namespace, opts.ttl)
        if config is None:
            return None
        if self._is_down(config.url):
            untold = self._untold.pop(config.url, None)
            if untold is not None and config.url not in self._warned:  # found down in the background: say it here
                self._warned.add(config.url)
                self._tell(HubUnavailable(redact(config.url), untold), None)
            return None
        hub = HubSource(self._hub(config))
        return hub if self._answers(hub, quiet) else None

    def _answers(self, hub: HubSource, quiet: bool) -> bool:
        """Whether HUB answered a ping within ANSWER_SECONDS (asked only when it has not answered in the last
        DOWN_SECONDS); one that did not is failed (one warning, a minute without it). The ping runs on in a thread
        of its own until the backend's own timeout ends it."""
        if time.time() - self._answered_at.get(hub.url, 0.0) < DOWN_SECONDS:
            return True
        outcome: list[BaseException | None] = []

        def ping() -> None:
            try:
                hub.hub.ping()
                outcome.append(None)
            except Exception as exc:  # told below, as any hub failure
                outcome.append(exc)

        thread = threading.Thread(target=ping, name="jupyter_compile_cache hub ping", daemon=True)
        thread.start()
        thread.join(ANSWER_SECONDS)
        error = outcome[0] if outcome else HubError(f"hub {hub.display_url}: no answer within {ANSWER_SECONDS:g} s")
        if error is None:
            self._answered_at[hub.url] = time.time()
            return True
        failure = error if isinstance(error, HubError) else HubError(f"hub {hub.display_url}: {error}")
        self.failed(hub, failure, None, quiet=quiet)
        return False

    def for_toolchain(self) -> HubSource | None:
        """The session's hub, in a namespace of its own for the CPU probe programs (one bundle per CPU
        fingerprint, out of the way of the team's bundle names)."""
        return self.for_cell(CellOptions(namespace=f"{self.settings.namespace}/toolchain"), quiet=True)

    def for_command(
        self, url: str | None = None, namespace: str | None = None, ttl: int | None = None
    ) -> HubSource | None:
        """The hub a command names (the CLI's `hub` commands): tried even if it failed a moment ago, and its
        failures raised (HubError) for the command to report; None when there is no hub."""
        config = hub_config(self.settings, url, namespace, ttl)
        return HubSource(self._hub(config)) if config is not None else None

    def _hub(self, config: HubConfig) -> Hub:
        key = (config.url, config.connect_timeout, config.timeout)
        backend = self._backends.get(key)
        if backend is None:
            try:
                backend = self._backends[key] = open_backend(
                    config.url, config.connect_timeout, config.timeout, config.clock
                )
            except HubError:  # a URL no backend takes: the Hub raises it again at first use, where it is reported
                return Hub(config)
        return Hub(config, backend)

    def trust(self, hub: HubSource, report: CellReport | None) -> None:
        """Before a bundle moves to or from a hub without a team secret: say so, once a session."""
        if hub.hub.config.secret is None and not self._trust_warned:
            self._trust_warned = True
            self._tell(NoTeamSecret(), report)

    def down_url(self) -> str | None:
        """The session's hub (redacted) when it is configured and being left alone after a failure, else None."""
        config = hub_config(self.settings)
        return redact(config.url) if config is not None and self._is_down(config.url) else None

    def answered(self, url: str) -> None:
        """The hub at URL answered (a `hub check`): cells use it again at once."""
        self._down_until.pop(url, None)
        self._answered_at[url] = time.time()

    def failed_here(self, url: str | None = None) -> bool:
        """Whether the hub of URL (default: the session's) failed in this session a moment ago."""
        config = hub_config(self.settings, url)
        return config is not None and self._is_down(config.url)

    def _is_down(self, url: str) -> bool:
        return self._down_until.get(url, 0) > time.time()

    def failed(self, hub: HubSource, exc: Exception, report: CellReport | None, quiet: bool = False) -> None:
        """One warning per hub and session, then a minute without it (`quiet`, a background thread: at the next cell
        that would have used the hub). A refusal (HubRefused) costs no timeout: told once per hub, namespace and
        action, the hub stays in use for the rest."""
        if isinstance(exc, HubRefused):
            self._refused(hub, exc, report, quiet)
            return
        self._down_until[hub.url] = time.time() + DOWN_SECONDS
        self._answered_at.pop(hub.url, None)
        if quiet:
            self._untold[hub.url] = str(exc)
        elif hub.url not in self._warned:
            self._warned.add(hub.url)
            self._tell(HubUnavailable(hub.display_url, str(exc)), report)
        elif report is not None:  # kept in the cell's report, not told again
            report.warnings.append(HubUnavailable(hub.display_url, str(exc)))

    def _refused(self, hub: HubSource, exc: HubRefused, report: CellReport | None, quiet: bool) -> None:
        """Told once per hub, namespace and action; a user refused reading a namespace is not told again that it
        may not write there either. A background thread's refusal (the CPU probe's bundle) is not told: a cell that
        uses the hub meets the same rule and says it in its own terms."""
        if quiet:
            return
        where = f"{hub.url} {hub.namespace}"
        key = f"{where} {exc.action}"
        implied = exc.action == "write" and exc.denied and f"{where} read" in self._warned  # no news after a read
        if key in self._warned or implied:
            if report is not None:  # kept in the cell's report, not told again
                report.warnings.append(HubRefusal(hub.display_url, str(exc), exc.action))
            return
        self._warned.add(key)
        self._tell(HubRefusal(hub.display_url, str(exc), exc.action), report)

    def state(self, force: bool = False, ping: bool = True) -> HubState:
        """The session's hub: redacted URL, namespace, kind, reachable or not, latency. A hub found down in the last
        minute is not pinged again unless `force`d; `ping` False asks nothing of it (the panel after a cell)."""
        config = hub_config(self.settings)
        if config is None:
            return HubState()
        hub = self._hub(config)
        state = HubState(url=hub.display_url, namespace=config.namespace, signed=bool(config.secret))
        if not force and self._is_down(config.url):
            state.reachable, state.error = False, "unreachable a moment ago (not retried yet)"
            return state
        if not ping:
            return state
        try:
            state.latency_ms = hub.ping() * 1000
            state.reachable = True
            state.kind = hub.backend.kind
            self.answered(config.url)
        except HubError as exc:
            state.reachable, state.error = False, str(exc)
        return state

    # -- push and single flight ---------------------------------------------------------------------------------
    def push(
        self,
        hub: HubSource,
        store: LocalStore,
        manifest: Manifest,
        report: CellReport,
        bar: Transfer = NO_TRANSFER,
        background: bool = False,
    ) -> None:
        """`bar`: the front end's progress display. `background`: from a thread other than the cell's, so a failure
        is told by the next cell (`failed`)."""
        if self._is_down(hub.url):  # it failed earlier in this cell: don't pay its timeout again
            return
        self.trust(hub, report)
        start = time.perf_counter()
        try:
            hub.push(manifest, store, bar)
            report.pushed, report.push_seconds = True, time.perf_counter() - start
        except HubError as exc:
            self.failed(hub, exc, report, quiet=background)
        finally:
            bar.close()

    def single_flight(
        self,
        hub: HubSource | None,
        name: str,
        fingerprint_id: str,
        writer: str,
        opts: CellOptions,
        report: CellReport,
        restore: Callable[[], RestoreResult],
    ) -> Lease | None:
        """If nothing was restored, take NAME's lease on the hub, or wait (`--wait`) for the collaborator who holds
        it, calling `restore` every second until their bundle arrives. A cell that compiles while another holds the
        lease (no wait, or none long enough) leaves the push to them (`report.push_left_to`): the nodes of one job
        all compile at once, and one version reaches the hub, not one per node."""
        if hub is None or not opts.save or (report.restore is not None and report.restore.restored):
            return None
        if self._is_down(hub.url):  # the restore just found it down
            return None
        try:
            lease = hub.hub.lease(name, fingerprint_id, writer)
            holder = lease.acquire()
        except HubError as exc:
            self.failed(hub, exc, report)
            return None
        if holder is None:
            return lease
        since = time.time() - float(holder.get("since", time.time()))
        holder_name = str(holder.get("holder"))
        self._tell(CollaboratorCompiling(name, holder_name, since, opts.wait), None)
        if opts.wait <= 0:
            report.push_left_to = holder_name
            return None
        deadline = time.time() + opts.wait
        while time.time() < deadline:
            time.sleep(min(1.0, max(0.0, deadline - time.time())))
            result = restore()
            if result.restored:
                report.restore = result
                return None
            try:
                if not lease.held():  # the holder finished or died, no bundle
                    break
            except HubError:
                break
        else:  # still compiling there when the wait ran out
            report.push_left_to = holder_name
        self._tell(NoBundleArrived(name), None)
        return None

    def push_left_to(self, hub: HubSource, name: str, fingerprint_id: str, since: float) -> str | None:
        """At the save of a cell that compiled while a collaborator held NAME's lease: whose bundle the hub gets
        instead of this one. The holder's while it still compiles, or once it pushed a version since `since`;
        None (push this one) when it ended without one, or died (on this machine: its process is gone)."""
        try:
            holder = hub.hub.lease_holder(name, fingerprint_id)
            if holder is not None:
                return str(holder.get("holder"))
            newer = [m for m in hub.versions(name) if m.fingerprint_id == fingerprint_id and m.created >= since]
        except HubError:
            return None  # the push says what is wrong with the hub
        return newer[0].writer if newer else None

    # -- torch's own Redis caches -------------------------------------------------------------------------------
    def point_torch_at(self, hub: HubSource, report: CellReport | None = None) -> None:
        """`--torch-remote`: torch's FX graph, AOTAutograd and autotune caches use the hub too (they then share
        graphs compiled outside our cells), where the hub is a Redis torch can open; else that is said once.
        `close()` puts back what was there."""
        try:
            url = hub.hub.backend.torch_redis_url
        except HubError as exc:
            self.failed(hub, exc, report)
            return
        if url is None:
            if hub.url not in self._no_torch_remote_told:
                self._no_torch_remote_told.add(hub.url)
                self._tell(NoTorchRemote(hub.display_url, hub.hub.backend.kind), report)
            return
        if self.remote_caches is None:
            from ..torch_adapter.compiler import RemoteCaches  # here: a listing never points torch anywhere

            self.remote_caches = RemoteCaches()
        self.remote_caches.point_at(url)

    @property
    def torch_remote(self) -> str | None:
        """The hub torch's own Redis caches use since a `--torch-remote` cell (for the rest of the kernel), or None."""
        url = self.remote_caches.url if self.remote_caches is not None else None
        return redact(url) if url else None

    def close(self) -> None:
        """Undo `point_torch_at` and drop the connections."""
        if self.remote_caches is not None:
            self.remote_caches.undo()
        for backend in self._backends.values():
            backend.close()
        self._backends.clear()
