"""The session's side of the hub: which hub a cell uses, pulling on a local miss, pushing after a save, the
single-flight lease, and torch's own Redis caches. Mixed into CompileCacheSession; the Redis protocol itself is
in hub.py. Every hub failure becomes one warning and a miss: a hub never breaks a cell or the local store.
"""

from __future__ import annotations

import getpass
import importlib
import os
import socket
import tempfile
import time
from typing import TYPE_CHECKING, Any, TextIO

from . import bundle, fingerprint
from .bundle import BundleError, Manifest
from .hub import HubConfig, Lease, RedisHub
from .store import LocalStore, human_bytes

if TYPE_CHECKING:
    from .session import CellOptions, CellReport, RestoreResult


def writer() -> str:
    """user@host, recorded in manifests and leases."""
    try:
        user = getpass.getuser()
    except Exception:
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


class Progress:
    """A one-line progress report on stderr, shown only once an operation has taken more than a second."""

    def __init__(self, label: str, stream: TextIO, quiet: bool) -> None:
        self.label, self.stream, self.quiet = label, stream, quiet
        self.start = time.perf_counter()
        self.shown = False
        self.last = 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.perf_counter()
        if self.quiet or now - self.start < 1.0 or now - self.last < 0.2:
            return
        self.last, self.shown = now, True
        pct = 100.0 * done / total if total else 100.0
        rate = done / (now - self.start) / (1 << 20)
        print(
            f"\rcompile_cache: {self.label}: {human_bytes(done)} of {human_bytes(total)} ({pct:.0f} %, "
            f"{rate:.0f} MB/s)",
            end="",
            file=self.stream,
            flush=True,
        )

    def done(self) -> None:
        if self.shown:
            print(file=self.stream, flush=True)
            self.shown = False


class HubLink:
    """Hub behaviour of CompileCacheSession (which provides warn, out, err, store, restore)."""

    hub_url: str | None
    hub_off: bool
    _hub_down_until: dict[str, float]
    _hub_warned: set[str]
    _trust_warned: bool
    _hub_clients: dict[tuple, Any]
    _restored_paths: dict[str, list[str]]
    warn: Any
    out: TextIO
    err: TextIO
    store: Any
    restore: Any

    def hub_for(self, opts: CellOptions) -> RedisHub | None:
        """The hub this cell uses, or None (off, not configured, or recently found down)."""
        if opts.no_hub or (self.hub_off and not opts.hub):
            return None
        config = HubConfig.from_env(opts.hub or self.hub_url, opts.namespace, opts.ttl)
        if config is None:
            return None
        if self._hub_down_until.get(config.url, 0) > time.time():
            return None
        if config.secret is None and not self._trust_warned:
            self._trust_warned = True
            self.warn(
                "no JUPYTER_COMPILE_CACHE_SECRET is set: bundles pulled from the hub are trusted as they are "
                "(they contain pickled code); set a team secret to sign and verify them"
            )
        return RedisHub(config, self._hub_clients)

    def hub_status(self, force: bool = False) -> dict[str, Any]:
        """The session's hub: redacted URL, namespace, reachable or not, latency (for status, the panel).

        A hub found down in the last minute is not pinged again unless `force`d (`%compile_cache hub status`):
        the panel refreshes after every cell and must not add a connect timeout to each.
        """
        from .hub import HubError

        config = None if self.hub_off else HubConfig.from_env(self.hub_url)
        if config is None:
            return {"url": None}
        hub = RedisHub(config, self._hub_clients)
        info: dict[str, Any] = {
            "url": hub.display_url,
            "namespace": config.namespace,
            "signed": config.secret is not None,
        }
        if not force and self._hub_down_until.get(config.url, 0) > time.time():
            info["reachable"], info["error"] = False, "unreachable a moment ago (not retried yet)"
            return info
        try:
            info["latency_ms"] = hub.ping() * 1000
            info["reachable"] = True
            self._hub_down_until.pop(config.url, None)
        except HubError as exc:
            info["reachable"], info["error"] = False, str(exc)
        return info

    def _hub_failed(self, hub: RedisHub, exc: Exception, report: CellReport | None) -> None:
        # One warning per hub and session; then skip it for a minute instead of paying the timeout every cell.
        self._hub_down_until[hub.config.url] = time.time() + 60
        if hub.config.url not in self._hub_warned:
            self._hub_warned.add(hub.config.url)
            self.warn(f"{exc}; carrying on without the hub (the local store is unaffected)", report)
        elif report is not None:
            report.warnings.append(str(exc))

    def _restore_from_hub(
        self,
        hub: RedisHub,
        name: str,
        store: LocalStore,
        now: dict[str, Any],
        roots: dict[str, str],
        result: RestoreResult,
        report: CellReport | None,
        quiet: bool,
    ) -> None:
        from .hub import HubError, check_signature

        try:
            versions = hub.versions(name)
        except HubError as exc:
            self._hub_failed(hub, exc, report)
            return
        for manifest in versions:
            reason = fingerprint.incompatibility(manifest, now)
            if reason:
                result.skipped.append(f"hub version {manifest.version}: incompatible ({reason})")
                continue
            try:
                check_signature(manifest, hub.config.secret)
            except HubError as exc:
                self.warn(f"{exc}; refused, the cell compiles instead", report)
                result.skipped.append(f"hub version {manifest.version}: {exc}")
                continue
            pull_start = time.perf_counter()
            progress = Progress(f"pulling {name!r} from the hub", self.err, quiet)
            try:
                with tempfile.TemporaryFile() as buffer:
                    hub.pull(manifest, buffer, progress)
                    buffer.seek(0)
                    local = store.adopt(manifest, buffer)  # write-through: next time it is local
            except HubError as exc:
                progress.done()
                self.warn(f"could not pull {name!r} from the hub: {exc}; compiling instead", report)
                result.skipped.append(f"hub version {manifest.version}: {exc}")
                return
            except (BundleError, OSError) as exc:
                progress.done()
                self.warn(f"bundle {name!r} from the hub is unusable: {exc}", report)
                result.skipped.append(f"hub version {manifest.version}: {exc}")
                continue
            progress.done()
            result.pull_seconds = time.perf_counter() - pull_start
            try:
                with store.open_payload(local) as payload:
                    written = bundle.extract(payload, local, roots)
            except BundleError as exc:
                store.quarantine(local, str(exc))
                self.warn(f"bundle {name!r} from the hub is damaged: {exc}; quarantined", report)
                continue
            self._restored_paths[name] = written
            result.source, result.version, result.hub_url = "hub", local.version, hub.display_url
            result.files, result.bytes, result.uses_cpu_kernels = (
                len(written),
                local.payload_bytes,
                local.uses_cpu_kernels,
            )
            return

    def _push(self, hub: RedisHub, store: LocalStore, manifest: Manifest, report: CellReport, quiet: bool) -> None:
        from .hub import HubError

        progress = Progress(f"pushing {manifest.name!r} to the hub", self.err, quiet)
        try:
            hub.push(manifest, store.payload_path(manifest), progress)
            report.pushed = True
        except HubError as exc:
            self._hub_failed(hub, exc, report)
        finally:
            progress.done()

    def push(self, name: str, store_root: str | None = None) -> str:
        """Push the newest local version of NAME to the hub; returns what happened, in words."""
        from .session import CellOptions, CellReport, check_name

        hub = self.hub_for(CellOptions(store=store_root))
        if hub is None:
            return "no hub configured (JUPYTER_COMPILE_CACHE_HUB or %compile_cache hub URL)"
        store = self.store(store_root)
        versions = store.versions(check_name(name))
        if not versions:
            return f"no local bundle named {name!r}"
        report = CellReport(name)
        self._push(hub, store, versions[0], report, quiet=True)
        return f"pushed {name!r} to {hub.display_url}" if report.pushed else f"push failed: {report.warnings[-1:]}"

    def remove(self, name: str, version: str | None = None, where: str = "local") -> int:
        """Delete NAME (one version or all) from the local store or the hub."""
        from .session import CellOptions, check_name

        if where == "hub":
            hub = self.hub_for(CellOptions())
            return hub.remove(check_name(name), version) if hub is not None else 0
        return self.store().remove(check_name(name), version)

    def _single_flight(self, name: str, opts: CellOptions, report: CellReport) -> Lease | None:
        """If nothing was restored, take NAME's lease on the hub, or wait for the collaborator who holds it."""
        if report.restore is not None and report.restore.restored:
            return None
        hub = self.hub_for(opts)
        if hub is None or not opts.save:
            return None
        from .hub import HubError

        fp = fingerprint.digest(fingerprint.current())
        try:
            lease = hub.lease(name, fp, writer())
            holder = lease.acquire()
        except HubError as exc:
            self._hub_failed(hub, exc, report)
            return None
        if holder is None:
            return lease
        since = time.time() - float(holder.get("since", time.time()))
        message = f"{name!r} is being compiled by {holder.get('holder')} (for {since:.0f} s)"
        if opts.wait <= 0:
            print(f"compile_cache: {message}; compiling here too (use --wait SECONDS to wait for it)", file=self.out)
            return None
        print(f"compile_cache: {message}; waiting up to {opts.wait:.0f} s for that bundle", file=self.out)
        deadline = time.time() + opts.wait
        while time.time() < deadline:
            time.sleep(min(1.0, max(0.0, deadline - time.time())))
            result = self.restore(name, opts.store, opts.quiet, report, opts)
            if result.restored:
                report.restore = result
                return None
            try:
                if hub.client.exists(lease.key) == 0:  # the holder finished or died without a bundle
                    break
            except Exception:
                break
        print(f"compile_cache: no bundle for {name!r} arrived; compiling", file=self.out)
        return None

    def _torch_remote(self, opts: CellOptions) -> None:
        """Point torch's own Redis caches at the hub (they then share graphs compiled outside our cells too)."""
        hub = self.hub_for(opts) if opts.torch_remote else None
        if hub is None:
            return
        os.environ["TORCHINDUCTOR_REDIS_URL"] = hub.config.url
        switches = (
            ("torch._inductor.config", "fx_graph_remote_cache"),
            ("torch._inductor.config", "autotune_remote_cache"),
            ("torch._functorch.config", "enable_remote_autograd_cache"),
        )
        for module, attr in switches:
            mod = importlib.import_module(module)
            if hasattr(mod, attr):
                setattr(mod, attr, True)
