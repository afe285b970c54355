"""Every figure in README.md and docs/results.md, rendered from the result file of a real run (`make docs`).

A figure lives between two markers naming how it is rendered and from which files:

    <!-- figures KIND: benchmarks/results/x.json [more.json ...] -->
    ... written by this script, never by hand ...
    <!-- /figures -->

and ends with a line saying which command on which machine produced the files. `make docs` first re-runs what
this machine can run (the quick start in real kernels; `--no-run` skips it), then renders every figure.
`--check` (run by the tests) only renders and fails when a figure differs from its files, so no figure is edited
by hand and none outlives a re-run. GPU figures are rendered from the files a GPU run wrote (the command in each
figure's last line re-runs it there).

    python docs/figures.py            # re-run the quick start here, then render every figure
    python docs/figures.py --check    # are the figures what their files say?
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _import_from_repo() -> None:
    """The package and the benchmarks importable from this checkout (this script runs from docs/)."""
    if REPO not in sys.path:
        sys.path.insert(0, REPO)


PAGES = ("README.md", "docs/results.md")
REGION = re.compile(r"(<!-- figures (?P<kind>[\w-]+): (?P<files>[^>]*?) -->\n)(?P<body>.*?)(<!-- /figures -->)", re.S)
QUICKSTART_JSON = "benchmarks/results/docs/quickstart.json"

# The quick start of the README, run for real: a new kernel compiles, a restarted one (empty torch cache dir) restores.
SETUP = """import torch
%load_ext jupyter_compile_cache

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2 = torch.nn.Linear(256, 512), torch.nn.Linear(512, 256)
    def forward(self, x):
        return self.l2(torch.nn.functional.gelu(self.l1(x)))

torch.manual_seed(0)
model, x = Net(), torch.randn(64, 256)"""
CELL = """%%compile_cache mlp
compiled = torch.compile(model)
with torch.no_grad():
    y = compiled(x)"""


def machine() -> dict[str, object]:
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    return {
        "date": time.strftime("%Y-%m-%d"),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "gpu": gpu,
        "torch": torch.__version__,
        "python": platform.python_version(),
    }


def run_quickstart() -> None:
    """The README's quick start in two real kernels; what the compile cell printed in each, into QUICKSTART_JSON."""
    _import_from_repo()
    from jupyter_compile_cache.kernels.kernel_runner import KernelRunner

    runs = {}
    # As a user runs it, with nothing set: the kernels' HOME (the store) and TMPDIR (torch's cache dir) are new, and
    # the restarted kernel's TMPDIR is another (/tmp cleaned, or a reboot), so that torch's own caches are empty.
    for name in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "JUPYTER_COMPILE_CACHE_DIR", "XDG_CACHE_HOME"):
        os.environ.pop(name, None)
    with tempfile.TemporaryDirectory(prefix="jcc-figures-") as work:
        for run, tmp in (("first", "tmp-1"), ("restarted", "tmp-2")):
            env = {"HOME": os.path.join(work, "home"), "TMPDIR": os.path.join(work, tmp)}
            for folder in env.values():
                os.makedirs(folder, exist_ok=True)
            kernel = KernelRunner(env)
            try:
                _seconds, loaded = kernel.run(SETUP)  # what %load_ext says in a plain kernel
                seconds, out = kernel.run(CELL)
            finally:
                kernel.close()
            runs[run] = {
                "seconds": round(seconds, 3),
                "loaded": loaded.strip().splitlines(),
                "printed": out.strip().splitlines(),
            }
            print(f"quick start, {run} kernel: {seconds:.2f} s", file=sys.stderr)
    result = {"meta": {**machine(), "command": "make docs"}, "cell": CELL, **runs}
    path = os.path.join(REPO, QUICKSTART_JSON)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
        f.write("\n")


# -- renderers: (the files' JSON) -> markdown; each ends with where its figures come from -------------------------
def _device(name: str, meta: dict) -> str:
    if meta.get("gpu"):
        return str(meta["gpu"])
    if meta.get("device") == "cuda":  # older runs kept no GPU name; their folder (its name or README) says which
        readme = os.path.join(REPO, os.path.dirname(name), "README.md")
        notes = open(readme, encoding="utf-8").read() if os.path.exists(readme) else ""
        found = re.search(r"(h100|h200|a100)", name, re.I) or re.search(r"\b(H100|H200|A100)\b", notes)
        return f"an {found[1].upper()}" if found else "a CUDA GPU"
    host = re.search(r"(h100|h200)", name, re.I)
    if host:  # a GPU machine's run that did not use the GPU
        return f"the {host[1].upper()} host's CPU"
    cores = meta.get("cores") or meta.get("cpus")
    if cores is None:  # older runs kept no machine; their folder's README says which
        readme = os.path.join(REPO, os.path.dirname(name), "README.md")
        notes = open(readme, encoding="utf-8").read() if os.path.exists(readme) else ""
        found = re.search(r"(\d+)-core", notes)
        return f"the {found[1]}-core CPU machine" if found else "a CPU machine"
    return f"{meta.get('cpu') or 'a CPU'}, {cores} cores"


def _date(name: str, meta: dict) -> str:
    when = meta.get("date") or meta.get("time")
    if not when:  # older runs kept no date: their folder's name has it
        found = re.search(r"\d{4}-\d{2}-\d{2}", name)
        return found[0] if found else "date not kept"
    when = str(when)
    try:
        return time.strftime("%Y-%m-%d", time.strptime(when, "%a %b %d %H:%M:%S %Y"))
    except ValueError:
        return when.split()[0]


def _where(files: list[str], runs: list[dict]) -> str:
    groups: dict[tuple[str, str, str], list[str]] = {}
    for name, data in zip(files, runs):
        m = data.get("meta", {})
        command = m.get("command") or COMMANDS.get(_kind_of(name), "?")
        if "width" in m and "gpus" in m:  # worker_processes.py's meta, whatever its file is named
            command = _worker_command(m, list(data.get("rows", {})))
        if _kind_of(name) == "real_work" and "size" in m:
            command = f"python -m benchmarks real_work --size {m['size']} --device {m.get('device', 'cpu')}"
            if m.get("think_s"):
                command += f" --think {m['think_s']:g}"
        torch = f", torch {m['torch']}" if m.get("torch") else ""
        groups.setdefault((command, _device(name, m), torch), []).append(f"`{name}`, {_date(name, m)}")
    said = [f"`{cmd}` on {device}{torch}: " + "; ".join(where) for (cmd, device, torch), where in groups.items()]
    return "<sub>Produced by " + ". ".join(said) + ". Rendered by `make docs`.</sub>\n"


KINDS = (
    "warm_restart",
    "real_work",
    "first_magics",
    "torch_versions",
    "hub_backends",
    "large_bundles",
    "kernel_start",
    "s3_hub",
)


def _kind_of(name: str) -> str:
    base = os.path.basename(os.path.dirname(name)) + "/" + os.path.basename(name)
    for kind in KINDS:
        if kind in base:
            return kind
    return "quickstart"


COMMANDS = {
    "warm_restart": "python -m benchmarks warm_restart",
    "real_work": "python -m benchmarks real_work --size real --device cuda",
    "first_magics": "python -m benchmarks first_magics",
    "torch_versions": "python -m benchmarks torch_versions",
    "hub_backends": "python -m benchmarks hub_backends --sizes 10 100",
    "large_bundles": "python -m benchmarks large_bundles",
    "kernel_start": "python -m benchmarks kernel_start",
    "s3_hub": "python -m benchmarks s3_hub",
}


def render_quickstart(files: list[str], runs: list[dict]) -> str:
    data = runs[0]
    lines = [
        "```python",
        data["cell"],
        "```",
        "",
        "A new kernel with nothing set (no torch cache dir, no store), then the same cells after a restart on an "
        "emptied /tmp:",
        "",
        "```",
    ]
    for run in ("first", "restarted"):  # %load_ext's line (runs before 2026-11-29 kept none), then the cell's
        printed = data[run].get("loaded", []) + data[run]["printed"]
        lines += [line for line in printed if line.startswith("compile_cache:")]
    lines += ["```", ""]
    return "\n".join(lines) + _where(files, runs)


WORKLOADS = {
    "generate": "HF `generate`, static cache (CUDA graphs on a GPU), {decoder}",
    "train": "compiled AdamW training step, {decoder}",
    "decode": "reduce-overhead decode loop, {decoder}",
    "autotune": "max-autotune prefill, {decoder}",
    "flex": "FlexAttention block",
    "vision": "{vit}",
}


def _workload(row: dict, meta: dict) -> str:
    """The workload's name at the size it ran, and how it ran when that differs from Run All in one kernel."""
    tiny = meta.get("size") == "tiny"
    name = WORKLOADS.get(row["workload"], row["workload"]).format(
        decoder="tiny decoder" if tiny else "1.1 B decoder", vit="ViT, tiny" if tiny else "ViT-B/16, batch 32"
    )
    if meta.get("think_s"):
        name += f" ({meta['think_s']:g} s between the build cell and the compiled cell)"
    if (meta.get("repeat") or 1) > 1:
        name += f" (median of {meta['repeat']} kernels each)"
    return name


def render_real_work(files: list[str], runs: list[dict]) -> str:
    def cell(row: dict, case: str) -> str:
        if row.get(case) is None:
            error = str(row.get(f"{case}_error", ""))
            limit = re.match(r"no answer after (\d+) s", error)
            if limit:  # the run's time limit, not a failure of torch's
                return f"> {limit.group(1)} (the run's limit)"
            return "failed" if error else "-"
        return f"{row[case]:.2f}"

    def ratio(row: dict, case: str) -> str:
        ours, base = row.get("ours"), row.get(case)
        return f"{ours / base:.2f}x" if ours is not None and base else "-"

    lines = [
        "| workload | eager | torch cold | torch warm | ours cold | **ours restored** | restored / eager | restored / "
        "torch warm | bundle |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for data in runs:
        for row in data["rows"]:
            restored = re.search(r"restored .* \((\d+) files, ([0-9.]+ [KMG]?B)\)", str(row.get("ours_said", "")))
            bundle = f"{restored[2]}, {restored[1]} files" if restored else "-"
            lines.append(
                f"| {_workload(row, data.get('meta', {}))} | {cell(row, 'eager')} | {cell(row, 'cold')} | "
                f"{cell(row, 'torch_warm')} | {cell(row, 'ours_cold')} | **{cell(row, 'ours')}** | "
                f"{ratio(row, 'eager')} | {ratio(row, 'torch_warm')} | {bundle} |"
            )
    return "\n".join(lines) + "\n\n" + _where(files, runs)


def render_warm_kernel_cells(files: list[str], runs: list[dict]) -> str:
    """real_work.py's ours_warm case: the restored cell in a kernel of the warm spec beside torch's warm cache and
    the plain kernel, the cell alone and from a new kernel to the cell's answer (%load_ext + build + the cell)."""

    def seconds(row: dict, case: str, whole: bool) -> float | None:
        if row.get(case) is None:
            return None
        return row[case] + (row.get(f"{case}_load_ext", 0.0) + row.get(f"{case}_build", 0.0) if whole else 0.0)

    def shown(value: float | None, base: float | None) -> str:
        if value is None:
            return "-"
        return f"{value:.2f} s" + (f" ({value / base:.2f}x)" if base else "")

    lines = [
        "| workload | | torch warm cache | `%%compile_cache`, plain kernel | `%%compile_cache`, warm kernel | misses |",
        "|---|---|---|---|---|---|",
    ]
    for data in runs:
        for row in data["rows"]:
            for whole, what in ((False, "the compiled cell"), (True, "new kernel to its answer")):
                warm = seconds(row, "torch_warm", whole)
                said = " ".join(row.get("ours_warm_said") or [])
                misses = re.search(r"(\d+) miss", said)
                lines.append(
                    f"| {_workload(row, data.get('meta', {}))} | {what} | {shown(warm, None)} | "
                    f"{shown(seconds(row, 'ours', whole), warm)} | **{shown(seconds(row, 'ours_warm', whole), warm)}** "
                    f"| {misses[1] if misses and not whole else ''} |"
                )
    return "\n".join(lines) + "\n\n" + _where(files, runs)


WARM_VARIANTS = (
    ("plain_eager", "plain kernel, eager"),
    ("torch_warm", "plain kernel, torch warm cache"),
    ("ours_today", "`%%compile_cache`, plain kernel"),
    ("ours_warm", "`%%compile_cache`, warm kernel"),
    ("ours_raw", "warm kernel launched raw (VS Code)"),
)


def render_warm_restart(files: list[str], runs: list[dict]) -> str:
    shown = [(key, title) for key, title in WARM_VARIANTS if any(key in d["results"] for d in runs)]
    lines = ["| | " + " | ".join(title for _, title in shown) + " |", "|---|" + "---|" * len(shown)]
    for data in runs:
        m, results = data["meta"], data["results"]
        base = results.get("plain_eager", {}).get("median_s")
        device = m.get("gpu") or f"CPU ({m.get('cores')} cores)"
        cells = []
        for key, _ in shown:
            median = results.get(key, {}).get("median_s")
            if median is None:
                cells.append("-")
            else:
                ratio = f" ({median / base:.2f}x)" if base and key != "plain_eager" else ""
                cells.append(f"{median:.2f} s{ratio}")
        ready = f", ready by `{m['ready']}`" if m.get("ready") else ""  # runs since 2026-11-27 say how they waited
        lines.append(f"| {device}, torch {m['torch']}{ready} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n\n" + _where(files, runs)


START_VARIANTS = (
    ("plain_eager", "plain kernel, eager"),
    ("torch_warm", "plain kernel, torch warm cache"),
    ("ours_plain", "`%%compile_cache`, plain kernel"),
    ("ours_warm", "`%%compile_cache`, warm kernel"),
    ("ours_raw", "warm kernel launched raw (VS Code)"),
)


def render_kernel_start(files: list[str], runs: list[dict]) -> str:
    """A new kernel to its compiled cell's end, each variant's median (its ratio to torch's warm cache), then
    what the templates cost and what starting many kernels at once gives."""
    lines = ["| | " + " | ".join(title for _, title in START_VARIANTS) + " |", "|---|" + "---|" * len(START_VARIANTS)]
    extra = ["", "| | two restarts 2 s apart | kernels started at once | 4 kernels' PSS, plain / forked |"]
    extra.append("|---|---|---|---|")
    for name, data in zip(files, runs):
        variants, device = data["variants"], _device(name, data["meta"])
        warm = variants.get("torch_warm", {}).get("median_s")
        cells = []
        for key, _ in START_VARIANTS:
            median = variants.get(key, {}).get("median_s")
            ratio = f" ({median / warm:.2f}x)" if median is not None and warm and key != "torch_warm" else ""
            cells.append("-" if median is None else f"{median:.2f} s{ratio}")
        lines.append(f"| {device}, torch {data['meta']['torch']} | " + " | ".join(cells) + " |")
        kernels = data["at_once"]["kernels"]
        forked = sum(k["how"] == "forked" for k in kernels)
        right = sum(bool(k["right"]) for k in kernels)
        slowest = max(k["total_s"] for k in kernels)
        mem = data["memory"]
        pss = f"{mem['plain_eager']['pss_bytes'] / 2**20:.0f} / {mem['ours_warm']['pss_bytes'] / 2**20:.0f} MiB"
        restarts = ", ".join(data["restarts_2s_apart"])
        at_once = f"{len(kernels)}: {forked} forked, {right} right, slowest {slowest:.2f} s"
        extra.append(f"| {device} | {restarts} | {at_once} | {pss} |")
    return "\n".join(lines + extra) + "\n\n" + _where(files, runs)


def render_first_magics(files: list[str], runs: list[dict]) -> str:
    columns = []  # (heading, run, label)
    for name, data in zip(files, runs):
        where = _device(name, data["meta"])
        columns += [(f"{label}, {where}", data, label) for label in data["seconds"]]
    magics = list(next(iter(runs[0]["seconds"].values())))
    lines = ["| first magic after `%load_ext` | " + " | ".join(c[0] for c in columns) + " |"]
    lines.append("|---|" + "---|" * len(columns))
    for magic in magics:
        cells = [f"{statistics.median(data['seconds'][label][magic]):.2f} s" for _, data, label in columns]
        lines.append(f"| {magic} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n\n" + _where(files, runs)


SUITES = {
    "all": "the whole suite",
    "restore": "the restore tests",
    "gpu": "edit matrix, model zoo, two input sizes in two cells, on the GPU",
    "rerun": "the tests that failed in the run above, after their fixes",
}


def render_torch_versions(files: list[str], runs: list[dict]) -> str:
    lines = ["| torch | machine | tests | passed | failed | a restored cell comes back through |"]
    lines.append("|---|---|---|---|---|---|")
    order = sorted(zip(files, runs), key=lambda p: [int(n) for n in re.findall(r"\d+", p[1]["meta"]["torch"])[:3]])
    for name, data in order:
        m = data["meta"]
        failed = str(data["failed"])
        if data["failures"]:
            failed += " (" + ", ".join(f"`{f.rsplit('::', 1)[-1]}`" for f in data["failures"]) + ")"
        through = data.get("fallback") or "Dynamo precompile (no tracing), then FX graph, AOTAutograd and kernels"
        lines.append(
            f"| {m['torch']} | {_device(name, m)} | {SUITES.get(data['suite'], data['suite'])} | {data['passed']} "
            f"| {failed} | {through} |"
        )
    return "\n".join(lines) + "\n\n" + _where(files, runs)


def render_hub_backends(files: list[str], runs: list[dict]) -> str:
    lines = ["| code | backend | bundle | push | pull |", "|---|---|---|---|---|"]
    for data in runs:
        for r in sorted(data["rows"], key=lambda r: (r["size_mb"], r["backend"], r["code"] != "baseline")):
            code = "before (the baseline checkout)" if r["code"] == "baseline" else "this code"
            lines.append(f"| {code} | {r['backend']} | {r['size_mb']} MB | {r['push_s']:.3f} s | {r['pull_s']:.3f} s |")
    return "\n".join(lines) + "\n\n" + _where(files, runs)


def render_large_bundles(files: list[str], runs: list[dict]) -> str:
    def median(row: dict, step: str) -> str:
        done = [run[step] for run in row["runs"] if "error" not in run[step]]
        if not done:
            return "failed"
        return f"{statistics.median(r.get('seconds', r.get('restore_s', 0.0)) for r in done):.2f} s"

    lines = ["| bundle | save | push | pull | restore |", "|---|---|---|---|---|"]
    for data in runs:
        for row in data["rows"]:
            steps = " | ".join(median(row, step) for step in ("save", "push", "pull", "restore"))
            lines.append(f"| {row['size_mb']} MB, {row['kind']} | {steps} |")
    return "\n".join(lines) + "\n\n" + _where(files, runs)


def render_s3_hub(files: list[str], runs: list[dict]) -> str:
    """benchmarks/s3_hub.py: the two clients side by side, then ours against the floors of the same run."""
    lines = [
        "| bytes | client | as | put | get | peak memory over imports |",
        "|---|---|---|---|---|---|",
    ]
    for data in runs:
        for r in data["clients"]:
            shape = "one object (the client's multipart)" if r["mode"] == "object" else "4 MB objects, 8 at once"
            if "error" in r:
                lines.append(f"| {r['size_mb']} MB | {r['client']} | {shape} | failed | failed | |")
                continue
            lines.append(
                f"| {r['size_mb']} MB | {r['client']} | {shape} | {r['put_s']:.2f} s | {r['get_s']:.2f} s "
                f"| {r['peak_over_imports_mb']:.0f} MB |"
            )
    lines += ["", "| step, 1 GB bundle | ours | floor (same run) | ratio | peak memory over imports |"]
    lines.append("|---|---|---|---|---|")
    for data in runs:
        big, floors, chunk_mb = data["bundle"], data["bundle"]["floors"], data["meta"].get("chunk_mb", 4)
        disk = max(floors["dd_fsync_s"], floors["sha256_read_s"])
        raw, client = big["raw_chunks"], data["meta"].get("floor_client", "boto3")  # the hub's client of that day
        rows = (
            ("save", big["save"].get("seconds"), disk, "dd+fsync or sha256 of the bytes, the slower"),
            ("push", big["push"].get("seconds"), raw.get("put_s"), f"{client}'s put of the same 4 MB objects"),
            ("pull", big["pull"].get("seconds"), raw.get("get_s"), f"{client}'s get of them"),
            ("restore", big["restore"].get("restore_s"), disk, "dd+fsync or sha256, the slower"),
        )
        for step, ours, floor, what in rows:
            if ours is None or not floor:
                lines.append(f"| {step} | failed | {what} | | |")
                continue
            over = big[step]["peak_rss_mb"] - big[step]["imports_rss_mb"]
            lines.append(
                f"| {step} | {ours:.2f} s | {what}: {floor:.2f} s | {ours / floor:.2f}x "
                f"| {over:.0f} MB ({over / chunk_mb:.0f} chunks) |"
            )
        listed = data["listing"]
        lines.append("")
        lines.append(f"Listing {listed['objects']:,} objects by prefix: {listed['list_s']:.2f} s.")
    return "\n".join(lines) + "\n\n" + _where(files, runs)


def _worker_command(meta: dict, ranks: list[str]) -> str:
    command = f"python -m benchmarks worker_processes --ranks {' '.join(ranks)} --width {meta.get('width', 256)}"
    if meta.get("mode"):
        command += f" --mode {meta['mode']}"
    if meta.get("layers", 4) != 4:
        command += f" --layers {meta['layers']}"
    return command + (" --compile-step" if meta.get("compile_step") else "")


def render_worker_processes(files: list[str], runs: list[dict]) -> str:
    """A job's ranks (torchrun) cold, on torch's warm cache and restored by `jupyter-compile-cache run`, per file
    and rank count."""
    lines = [
        "| machine | job | ranks | cold | torch warm | ours restored | ours / torch warm | ours / cold "
        "| ours / torch warm, median of pairs | FX misses per rank (ours) | losses equal |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, data in zip(files, runs):
        meta = data.get("meta", {})
        job = f"width {meta.get('width', 256)}" + (f", {meta['mode']}" if meta.get("mode") else "")
        job += ", AdamW step compiled" if meta.get("compile_step") else ""
        for ranks, row in data["rows"].items():
            cold, warm, ours = (row[case]["seconds"] for case in ("cold", "torch_warm", "ours"))
            misses = sum(row["ours"]["fx_misses"].values())
            same = all(row[case]["same_losses"] for case in ("cold", "torch_warm", "ours_cold", "ours"))
            ratios = [pair["ratio"] for pair in row.get("pairs", [])]  # --repeat: one pair shows nothing
            paired = f"{statistics.median(ratios):.3f}x of {len(ratios)}" if len(ratios) > 1 else "-"
            lines.append(
                f"| {_device(name, meta)} | {job} | {ranks} | {cold:.1f} s | {warm:.1f} s | {ours:.1f} s "
                f"| {ours / warm:.2f}x | {ours / cold:.2f}x | {paired} | {misses} in all | {'yes' if same else 'no'} |"
            )
    return "\n".join(lines) + "\n\n" + _where(files, runs)


def render_steady_state(files: list[str], runs: list[dict]) -> str:
    """Restored code call after call (steady_state.py): per workload, each pair's median call, ours over torch's
    warm-cache kernel, and the pairs' median; the fastest-decile column is the same ratio for the call a tenth of
    the calls beat."""
    _import_from_repo()
    from benchmarks.steady_state import fastest_decile

    lines = [
        "| machine, torch | workload | ours / torch, per pair | median | fastest decile, median | same answers "
        "| gate (<= 1.02) |",
        "|---|---|---|---|---|---|---|",
    ]
    metas = []
    for name, data in zip(files, runs):
        m, a = data.get("meta") or data["machine"], data["args"]  # (runs before the harness: "machine")
        pinned = re.search(r"cores_(\d+)_(\d+)", name)
        meta = {key: m.get(key) for key in ("gpu", "device", "cpu", "cores", "torch", "date")}
        meta["command"] = (
            f"python -m benchmarks steady_state --size {a['size']} --device {a['device']} --rounds {a['rounds']} "
            f"--calls {a['calls']}" + (" (pinned to cores with taskset)" if pinned else "")
        )
        metas.append({"meta": meta})
        where = _device(name, meta) + (f", cores {pinned[1]}-{pinned[2]}" if pinned else "")
        where += f", torch {str(meta['torch']).split('+')[0]}" if meta["torch"] else ""
        for row in data["rows"]:
            if not row.get("ratios"):
                lines.append(f"| {where} | {row['workload']} | failed: {row.get('error', '')[:90]} | | | | |")
                continue
            fast = [fastest_decile(k["ours"]["times"]) / fastest_decile(k["torch"]["times"]) for k in row["kernels"]]
            verdict = "pass" if row["median_ratio"] <= a["gate"] else "FAIL"
            lines.append(
                f"| {where} | {row['workload']} | {', '.join(f'{r:.3f}' for r in row['ratios'])} "
                f"| **{row['median_ratio']:.3f}x** | {statistics.median(fast):.3f}x "
                f"| {'yes' if row['same_answers'] else 'NO'} | {verdict} |"
            )
    return "\n".join(lines) + "\n\n" + _where(files, metas)


RENDERERS: dict[str, Callable[[list[str], list[dict]], str]] = {
    "quickstart": render_quickstart,
    "real-work": render_real_work,
    "warm-restart": render_warm_restart,
    "warm-kernel-cells": render_warm_kernel_cells,
    "first-magics": render_first_magics,
    "kernel-start": render_kernel_start,
    "torch-versions": render_torch_versions,
    "hub-backends": render_hub_backends,
    "large-bundles": render_large_bundles,
    "s3-hub": render_s3_hub,
    "worker-processes": render_worker_processes,
    "steady-state": render_steady_state,
}


def render_page(text: str) -> str:
    def one(match: re.Match[str]) -> str:
        kind, files = match["kind"], match["files"].split()
        if kind not in RENDERERS:
            raise SystemExit(f"unknown figure kind {kind!r} (kinds: {', '.join(RENDERERS)})")
        runs = []
        for name in files:
            with open(os.path.join(REPO, name), encoding="utf-8") as f:
                runs.append(json.load(f))
        return match[1] + RENDERERS[kind](files, runs) + match[5]

    return REGION.sub(one, text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say whether every figure matches its files")
    parser.add_argument("--no-run", action="store_true", help="render from the stored files without re-running")
    args = parser.parse_args()
    if not args.check and not args.no_run:
        run_quickstart()
    stale = []
    for page in PAGES:
        path = os.path.join(REPO, page)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        rendered = render_page(text)
        if rendered != text:
            stale.append(page)
            if not args.check:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(rendered)
    if args.check and stale:
        print(f"figures differ from their result files in: {', '.join(stale)} (run `make docs`)", file=sys.stderr)
        return 1
    print(("rendered: " if stale else "every figure is up to date: ") + ", ".join(stale or PAGES))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
