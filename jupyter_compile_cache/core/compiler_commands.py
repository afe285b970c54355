"""The commands that ask torch's compiler (`status`, `device`, the layer switches): they need the kernel's session,
and import torch's side only when called, so a store's listing (commands.py) imports nothing of it."""

from __future__ import annotations

import os
import platform
from typing import TYPE_CHECKING

from .records import DeviceSummary, LayerState, SessionStatus, SwitchScope, TimeSaved
from .store_session import StoreSession

if TYPE_CHECKING:
    from ..torch_adapter import layers
    from .session import CompileCacheSession


class CompilerCommands:
    def __init__(self, session: StoreSession) -> None:
        self.session = session
        self.settings = session.settings

    @property
    def kernel(self) -> CompileCacheSession:
        """The kernel's session, for the commands that ask the compiler."""
        from .session import CompileCacheSession

        if not isinstance(self.session, CompileCacheSession):
            raise TypeError("this command needs the kernel's session (CompileCacheSession), not StoreSession alone")
        return self.session

    # -- views ----------------------------------------------------------------------------------------------------
    def status(self, wait: bool = False, ping_hub: bool = True) -> SessionStatus:
        """Per-layer state: switch, env var, entries and bytes in torch's cache dir and the local store, this
        kernel's hits / misses / bypasses. While the compiler loads in the background it answers with what is on disk
        (`wait`: for the whole picture; two threads importing it can break torch's imports). `ping_hub` False: the
        hub as last known."""
        from ..torch_adapter import capture, cell_snapshot, compiler, layers

        session = self.kernel
        loading = None if wait else session.prewarm.loading()
        if loading is None:
            session.prewarm.join()
        roots = capture.cache_roots()
        usage = layers.disk_usage(roots["inductor"])
        store = session.store()
        stored = store.bundles()
        in_store = layers.bundle_usage([(m.name, m.size) for b in stored for m in b.manifest.members])
        totals = cell_snapshot.session_counts() if loading is None else {}
        layer_states = []
        for layer in layers.LAYERS:
            counts = totals.get(layer.name, {})
            scope = self.switch_scope(layer) if loading is None else SwitchScope.LOADING
            on_disk = usage.get(layer.name, {})
            layer_states.append(
                LayerState(
                    layer=layer.name,
                    title=layer.title,
                    scope=scope,
                    enabled=scope not in ("off", "n/a", "loading"),
                    supported=layer.supported() if loading is None else True,
                    switch=".".join(layer.switch) if layer.switch else None,
                    env_var=layer.env_var,
                    env_value=os.environ.get(layer.env_var) if layer.env_var else None,
                    place=layer.place,
                    entries=on_disk.get("entries", 0),
                    bytes=on_disk.get("bytes", 0),
                    store_files=in_store[layer.name]["files"],
                    store_bytes=in_store[layer.name]["bytes"],
                    hits=counts.get("hits", 0),
                    misses=counts.get("misses", 0),
                    bypasses=counts.get("bypasses", 0),
                )
            )
        store_bytes = sum(b.manifest.payload_bytes for b in stored)  # as `list`, `stats` and the cap count them
        from ..kernels.kernel_start import this_kernel_start  # here: `list` and the CLI never need the kernels

        return SessionStatus(
            hub=session.hub_policy.state(ping=ping_hub),
            settings=self.settings.resolved(),
            kernel_start=this_kernel_start(),
            cache_dir=roots["inductor"],
            store_dir=store.root,
            store_bytes=store_bytes,
            max_bytes=self.settings.max_bytes,
            precompile_default=session.precompile_default,
            store_other_bytes=store_bytes - sum(state.store_bytes for state in layer_states),
            torch_remote=session.hub_policy.torch_remote,
            stale_rejected=compiler.stale_count() if loading is None else 0,
            precompile_fallbacks=compiler.fallback_count() if loading is None else 0,
            layers=layer_states,
            cells=list(session.history),
            compiler_loading=loading,
            notebook=session.notebook.plan,
            notebook_path=session.notebook.path,
            notebook_fetched=len(session.notebook.fetched),
            notebook_error=session.notebook.error,
            time_saved=self.time_saved(),
        )

    def time_saved(self) -> TimeSaved:
        """Estimated compile time saved: per restored cell (cold time in the bundle minus this run), per layer."""
        from ..torch_adapter import layers

        per_layer = {layer.name: 0.0 for layer in layers.LAYERS}
        cells = []
        for report in self.kernel.history:
            saving = report.saving()
            if saving is None:
                continue
            cells.append(saving)
            saved = saving.saved
            hits = {name: counts.get("hits", 0) for name, counts in report.layers.items()}
            total_hits = sum(hits.values())
            for name, count in hits.items():
                if total_hits:
                    per_layer[name] = per_layer.get(name, 0.0) + saved * count / total_hits
        return TimeSaved(per_layer, cells, sum(c.saved for c in cells))

    def device(self) -> DeviceSummary:
        """This kernel's GPU (name, compute capability, memory in use / total) or CPU (model, ISA)."""
        import torch

        from ..torch_adapter import fingerprint

        fp = fingerprint.current()
        versions = {"torch": fp["torch"], "triton": fp["triton"], "cuda": fp["cuda"], "hip": fp["hip"]}
        if torch.cuda.is_available():
            free, total = torch.cuda.mem_get_info()
            return DeviceSummary(
                "gpu", fp["gpu_name"], **versions, capability=fp["gpu_capability"], memory_used=total - free,
                memory_total=total,
            )  # fmt: skip
        return DeviceSummary("cpu", fp["cpu_model"] or platform.processor(), **versions, isa=fp["cpu_isa"])

    # -- layer switches -------------------------------------------------------------------------------------------
    def set_layer(self, layer_name: str, enabled: bool) -> layers.Layer:
        """Switch one of torch's cache layers. Dynamo precompile drops identity guards that only our cells put
        back, so it is switched for `%%compile_cache` cells alone (CompileCache.precompile) and torch's global
        `caching_precompile` is never left on; the other layers are torch's own switches for the whole kernel."""
        from ..torch_adapter import layers
        from ..torch_adapter.precompile import PrecompileGuard

        self.kernel.prewarm.join()
        layer = layers.resolve(layer_name)
        if layer.name == "dynamo_precompile":
            if enabled and not PrecompileGuard.available():  # disabling it is always allowed: a no-op there
                raise ValueError(
                    "Dynamo precompile is not used with this torch (it needs torch's caching_precompile switch "
                    "and torch 2.11 or newer)"
                )
            self.settings.precompile = enabled
        else:
            layer.set_switch(enabled)
        return layer

    def layer_names(self) -> list[str]:
        from ..torch_adapter import layers

        return [layer.name for layer in layers.LAYERS]

    def switch_scope(self, layer: layers.Layer) -> SwitchScope:
        """Where LAYER applies now."""
        if not layer.supported():
            return SwitchScope.NOT_AVAILABLE
        if layer.name == "dynamo_precompile":
            if layer.switch_value():  # torch's own switch, set outside us (TORCH_CACHING_PRECOMPILE=1, say)
                return SwitchScope.EVERYWHERE
            return SwitchScope.CELLS if self.kernel.precompile_default else SwitchScope.OFF
        if layer.switch is None:
            return SwitchScope.KERNEL
        return SwitchScope.KERNEL if layer.switch_value() else SwitchScope.OFF
