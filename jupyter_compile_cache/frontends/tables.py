"""Views of the records commands return: tables for `status`, `list`, `explain` and `stats`, lines for the rest;
plain text in a terminal (`repr`), HTML in a notebook (`_repr_html_`), the record they show in `.data`.
frontends/render.py picks the view for a record."""

from __future__ import annotations

import datetime as _dt
import html
import os
import re
import shutil
import sys
import textwrap
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

from ..core.plans import NotebookPlan
from ..core.records import (
    RUN_BUILDS,
    BundleExplanation,
    LayerState,
    Place,
    Removal,
    SessionStatus,
    StoreStatistics,
    short_id,
)
from ..units import count, human_bytes
from . import wording
from .wording import plan_headline, status_facts


def age(ts: float | None) -> str:
    if not ts:
        return "-"
    seconds = max(0.0, time.time() - ts)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit} ago"
    return f"{seconds:.0f}s ago"


def terminal_width() -> int | None:
    """The terminal's columns ($COLUMNS, else the size of the terminal stdout is); None where there is none (a
    pipe, a file, a kernel): text for a program or a notebook is never cut."""
    if type(sys.stdout).__module__.startswith("ipykernel"):  # a notebook's output, even where $COLUMNS was exported
        return None
    if os.environ.get("COLUMNS", "").isdigit():
        return shutil.get_terminal_size().columns
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):
        return None


def wrapped(lines: Sequence[str], indent: str = "") -> list[str]:
    """LINES wrapped at the terminal's width, between words (a path or a name is never broken)."""
    width = terminal_width()
    if width is None:
        return list(lines)
    return [
        part
        for line in lines
        for part in textwrap.wrap(
            line, width, initial_indent=indent, subsequent_indent=indent + "  ", break_long_words=False,
            break_on_hyphens=False,
        ) or [line]
    ]  # fmt: skip


_QUANTITY = re.compile(r"^-?[0-9.]+ ?(B|KB|MB|GB|TB|s|%)?$")


def _numeric(column: Sequence[Any]) -> bool:
    """A column of numbers and sizes (blanks allowed): right-aligned, so digits line up."""
    filled = [c for c in column if c != ""]
    return bool(filled) and all(isinstance(c, (int, float)) or bool(_QUANTITY.match(str(c))) for c in filled)


def _floors(headers: Sequence[str], rows: Sequence[Sequence[Any]], whole: Sequence[int]) -> list[int]:
    """How narrow each column may get: not below its header or 8, the first (what a row is: a name, a field) not
    below 24, those in WHOLE not at all."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    return [
        w if i in whole else min(w, max(len(str(h)), 24 if i == 0 else 8))
        for i, (w, h) in enumerate(zip(widths, headers))
    ]


def _floor_width(headers: Sequence[str], rows: Sequence[Sequence[Any]], whole: Sequence[int], left: set[int]) -> int:
    """The narrowest the table gets without the columns in LEFT."""
    floors = [f for i, f in enumerate(_floors(headers, rows, whole)) if i not in left]
    return sum(floors) + 2 * (len(floors) - 1)


def _fitted(widths: list[int], floors: list[int], room: int) -> list[int]:
    """WIDTHS narrowed, widest column first and none below its floor, until they and their gaps fit ROOM."""
    widths = list(widths)
    while sum(widths) + 2 * (len(widths) - 1) > room:
        widest = max(range(len(widths)), key=lambda i: widths[i] - floors[i])
        if widths[widest] <= floors[widest]:
            break  # as narrow as it goes: the terminal wraps what is left
        widths[widest] -= 1
    return widths


def _text_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[Any]],
    width: int | None = None,
    whole: Sequence[int] = (),
    optional: Sequence[int] = (),
) -> str:
    """Columns two spaces apart, fitted to WIDTH (the terminal's): the widest columns lose their middle ('…'), never
    those numbered in WHOLE; where that is not enough, the OPTIONAL columns are left out, in that order."""
    room = width or terminal_width()
    if room is not None and optional:
        dropped: set[int] = set()
        for column in optional:
            if _floor_width(headers, rows, whole, dropped) <= room:
                break
            dropped.add(column)
        keep = [i for i in range(len(headers)) if i not in dropped]
        whole = [keep.index(i) for i in whole if i in keep]
        headers, rows = [headers[i] for i in keep], [[row[i] for i in keep] for row in rows]
    floors = _floors(headers, rows, whole)
    numeric = [_numeric([row[i] for row in rows]) for i in range(len(headers))]
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    if room is not None:
        widths = _fitted(widths, floors, room)
    cells = [[elide(c, w) for c, w in zip(r, widths)] for r in cells]
    lines = [
        "  ".join(c.rjust(w) if right else c.ljust(w) for c, w, right in zip(r, widths, numeric)).rstrip()
        for r in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _html_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


class _View:
    title = ""
    headers: Sequence[str] = ()

    def __init__(self, data: Any) -> None:
        self.data = data

    def rows(self) -> list[list[Any]]:
        return []

    def preamble(self) -> list[str]:
        return []

    def __repr__(self) -> str:
        return "\n".join([*wrapped(self.preamble()), _text_table(self.headers, self.rows())])

    def _repr_html_(self) -> str:
        pre = "".join(f"<div>{html.escape(line)}</div>" for line in self.preamble())
        return pre + _html_table(self.headers, self.rows())


STATUS_HEADERS = (
    "enabled", "layer", "store files", "in store", "cache dir entries", "cache dir", "hits", "misses", "bypasses",
    "saved", "torch switch",
)  # fmt: skip


class StatusRow(NamedTuple):
    kind: str  # "layer", "other" (the store's files of no layer) or "total" (the store)
    layer: LayerState | None
    store_bytes: int
    cells: list[Any]  # by STATUS_HEADERS


def status_rows(status: SessionStatus) -> list[StatusRow]:
    """The status table, for the CLI, `%compile_cache status` and the panel alike: a row per layer, then the store's
    files of no layer and its total."""
    saved = status.time_saved

    def seconds(value: float) -> str:
        return f"{value:.1f} s" if saved is not None else ""

    layers = status.layers
    rows = [
        StatusRow("layer", row, row.store_bytes, [
            wording.enabled_text(row), row.title, row.store_files, human_bytes(row.store_bytes), row.entries,
            human_bytes(row.bytes), row.hits, row.misses, row.bypasses,
            seconds(saved.per_layer.get(row.layer, 0.0) if saved else 0.0), wording.switch_text(row),
        ])
        for row in layers
    ]  # fmt: skip
    other = status.store_other_bytes
    rows.append(StatusRow("other", None, other, ["", "other files (no layer's)", "", human_bytes(other), *[""] * 7]))
    totals = [sum(getattr(r, name) for r in layers) for name in ("entries", "bytes", "hits", "misses", "bypasses")]
    rows.append(StatusRow("total", None, status.store_bytes, [
        "", "total: the local store", sum(r.store_files for r in layers), human_bytes(status.store_bytes), totals[0],
        human_bytes(totals[1]), *totals[2:], seconds(saved.total if saved else 0.0), "",
    ]))  # fmt: skip
    return rows


class StatusView(_View):
    headers = STATUS_HEADERS

    def preamble(self) -> list[str]:
        return [f"{fact.label}: {fact.full}" for fact in status_facts(self.data)]

    def rows(self) -> list[list[Any]]:
        return [row.cells for row in status_rows(self.data)]


class BundleTable(_View):
    headers = ("name", "where", "version", "size", "files", "age", "used", "writer", "fits here")
    optional = (4, 6, 5)  # in a narrow terminal: files, then used, then age

    def __repr__(self) -> str:
        if not self.data:  # no table under "no bundles"
            return "\n".join(self.preamble())
        lines = [self.total(), *self.postscript()]
        table = _text_table(self.headers, self.rows(), optional=self.optional)
        return "\n".join([*wrapped(self.preamble()), table, *wrapped([x for x in lines if x])])

    def rows(self) -> list[list[Any]]:
        return [
            [
                b.name,
                b.where,
                b.short_id,  # what `--version` takes
                human_bytes(b.bytes),
                b.files,
                age(b.created),
                age(b.last_used),
                b.writer,
                wording.fits_text(b),
            ]
            for b in self.data
        ]

    def preamble(self) -> list[str]:
        return ([self.title] if self.title else []) + ([] if self.data else ["no bundles"])

    def postscript(self) -> list[str]:
        broken = [b for b in self.data if b.missing_chunks]
        if not broken:
            return []
        return [
            f"incomplete on the hub: {count(len(broken), 'version')} (chunks evicted under memory pressure, or "
            "expired): no kernel pulls them, and `hub gc` removes them"
        ]

    def total(self) -> str:
        """One line under the table: versions, bundles and bytes, here and on the hub."""
        parts = []
        for where in ("local", "hub"):
            rows = [b for b in self.data if (b.where == "hub") == (where == "hub")]
            if rows:
                size = human_bytes(sum(b.bytes for b in rows))
                names = len({b.name for b in rows})
                parts.append(f"{where}: {count(len(rows), 'version')} of {count(names, 'bundle')}, {size}")
        return "; ".join(parts)

    def _repr_html_(self) -> str:
        lines = [self.total(), *self.postscript()]
        return super()._repr_html_() + "".join(f"<div>{html.escape(line)}</div>" for line in lines if line)


class StatsView(_View):
    """`stats`: what the cells that used the store did since the statistics were zeroed, and the store's size."""

    headers = ("", "", "")

    def preamble(self) -> list[str]:
        d: StoreStatistics = self.data
        since = _dt.datetime.fromtimestamp(d.since).strftime("%Y-%m-%d %H:%M") if d.since else "-"
        head = f"statistics of {d.store_dir} since {since}"
        return [head + (" (now zeroed)" if d.zeroed else "")]

    def rows(self) -> list[list[Any]]:
        d: StoreStatistics = self.data
        n = d.counts
        cells = int(n["cells"])

        def share(count: float) -> str:
            return f"{100 * count / cells:.1f} %" if cells else ""

        restored = int(n["restored_local"] + n["restored_hub"])
        rate = "" if d.hit_rate is None else f"{100 * d.hit_rate:.1f} % hits"
        cap = d.max_bytes
        return [
            ["cells run", cells, f"{int(n['cells_failed'])} raised an error" if n["cells_failed"] else ""],
            ["  restored a bundle", restored, share(restored)],
            ["    from the local store", int(n["restored_local"]), ""],
            ["    from the hub", int(n["restored_hub"]), ""],
            ["  compiled (a cache missed)", int(n["compiled"]), share(n["compiled"])],
            ["torch cache hits / misses", f"{int(n['hits'])} / {int(n['misses'])}", rate],
            ["compile time saved (estimate)", f"{n['seconds_saved']:.1f} s", "cold time in the bundle - restored run"],
            ["restored", human_bytes(int(n["restored_bytes"])), ""],
            ["saved", human_bytes(int(n["saved_bytes"])), count(int(n["saved_bundles"]), "version")],
            ["pushed to the hub", int(n["pushed"]), ""],
            ["stale entries refused", int(n["stale_rejected"]), "code changed since the bundle was saved"],
            [
                "after a restore, functions compiled",
                int(n["missed_no_entry"] + n["missed_code_changed"] + n["missed_recompiled"]),
                "",
            ],
            ["  no entry saved for them", int(n["missed_no_entry"]), ""],
            ["  entry made for other code", int(n["missed_code_changed"]), "no version held their code"],
            ["  a guard failed", int(n["missed_recompiled"]), "Dynamo compiled again (new sizes, types...)"],
            ["  graphs, no function named", int(n["missed_new_graph"]), "torch said no more (no precompile)"],
            ["  forward graphs, no backward", int(n["missed_no_backward"]), "torch saves them with a backward"],
            ["precompile fallbacks", int(n["precompile_fallbacks"]), "ran the plain torch.compile way"],
            [
                "store size",
                human_bytes(int(d.store_bytes)),
                f"{100 * d.store_bytes / cap:.1f} % of the {human_bytes(cap)} cap; "
                f"{count(d.versions, 'version')} of {count(d.bundles, 'bundle')}"
                if cap
                else "",
            ],
        ]

    def __repr__(self) -> str:
        rows = self.rows()
        width = max(len(r[0]) for r in rows)
        value_width = max(len(str(r[1])) for r in rows)
        lines = [f"{r[0].ljust(width)}  {str(r[1]).rjust(value_width)}  {r[2]}".rstrip() for r in rows]
        return "\n".join([*wrapped(self.preamble()), *lines])

    def _repr_html_(self) -> str:
        pre = "".join(f"<div>{html.escape(line)}</div>" for line in self.preamble())
        body = "".join(
            f"<tr><td style='text-align:left'>{html.escape(str(a))}</td><td>{html.escape(str(b))}</td>"
            f"<td style='text-align:left'>{html.escape(str(c))}</td></tr>"
            for a, b, c in self.rows()
        )
        return f"{pre}<table>{body}</table>"


def elide(value: Any, width: int = 60) -> str:
    """A long value (a build string, a list of ISAs, a path) kept to `width` characters: its head and tail."""
    text = str(value)
    if len(text) <= width:
        return text
    head = (width - 1) - (width - 1) // 2
    return f"{text[:head]}…{text[len(text) - (width - 1 - head) :]}" if width > 1 else text[:width]


class Explanation(_View):
    """`explain`: per version, a heading with the verdict and a table of the fingerprint's fields; then the last
    run's layers. Text in a terminal, the same headings and tables as HTML in a notebook."""

    headers = ("field", "verdict", "bundle", "this kernel")  # the verdict first: long values come last
    run_headers = ("layer", "hits", "misses", "bypasses", "files written")

    def blocks(self) -> list[tuple[str, Sequence[str], list[list[Any]]]]:
        """(heading, table headers, rows); no headers: a heading alone."""
        d: BundleExplanation = self.data
        out: list[tuple[str, Sequence[str], list[list[Any]]]] = [(f"bundle {d.name!r} in {d.store_dir}", (), [])]
        if not d.versions:
            out.append(("no versions stored", (), []))
        run = d.last_run or {}
        restored = (run.get("restore") or {}).get("version")
        for v in d.versions:
            created = _dt.datetime.fromtimestamp(v.created).isoformat(timespec="seconds")
            verdict = "WOULD RESTORE" if not v.mismatches else "would NOT restore"
            refused = int(run.get("stale_rejected") or 0) if restored == v.version else 0
            if not v.mismatches and v.other_code:  # it fits this machine, not the code this kernel compiled
                names = ", ".join(f"`{f}`" for f in v.other_code[:3])
                verdict = f"fits this machine, but its entries are for other code than this kernel's ({names})"
            elif not v.mismatches and refused:  # it fits this machine, but its last restore found code changed since
                verdict = (
                    f"fits this machine, but its last restore refused {count(refused, 'entry')} whose code had changed "
                    "(those compile again)"
                )
            heading = (
                f"version {v.short_id or v.version} ({human_bytes(v.bytes)}, {count(v.files, 'file')}, {created}, "
                f"by {v.writer}): {verdict}"
            )
            if v.functions:
                heading += "; entries for " + ", ".join(f"`{f}` ({state})" for f, state in v.functions[:6])
            rows = []
            for f in v.fields:
                if not f.relevant:
                    verdict = "not relevant (no such artifacts)"
                elif not f.checked:
                    verdict = "not known (compiler not loaded)"
                elif f.saved == f.current:
                    verdict = "match"
                else:
                    verdict = "MISMATCH (blocks)" if f.blocking else "differs (reported only)"
                current = "(same)" if f.saved == f.current else elide(f.current) if f.checked else "-"
                rows.append([f.field, verdict, elide(f.saved), current])
            out.append((heading, self.headers, rows))
        run = d.last_run
        if run:
            source = (run.get("restore") or {}).get("source") or "nothing"
            rows = [
                [name, c.get("hits", 0), c.get("misses", 0), c.get("bypasses", 0), c.get("written", 0)]
                for name, c in run.get("layers", {}).items()
            ]
            heading = f"last run of this cell: {run['body_seconds']:.2f} s, restored from {source}"
            reasons = wording.miss_lines(run.get("miss_reasons") or ())
            if reasons:  # why it compiled after its restore, as its line said
                heading += "; compiled because: " + "; ".join(reasons)
            out.append((heading, self.run_headers, rows))
        else:
            out.append(("no recorded run of this cell", (), []))
        return out

    def lines(self) -> list[str]:
        out = []
        for heading, headers, rows in self.blocks():
            out.extend(wrapped([heading]))
            if headers:
                out.extend(
                    "  " + line
                    for line in _text_table(headers, rows, (terminal_width() or 10_000) - 2, whole=(0, 1)).splitlines()
                )
        return out

    def __repr__(self) -> str:
        return "\n".join(self.lines())

    def _repr_html_(self) -> str:
        return "".join(
            f"<div><b>{html.escape(heading)}</b></div>" + (_html_table(headers, rows) if headers else "")
            for heading, headers, rows in self.blocks()
        )


class NotebookPlanView(_View):
    """`explain` with no NAME: the notebook's `%%compile_cache` cells, whether each restores here, and why not."""

    headers = ("cell", "bundle", "Run All", "from", "why not")

    def preamble(self) -> list[str]:
        d: NotebookPlan = self.data
        lines = [f"{plan_headline(d)} of {d.path} (as last saved)"]
        return lines + [f"note: {wording.plan_problem_line(problem)}" for problem in d.problems]

    def rows(self) -> list[list[Any]]:
        return [
            [c.index, c.name, "restores" if c.restores else "compiles", c.source or "-", wording.why_not_line(c)]
            for c in self.data.cells
        ]


class Lines:
    """What a change did (a removal, a push, a pull...), as lines: text, or one `<div>` each in a notebook."""

    def __init__(self, lines: Sequence[str], data: Any = None) -> None:
        self.lines, self.data = list(lines), data

    def __repr__(self) -> str:
        return "\n".join(self.lines)

    def _repr_html_(self) -> str:
        return "".join(f"<div>{html.escape(line)}</div>" for line in self.lines)


def removal_lines(removals: Sequence[Removal], place: Place, dry_run: bool) -> list[str]:
    """What a delete removed (or would remove): a total, then one line per version, oldest use first."""
    where = wording.place_text(place)
    total = human_bytes(sum(r.bytes for r in removals))
    verb = "would remove" if dry_run else "removed"
    if not removals:
        return [f"nothing to remove from {where}"]
    versions = [r for r in removals if r.version != RUN_BUILDS and r.kept is None]
    lines = [f"{verb} {count(len(versions), 'version')} from {where}, freeing {total}:"]
    lines += [f"  {r.name}  {short_id(r.version)}  {human_bytes(r.bytes)}" for r in versions]
    lines += [
        f"  {r.name}  {short_id(r.version)}  torch's precompiled headers, no compile result (the rest kept as "
        f"{short_id(r.kept)})  {human_bytes(r.bytes)}"
        for r in removals
        if r.kept is not None
    ]
    lines += [
        f"  {r.name}  its kernels built at run time (kept on this machine)  {human_bytes(r.bytes)}"
        for r in removals
        if r.version == RUN_BUILDS
    ]
    if dry_run:
        lines.append("(dry run: nothing was removed)")
    return lines
