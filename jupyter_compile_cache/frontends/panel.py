"""An ipywidgets panel over the session: the facts of this kernel, per-layer cache state with toggles, the bundles
with their actions, and cold-vs-restored times.

Standard ipywidgets 8 controls only (no custom JavaScript, nothing fetched from a CDN), so it renders offline in
JupyterLab 4, Notebook 7 and VS Code. `%compile_cache panel` or `jupyter_compile_cache.Panel()` shows it.

It is fed by the session's events: after each `%%compile_cache` cell it updates its counters, the local store's
bundles and the chart from what the cell reported and what is on this machine's disk. The hub is asked only on
Refresh (a cell may hold the hub's lease while it runs; the panel never adds a hub round trip to a cell). Errors
raised in its callbacks are shown in the panel instead of vanishing. After a kernel restart, run the magic again
for a live panel.

Per layer, "in store" counts the files of the local store's bundles, each file in one layer, so the layers and
the files no layer claims add up to the store's size. Compile time saved is an estimate: for each restored cell, the
cold time recorded in the bundle when it was saved minus this run's time (its restore included); per layer, that
saving is split in proportion to the layer's hits in that cell.
"""

from __future__ import annotations

import html
import os
import time
import traceback
from collections.abc import Callable
from typing import Any

from ..core.commands import COMMAND_ERRORS, Commands
from ..core.errors import NotFound
from ..core.events import CellFinished, Event
from ..core.options import CellOptions, GcOptions, RemoveOptions
from ..core.records import BundleRow, LayerState, Removed, RestoreResult, SessionStatus
from ..core.session import CompileCacheSession
from ..units import count, human_bytes
from . import render, wording
from .bar_chart import GREEN, GREY, RED, bar_chart_svg
from .event_wording import event_text, restore_line
from .tables import STATUS_HEADERS, age, elide, removal_lines, status_rows
from .wording import status_facts

ONE_LINE = "white-space: nowrap; overflow: hidden; text-overflow: ellipsis"


def short_path(path: str, width: int = 72) -> str:
    """PATH from ~, its middle left out past WIDTH characters (the whole path is the cell's hover text)."""
    home = os.path.expanduser("~")
    if home not in ("", "/") and path.startswith(home + os.sep):
        path = "~" + path[len(home) :]
    return elide(path, width)


def _cell(text: Any, title: str | None = None, align: str = "left", color: str | None = None, bold: bool = False,
          data: dict[str, Any] | None = None) -> str:  # fmt: skip
    """One table cell's HTML: one line, cut with an ellipsis (never wrapped), the whole text on hover."""
    value = str(text)
    style = f"{ONE_LINE}; text-align: {align}" + (f"; color: {color}" if color else "")
    style += "; font-weight: bold" if bold else ""
    attrs = "".join(f' data-{k}="{html.escape(str(v))}"' for k, v in (data or {}).items())
    hover = html.escape(title if title is not None else value)
    return f'<div class="jcc-cell" style="{style}" title="{hover}"{attrs}>{html.escape(value)}</div>'


def _count_cell(n: int, color_if_any: str, bold: bool = False) -> str:
    return _cell(n, align="right", color=color_if_any if n else GREY, bold=bold)


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
        self.header = w.HTML(layout=w.Layout(width="100%"))
        # One grid per table, so every row's cells line up whatever their content (an HBox per row drifts).
        self.layer_box = w.GridBox(layout=self._grid(_LAYER_COLUMNS))
        self.bundle_box = w.GridBox(layout=self._grid(_BUNDLE_COLUMNS))
        self.bundle_note = w.HTML()
        # a restore's progress (pulled, then restored), shown while one runs
        self.progress = w.FloatProgress(
            min=0.0, max=1.0, style={"description_width": "initial"}, layout=w.Layout(display="none", width="560px")
        )
        self.chart = w.HTML()
        self.messages = w.Output(layout=w.Layout(max_height="160px", overflow="auto"))
        self.refresh_button = w.Button(
            description="Refresh", icon="refresh", tooltip="read everything again, the hub included"
        )
        self.refresh_button.on_click(self._guarded(lambda _b: self.refresh()))
        self.hub_asked = w.HTML()
        self.free_button = w.Button(
            description="free space…", tooltip="versions that cannot restore here, then over the cap"
        )
        self.free_button.on_click(self._guarded(lambda _b: self.preview_gc("free")))
        self.clear_button = w.Button(description="clear all…", tooltip="every version in the local store")
        self.clear_button.on_click(self._guarded(lambda _b: self.preview_gc("clear")))
        self.confirm_box = w.HBox()
        self._pending_gc: str | None = None
        self._pending_delete: tuple[str, str, str] | None = None
        self.toggles: dict[str, Any] = {}
        self.bundle_buttons: dict[tuple[str, ...], Any] = {}  # (where, name, version, action)
        self.confirm_buttons: tuple[Any, Any] | None = None
        self._hub_rows: list[BundleRow] = []  # as the hub answered at the last Refresh
        self._status: SessionStatus | None = None
        self.widget = w.VBox(
            [
                w.HBox([w.HTML("<b>jupyter_compile_cache</b>"), self.refresh_button, self.hub_asked]),
                self.header,
                w.HTML(
                    "<b>Cache layers</b>: the local store's files per layer, this kernel's counts; the boxes flip "
                    "torch's switch in this kernel"
                ),  # fmt: skip
                self.layer_box,
                w.HBox([w.HTML("<b>Bundles</b>"), self.free_button, self.clear_button]),
                self.progress,
                self.bundle_box,
                self.bundle_note,
                self.confirm_box,
                w.HTML("<b>Cold vs restored</b>, per restored %%compile_cache cell"),
                self.chart,
                self.messages,
            ],
            layout=w.Layout(width="100%", max_width="1100px"),
        )
        session.listeners.append(self._on_event)
        self.refresh()

    def _html(self, value: str) -> Any:
        """A table cell: it may shrink below its text (min-width 0), so a long text ends in '…' inside its column
        instead of running over the next one."""
        return self._w.HTML(value, layout=self._w.Layout(min_width="0", overflow="hidden"))

    def _grid(self, columns: tuple[tuple[str, str], ...]) -> Any:
        return self._w.Layout(
            grid_template_columns=" ".join(width for _h, width in columns),
            grid_gap="2px 10px",
            align_items="center",
            width="100%",
        )

    # -- display ------------------------------------------------------------------------------------------------
    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    def close(self) -> None:
        if self._on_event in self.session.listeners:
            self.session.listeners.remove(self._on_event)
        self.widget.close()

    def _on_event(self, event: Event) -> None:
        """The session's events: a warning is said here too (a cell's output scrolls away); a cell's end updates
        the counters, the local bundles and the chart, without asking the hub."""
        if event.level == "warning":
            self.say(f"warning: {event_text(event)}")
        elif isinstance(event, CellFinished):
            self._guarded(self.update)()

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
        """Everything again, the hub included (its state and its bundles)."""
        status = self.commands.status(wait=True)  # the panel shows every layer's switch
        self._hub_rows = [b for b in self.commands.bundles() if b.where == "hub"] if status.hub.url else []
        self.hub_asked.value = (
            f"<span style='color:{GREY}'>hub asked at {time.strftime('%H:%M:%S')}</span>" if status.hub.url else ""
        )
        self._show(status)

    def update(self) -> None:
        """What a cell changed: counters, the local store, time saved; the hub as it was at the last Refresh."""
        status = self.commands.status(wait=True, ping_hub=False)
        if self._status is not None and status.hub.reachable is None:
            status.hub = self._status.hub  # as last asked (unless it failed since: then that is said)
        self._show(status)

    def _show(self, status: SessionStatus) -> None:
        self._status = status
        self.header.value = self._header_html(status)
        self._layers(status)
        self._bundles(self.commands.bundles(hub=False) + self._hub_rows, hub=status.hub.url is not None)
        self.chart.value = bar_chart_svg(status.time_saved.cells if status.time_saved else [])

    def _header_html(self, status: SessionStatus) -> str:
        dev = self.commands.device()
        shown_device = None
        if dev.kind == "gpu":
            device = (
                f"{dev.name} (compute {dev.capability}), memory {human_bytes(dev.memory_used)} / "
                f"{human_bytes(dev.memory_total)}"
            )
        else:
            device = f"CPU {dev.name}, ISA {dev.isa}"
            features = (dev.isa or "").split("+")
            if len(features) > 3:  # a CPU with many vector extensions: the first few, the rest on hover
                shown_device = f"CPU {dev.name}, ISA {'+'.join(features[:3])} (+{len(features) - 3} more)"
        versions = f"torch {dev.torch} · Triton {dev.triton or '-'} · CUDA {dev.cuda or '-'}"
        # (what, the line shown, the whole of it on hover): each fact on one line, its detail a hover away
        rows: list[tuple[str, str, str | None]] = [
            ("device", shown_device or device, device),
            ("versions", versions, None),
            *((f.label, f.short, f.full) for f in status_facts(status, short_path)),
        ]
        body = "".join(
            f"<tr><td style='{ONE_LINE}; color: {GREY}; padding-right: 12px; width: 7.5em'>{html.escape(key)}</td>"
            f"<td style='max-width: 0; {ONE_LINE}' title='{html.escape(full or value)}'>{html.escape(value)}</td></tr>"
            for key, value, full in rows
        )
        return f"<table class='jcc-facts' style='table-layout: fixed; width: 100%; border-spacing: 0'>{body}</table>"

    def _layers(self, status: SessionStatus) -> None:
        """The status table (tables.status_rows), a toggle for its "enabled" column; counts in colour, hover texts."""
        w = self._w
        cells: list[Any] = [self._html(_cell(h, bold=True, align=a)) for h, _wd, a in _LAYER_HEADERS]
        for kind, row, store_bytes, values in status_rows(status):
            total = kind == "total"
            for header, value in zip(STATUS_HEADERS, values):
                _h, _wd, align = _LAYER_LOOK[header]
                if header == "enabled":
                    cells.append(self._toggle(row) if row is not None else w.HTML(""))
                elif header == "layer" and row is not None:
                    cells.append(self._html(_cell(value, title=f"{value}: {wording.enabled_text(row)}")))
                elif header in ("hits", "misses", "bypasses") and value != "":
                    cells.append(self._html(_count_cell(value, GREEN if header == "hits" else RED, bold=total)))
                elif header == "in store":
                    data = {"bytes" if row is not None else kind: store_bytes}
                    cells.append(self._html(_cell(value, align=align, bold=total, data=data)))
                elif header == "torch switch" and row is not None:  # its last name; the whole on hover
                    short = row.switch.rsplit(".", 1)[-1] if row.switch else "always on"
                    cells.append(self._html(_cell(short, title=value, color=GREY)))
                else:
                    cells.append(self._html(_cell(value, align=align, bold=total)))
        self.layer_box.children = cells

    def _toggle(self, row: LayerState) -> Any:
        toggle = self.toggles.get(row.layer)
        if toggle is None:
            w = self._w
            toggle = w.Checkbox(value=bool(row.enabled), indent=False, layout=w.Layout(width="auto"))
            toggle.observe(self._guarded(lambda change, name=row.layer: self._toggled(name, change)), "value")
            self.toggles[row.layer] = toggle
        toggle.disabled = not row.supported or row.switch is None
        if toggle.value != bool(row.enabled):
            toggle.value = bool(row.enabled)
        return toggle

    def _bundles(self, rows: list[BundleRow], hub: bool) -> None:
        w = self._w
        cells: list[Any] = [self._html(_cell(h, bold=True, align=a)) for h, _wd, a in _BUNDLE_HEADERS]
        self.bundle_buttons = {}
        for b in rows:
            key = (b.where, b.name, b.version)
            fits = wording.fits_text(b)
            buttons = []
            for action in ("restore", "delete", "explain", "push"):
                if action == "push" and (b.where != "local" or not hub):
                    continue
                button = w.Button(
                    description=action,
                    tooltip=f"{action} {b.name} {b.short_id} ({b.where})",
                    layout=w.Layout(width="66px", padding="0"),
                )
                button.on_click(self._guarded(lambda _b, a=action, bb=b: self._bundle_action(a, bb)))
                self.bundle_buttons[(*key, action)] = button
                buttons.append(button)
            cells += [
                self._html(_cell(b.name)),
                self._html(_cell(b.where, color=GREY)),
                self._html(_cell(b.short_id, title=b.version)),
                self._html(_cell(human_bytes(b.bytes), align="right")),
                self._html(_cell(age(b.created), title=time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(b.created)))),
                self._html(_cell(b.writer)),
                self._html(_cell(fits, title=fits, color=GREEN if b.compatible and not b.missing_chunks else RED)),
                w.HBox(buttons, layout=w.Layout(overflow="hidden")),
            ]
        self.bundle_box.children = cells
        self.bundle_note.value = "" if rows else "<i>no bundles yet</i>"
        self._confirmations()

    def _confirmations(self) -> None:
        """The yes / cancel buttons of a pending delete or gc, under the bundles."""
        w = self._w
        self.confirm_buttons = None
        question = None
        if self._pending_delete:
            name, _version, where = self._pending_delete
            question, on_yes = f"delete {name} ({where})?", self.confirm_delete
        elif self._pending_gc:
            plan = self._gc(dry_run=True).removals
            if plan:
                total = human_bytes(sum(r.bytes for r in plan))
                question, on_yes = f"remove {count(len(plan), 'version')}, {total}?", self.confirm_gc
            else:
                self._pending_gc = None
        if question is None:
            self.confirm_box.children = []
            return
        yes = w.Button(description=question, button_style="danger", layout=w.Layout(width="auto"))
        no = w.Button(description="cancel")
        yes.on_click(self._guarded(lambda _b: on_yes(True)))
        no.on_click(self._guarded(lambda _b: on_yes(False)))
        self.confirm_buttons = (yes, no)
        self.confirm_box.children = [yes, no]

    # -- actions --------------------------------------------------------------------------------------------------
    def _toggled(self, layer_name: str, change: dict[str, Any]) -> None:
        layer = self.commands.set_layer(layer_name, bool(change["new"]))
        self.say(render.switch_line(layer, self.commands.switch_scope(layer)))

    def _bundle_action(self, action: str, b: BundleRow) -> None:
        if action == "restore":
            result = self._restore_with_progress(b.name)
            self.say(restore_line(result))
        elif action == "delete":
            self._pending_delete = (b.name, b.version, b.where)  # confirm first
            self._confirmations()
            return
        elif action == "push":
            try:
                self.say(repr(render.view(self.commands.push(b.name))))
            except (NotFound, *COMMAND_ERRORS) as exc:
                self.say(f"not pushed: {wording.error_text(exc)}", error=True)
        elif action == "explain":
            try:
                self.say(repr(render.view(self.commands.explain(b.name))))
            except NotFound as exc:  # a hub-only bundle: nothing in the local store to explain yet
                self.say(f"{wording.not_found_text(exc)} (pull or restore it first)")
            return
        self.update()

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
        self._pending_delete = None
        plan = self._gc(dry_run=True)
        self.say("\n".join(removal_lines(plan.removals, plan.where, dry_run=True)))
        self._confirmations()

    def confirm_gc(self, yes: bool) -> None:
        if yes and self._pending_gc:
            removed = self._gc(dry_run=False)
            self.say("\n".join(removal_lines(removed.removals, removed.where, dry_run=False)))
        self._pending_gc = None
        self.update()

    def confirm_delete(self, yes: bool) -> None:
        pending, self._pending_delete = self._pending_delete, None
        if yes and pending:
            hub = self.session.hub_policy.for_cell(CellOptions()) if pending[2] == "hub" else None
            try:
                removed = self.commands.remove(RemoveOptions(pending[0], pending[1]), hub)
            except NotFound as exc:  # gone since the table was drawn (another kernel's gc, `rm` in a shell)
                self.say(wording.error_text(exc), error=True)
            else:
                self.say("\n".join(removal_lines(removed.removals, removed.where, dry_run=False)))  # as `rm` says
                if hub is not None:
                    self._hub_rows = [r for r in self._hub_rows if (r.name, r.version) != (pending[0], pending[1])]
        self.update()


# The status table's columns (tables.STATUS_HEADERS), each as the panel shows it: (header, width, alignment).
_LAYER_LOOK = {
    "enabled": ("on", "max-content", "left"),
    "layer": ("layer", "minmax(170px, 1fr)", "left"),
    "store files": ("files", "max-content", "right"),
    "in store": ("in store", "max-content", "right"),
    "cache dir entries": ("cache dir", "max-content", "right"),
    "cache dir": ("", "max-content", "right"),
    "hits": ("hits", "max-content", "right"),
    "misses": ("misses", "max-content", "right"),
    "bypasses": ("bypasses", "max-content", "right"),
    "saved": ("saved", "max-content", "right"),
    "torch switch": ("torch switch", "minmax(200px, 1fr)", "left"),
}
_LAYER_HEADERS = tuple(_LAYER_LOOK[header] for header in STATUS_HEADERS)
_LAYER_COLUMNS = tuple((h, wd) for h, wd, _a in _LAYER_HEADERS)
_BUNDLE_HEADERS = (  # the text columns as wide as their longest text, up to a share of the room left
    ("name", "minmax(110px, max-content)", "left"),
    ("where", "max-content", "left"),
    ("version", "max-content", "left"),
    ("size", "max-content", "right"),
    ("age", "max-content", "left"),
    ("writer", "minmax(80px, max-content)", "left"),
    ("fits here", "minmax(90px, 1fr)", "left"),
    ("", "max-content", "left"),
)
_BUNDLE_COLUMNS = tuple((h, wd) for h, wd, _a in _BUNDLE_HEADERS)
