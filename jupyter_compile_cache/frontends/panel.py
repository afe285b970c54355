"""An ipywidgets panel over the session: per-layer cache state, toggles, bundles, and cold-vs-restored times.

Standard ipywidgets 8 controls only (no custom JavaScript, nothing fetched from a CDN), so it renders offline in
JupyterLab 4, Notebook 7 and VS Code. `%compile_cache panel` or `jupyter_compile_cache.Panel()` shows it. It
refreshes after every `%%compile_cache` cell (a session listener) and on Refresh; errors raised in its callbacks
are shown in the panel instead of vanishing. After a kernel restart, run the magic again for a live panel.

Compile time saved is an estimate: for each restored cell, the cold time recorded in the bundle when it was
saved minus this run's time (its restore included); per layer, that saving is split in proportion to the layer's
hits in that cell. Per layer, "in cache dir" counts torch's cache dir, which holds more than the bundles (every
cell's files, the layers sharing some), so it does not add up to the store's size.
"""

from __future__ import annotations

import html
import os
import traceback
from collections.abc import Callable
from typing import Any

from ..core.commands import Commands
from ..core.events import CellFinished, Event
from ..core.records import (
    BundleRow,
    CellOptions,
    CellSaving,
    GcOptions,
    Removed,
    RemoveOptions,
    RestoreResult,
    SessionStatus,
    TimeSaved,
)
from ..core.session import CompileCacheSession
from ..units import count, human_bytes
from . import render
from .tables import Explanation, age, hub_line, notebook_line, removal_lines


def bar_chart_svg(cells: list[CellSaving], width: int = 520) -> str:
    """Cold vs restored seconds per cell, as inline SVG (no plotting library, nothing to download). Each cell's whole
    name stands on its own line above its bars, so no name is cut."""
    if not cells:
        return "<i>No restored %%compile_cache cell yet: run one twice (or after a restart) to compare.</i>"
    top = max(max(c.cold, c.restored) for c in cells) or 1.0
    label, bar, gap = 14, 12, 10
    row = label + 2 * (bar + 2) + gap
    scale = (width - 70) / top
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{row * len(cells) + 20}" '
        'font-family="sans-serif" font-size="11">',
        '<rect x="0" y="2" width="10" height="10" fill="#d9534f"/><text x="14" y="11">cold</text>'
        '<rect x="60" y="2" width="10" height="10" fill="#5cb85c"/><text x="74" y="11">restored</text>',
    ]
    for i, c in enumerate(cells):
        y = 20 + i * row
        parts.append(f'<text x="0" y="{y + label - 3}">{html.escape(c.name)}</text>')
        for j, (key, color) in enumerate((("cold", "#d9534f"), ("restored", "#5cb85c"))):
            value = getattr(c, key)
            w = max(1.0, value * scale)
            top_y = y + label + j * (bar + 2)
            parts.append(
                f'<rect x="0" y="{top_y}" width="{w:.1f}" height="{bar}" fill="{color}"/>'
                f'<text x="{w + 4:.1f}" y="{top_y + bar - 2}">{value:.2f} s</text>'
            )
    parts.append("</svg>")
    return "".join(parts)


def _wrapping(text: str) -> str:
    # widget HTML does not wrap by itself: a long torch switch name would run out of its column
    breakable = html.escape(text).replace(".", ".<wbr>")  # a dotted name breaks after a dot first
    return f'<span style="white-space: normal; overflow-wrap: anywhere">{breakable}</span>'


def _from_home(path: str) -> str:
    home = os.path.expanduser("~")
    return "~" + path[len(home) :] if home not in ("", "/") and path.startswith(home + os.sep) else path


class Panel:
    """The widget tree plus the callbacks; `widget` is what gets displayed."""

    def __init__(self, session: CompileCacheSession | None = None) -> None:
        try:
            import ipywidgets as w
        except ImportError:
            raise ImportError(
                "the panel needs ipywidgets 8, which is not installed: pip install 'jupyter_compile_cache[panel]'"
            ) from None

        if session is None:
            from ..core.session import get_session

            session = get_session()
        self.session = session
        self.commands = Commands(session)
        self._w = w
        self.header = w.HTML()
        # One grid, so every row's cells line up whatever their content (an HBox per row drifts).
        self.layer_box = w.GridBox(
            layout=w.Layout(
                grid_template_columns=" ".join(width for _h, width in _LAYER_COLUMNS),
                align_items="center",
                width="100%",
            )
        )
        self.bundle_box = w.VBox()
        # a restore's progress (pulled, then restored), shown while one runs
        self.progress = w.FloatProgress(
            min=0.0, max=1.0, style={"description_width": "initial"}, layout=w.Layout(display="none", width="560px")
        )
        self.chart = w.HTML()
        self.messages = w.Output(layout=w.Layout(max_height="160px", overflow="auto"))
        self.refresh_button = w.Button(description="Refresh", icon="refresh")
        self.refresh_button.on_click(self._guarded(lambda _b: self.refresh()))
        self.free_button = w.Button(
            description="free space…", tooltip="versions that cannot restore here, then over the cap"
        )
        self.free_button.on_click(self._guarded(lambda _b: self.preview_gc("free")))
        self.clear_button = w.Button(description="clear all…", tooltip="every version in the local store")
        self.clear_button.on_click(self._guarded(lambda _b: self.preview_gc("clear")))
        self._pending_gc: str | None = None
        self.toggles: dict[str, Any] = {}
        self.bundle_buttons: dict[tuple[str, ...], Any] = {}  # (name, version, where, action)
        self._pending_delete: tuple[str, str, str] | None = None
        self.widget = w.VBox(
            [
                w.HBox([w.HTML("<b>jupyter_compile_cache</b>"), self.refresh_button]),
                self.header,
                w.HTML("<b>Cache layers</b> (toggles flip torch's switch in this kernel)"),
                self.layer_box,
                w.HBox([w.HTML("<b>Bundles</b>"), self.free_button, self.clear_button]),
                self.progress,
                self.bundle_box,
                w.HTML("<b>Cold vs restored</b> (per %%compile_cache cell)"),
                self.chart,
                self.messages,
            ]
        )
        session.listeners.append(self._on_event)
        self.refresh()

    # -- display ------------------------------------------------------------------------------------------------
    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    def close(self) -> None:
        if self._on_event in self.session.listeners:
            self.session.listeners.remove(self._on_event)
        self.widget.close()

    def _on_event(self, event: Event) -> None:
        """The session's events: a warning is said here too (a cell's output scrolls away), a cell's end refreshes."""
        if event.level == "warning":
            self.say(f"warning: {event.text()}")
        elif isinstance(event, CellFinished):
            self.refresh()

    def _guarded(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Errors in widget callbacks vanish unless shown: put them in the panel."""

        def run(*args: Any) -> Any:
            try:
                return fn(*args)
            except Exception:  # a button's failure is shown in the panel, never lost in a callback
                self.say(traceback.format_exc(), error=True)
                return None

        return run

    def say(self, text: str, error: bool = False) -> None:
        # append_* sets the widget's outputs directly: works inside callbacks, where print() output goes nowhere
        if error:
            self.messages.append_stderr("error: " + text + "\n")
        else:
            self.messages.append_stdout(text + "\n")

    # -- content --------------------------------------------------------------------------------------------------
    def refresh(self) -> None:
        w = self._w
        status = self.commands.status(wait=True)  # the panel shows every layer's switch
        saved = self.commands.time_saved()
        self.header.value = self._header_html(status, saved)
        cells: list[Any] = [w.HTML(f"<b>{h}</b>") for h, _wd in _LAYER_COLUMNS]
        for row in status.layers:
            toggle = self.toggles.get(row.layer)
            if toggle is None:
                toggle = w.Checkbox(value=bool(row.enabled), indent=False, layout=w.Layout(width="auto"))
                toggle.observe(self._guarded(lambda change, name=row.layer: self._toggled(name, change)), "value")
                self.toggles[row.layer] = toggle
            toggle.disabled = not row.supported or row.switch is None
            if toggle.value != bool(row.enabled):
                toggle.value = bool(row.enabled)
            values = [
                row.title,
                f"{row.entries} / {human_bytes(row.bytes)}",
                row.hits,
                row.misses,
                row.bypasses,
                f"{saved.per_layer.get(row.layer, 0.0):.1f} s",
                row.switch or "always on",
            ]
            cells += [toggle, *(w.HTML(_wrapping(str(v))) for v in values)]
        self.layer_box.children = cells
        self._refresh_bundles(hub=status.hub.url is not None)
        self.chart.value = bar_chart_svg(saved.cells)

    def _header_html(self, status: SessionStatus, saved: TimeSaved) -> str:
        dev = self.commands.device()
        if dev.kind == "gpu":
            device = (
                f"{html.escape(str(dev.name))} (compute {dev.capability}), memory "
                f"{human_bytes(dev.memory_used)} / {human_bytes(dev.memory_total)}"
            )
        else:
            device = f"CPU {html.escape(str(dev.name))}, ISA {html.escape(str(dev.isa))}"
        versions = f"torch {dev.torch}, Triton {dev.triton or '-'}, CUDA {dev.cuda or '-'}"
        hub = html.escape(hub_line(status.hub))
        cap = status.max_bytes
        precompile = (
            f"<div>precompile: {status.stale_rejected} stale entries refused, "
            f"{count(status.precompile_fallbacks, 'function')} fell back to plain torch.compile</div>"
        )
        notebook = ""
        if status.notebook is not None:
            notebook = f"<div>{html.escape(notebook_line(status.notebook, status.notebook_fetched))}</div>"
        elif status.notebook_error is not None:
            notebook = f"<div>the notebook's bundles were not fetched ahead: {html.escape(status.notebook_error)}</div>"
        elif status.notebook_path is not None:
            notebook = "<div>the notebook's bundles: still being fetched</div>"
        return (
            f"<div>{device}</div><div>{versions}</div><div>kernel: {html.escape(status.kernel_start.line())}</div>"
            f"<div>local store {html.escape(_from_home(status.store_dir))}: {human_bytes(status.store_bytes)} of the "
            f"{human_bytes(cap)} cap ({100 * status.store_bytes / max(cap, 1):.1f} %); "
            f"cache dir {html.escape(_from_home(status.cache_dir))}</div><div>hub: {hub}</div>"
            f"<div>compile time saved this session (estimate): {saved.total:.1f} s</div>{precompile}{notebook}"
        )

    def _refresh_bundles(self, hub: bool) -> None:
        w = self._w
        rows = []
        self.bundle_buttons = {}
        for b in self.commands.bundles():
            key = (b.where, b.name, b.version)
            match = "matches" if b.compatible else "does NOT match"
            label = w.HTML(
                f"{html.escape(b.name)} {b.short_id} [{b.where}] {human_bytes(b.bytes)}, {count(b.files, 'file')}, "
                f"made {age(b.created)} by {html.escape(b.writer)}, used {age(b.last_used)}; "
                f"{match} this machine",
                layout=w.Layout(width="560px"),
            )
            buttons = []
            for action in ("restore", "delete", "push", "explain"):
                if action == "push" and (b.where != "local" or not hub):
                    continue
                if action == "explain" and b.compatible:
                    continue
                button = w.Button(description=action, layout=w.Layout(width="80px"))
                button.on_click(self._guarded(lambda _b, a=action, bb=b: self._bundle_action(a, bb)))
                self.bundle_buttons[(*key, action)] = button
                buttons.append(button)
            rows.append(w.HBox([label, *buttons]))
        if self._pending_delete:
            name, _version, where = self._pending_delete
            yes = w.Button(
                description=f"delete {name} ({where})?", button_style="danger", layout=w.Layout(width="auto")
            )
            no = w.Button(description="cancel")
            yes.on_click(self._guarded(lambda _b: self.confirm_delete(True)))
            no.on_click(self._guarded(lambda _b: self.confirm_delete(False)))
            self.confirm_buttons = (yes, no)
            rows.append(w.HBox([yes, no]))
        if self._pending_gc:
            plan = self._gc(dry_run=True).removals
            if plan:
                total = human_bytes(sum(r.bytes for r in plan))
                yes = w.Button(
                    description=f"remove {count(len(plan), 'version')}, {total}?",
                    button_style="danger",
                    layout=w.Layout(width="auto"),
                )
                no = w.Button(description="cancel")
                yes.on_click(self._guarded(lambda _b: self.confirm_gc(True)))
                no.on_click(self._guarded(lambda _b: self.confirm_gc(False)))
                self.confirm_buttons = (yes, no)
                rows.append(w.HBox([yes, no]))
            else:
                self._pending_gc = None
        self.bundle_box.children = rows or [w.HTML("<i>no bundles yet</i>")]

    # -- actions --------------------------------------------------------------------------------------------------
    def _toggled(self, layer_name: str, change: dict[str, Any]) -> None:
        layer = self.commands.set_layer(layer_name, bool(change["new"]))
        self.say(self.commands.switch_line(layer))

    def _bundle_action(self, action: str, b: BundleRow) -> None:
        if action == "restore":
            result = self._restore_with_progress(b.name)
            self.say(
                f"restored {b.name!r} from {result.source}"
                if result.restored
                else f"{b.name!r} not restored: {'; '.join(result.skipped) or 'nothing compatible'}"
            )
        elif action == "delete":
            self._pending_delete = (b.name, b.version, b.where)  # confirm first
        elif action == "push":
            self.say(repr(render.view(self.commands.push(b.name))))
        elif action == "explain":
            self.say(repr(Explanation(self.commands.explain(b.name))))
        self.refresh()

    def _restore_with_progress(self, name: str) -> RestoreResult:
        bar = self.progress
        bar.value, bar.description, bar.layout.display = 0.0, "restoring", None
        shown = [-1.0]

        def progress(done: int, total: int) -> None:
            fraction = done / total if total else 1.0
            if abs(fraction - shown[0]) >= 0.01 or fraction >= 1.0:  # a message per percent, not per chunk
                shown[0] = fraction
                bar.value = fraction
                bar.description = f"{name}: {human_bytes(done)} / {human_bytes(total)}"

        try:
            return self.session.restore(name, quiet=True, progress=progress)
        finally:
            bar.layout.display = "none"

    def _gc(self, dry_run: bool) -> Removed:
        """free: versions that cannot restore on this machine, then the least recently used over the cap; clear:
        every version."""
        if self._pending_gc == "clear":
            return self.commands.gc(GcOptions(max_size=0, dry_run=dry_run, yes=True))
        return self.commands.gc(GcOptions(max_size=self.session.settings.max_bytes, incompatible=True, dry_run=dry_run))

    def preview_gc(self, kind: str) -> None:
        """Say what would go, then ask (the confirm button under the bundles)."""
        self._pending_gc = kind
        plan = self._gc(dry_run=True)
        self.say("\n".join(removal_lines(plan.removals, plan.where, dry_run=True)))
        self.refresh()

    def confirm_gc(self, yes: bool) -> None:
        if yes and self._pending_gc:
            removed = self._gc(dry_run=False)
            self.say("\n".join(removal_lines(removed.removals, removed.where, dry_run=False)))
        self._pending_gc = None
        self.refresh()

    def confirm_delete(self, yes: bool) -> None:
        pending, self._pending_delete = self._pending_delete, None
        if yes and pending:
            hub = self.session.hub_policy.for_cell(CellOptions()) if pending[2] == "hub" else None
            removed = self.commands.remove(RemoveOptions(pending[0], pending[1]), hub)
            self.say(f"deleted {len(removed.removals)} version of {pending[0]!r} from the {pending[2]} store")
        self.refresh()


_LAYER_COLUMNS = (
    ("on", "30px"),
    ("layer", "215px"),
    ("entries / in cache dir", "160px"),
    ("hits", "50px"),
    ("misses", "60px"),
    ("bypasses", "70px"),
    ("saved (est.)", "90px"),
    ("torch switch", "minmax(120px,1fr)"),  # the rest of the width; a long switch name wraps
)
