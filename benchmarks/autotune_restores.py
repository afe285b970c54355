"""max-autotune restores on an emptied machine, side by side with torch's warm cache and mega-cache in one run.

Per config (the GPU suite's transformer and decoder LM, max-autotune, inference), each case a fresh process
(benchmarks/_case.py):

  cold         torch.compile on an empty cache dir (it writes the mega-cache)
  ours_cold    %%compile_cache on an empty cache dir and store
  torch_warm   cold's cache dir again
  mega         the mega-cache loaded into an empty cache dir
  ours 1..N    %%compile_cache restoring into an empty cache dir

Before every case but the cold ones, the machine's own caches outside the cache dir are emptied (~/.triton,
/tmp/torchinductor_<user>, ~/.nv/ComputeCache, ~/.cache/torch): each restore runs as on a machine new to the model.

Reported per restore: the first compiled call against cold; the real autotunings (matmul choices benchmarked, and
run-time benchmarks of Triton launch configs, one per call, with the kernel's name: counted in the process, since
torch replays its own counters on a cache hit); and what the process wrote that the bundle did not bring (files new
in the cache dir, and in the machine's caches): work done again. And, file by file, what the cold process's cache
dir ended up holding that the bundle does not (written after the cell's capture, e.g. by compile workers).

    python -m benchmarks autotune_restores --restores 5 --out benchmarks/results/autotune_restores_h100.json
    python -m benchmarks autotune_restores --profiles DIR ...   # py-spy (on PATH) the first two restores
"""

from __future__ import annotations

import getpass
import json
import os
import shutil
import tempfile
import time

from benchmarks import bench  # configs and the case runner
from benchmarks.harness import Job, option

HERE = os.path.dirname(os.path.abspath(__file__))

CONFIGS = ["transformer-max-autotune-infer", "lm-max-autotune-infer"]


def machine_caches() -> list[str]:
    """Where torch and Triton keep per-user state outside a cache dir that TORCHINDUCTOR_CACHE_DIR names."""
    home = os.path.expanduser("~")
    return [
        os.path.join(home, ".triton"),
        os.path.join(tempfile.gettempdir(), f"torchinductor_{getpass.getuser()}"),
        os.path.join(home, ".nv", "ComputeCache"),
        os.path.join(home, ".cache", "torch"),
    ]


def empty_machine() -> None:
    for path in machine_caches():
        shutil.rmtree(path, ignore_errors=True)


def files_under(root: str) -> dict[str, int]:
    found = {}
    for d, _, names in os.walk(root):
        for n in names:
            path = os.path.join(d, n)
            try:
                found[os.path.relpath(path, root)] = os.path.getsize(path)
            except OSError:
                continue
    return found


def machine_files() -> dict[str, int]:
    return {f"{root}/{rel}": size for root in machine_caches() for rel, size in files_under(root).items()}


def bundle_members(store: str, name: str) -> set[str]:
    from jupyter_compile_cache.storage.store import LocalStore

    versions = LocalStore(store).versions(name)
    return {m.name for v in versions for m in v.members}


def as_members(paths: dict[str, int]) -> dict[str, int]:
    """Cache-dir paths as bundle member names (Triton's dir is inside the cache dir here: one root)."""
    return {"inductor/" + rel.replace(os.sep, "/"): size for rel, size in paths.items()}


def kinds(paths: dict[str, int]) -> dict[str, int]:
    """Counts by file kind (extension, or the file name where it has none)."""
    out: dict[str, int] = {}
    for p in paths:
        base = os.path.basename(p)
        kind = os.path.splitext(base)[1] or base
        out[kind] = out.get(kind, 0) + 1
    return dict(sorted(out.items()))


def run_case(cfg: dict, case: str, cache: str, store: str, extra: list[str] = (), profile: str | None = None) -> dict:
    """One case; with `profile`, py-spy samples it into that file (raw stacks, where a slow restore goes)."""
    env = dict(bench.clean_env(), TORCHINDUCTOR_CACHE_DIR=cache, JUPYTER_COMPILE_CACHE_DIR=store)
    env["BENCH_COUNT_RUNTIME_AUTOTUNE"] = "1"
    os.makedirs(cache, exist_ok=True)
    before_machine = machine_files()
    start = time.perf_counter()
    prefix = ["py-spy", "record", "-r", "250", "-f", "raw", "-o", profile, "--"] if profile else []
    row = {"case": case, **bench.run_case(cfg, case, env, list(extra), prefix=prefix)}
    row["process_s"] = time.perf_counter() - start
    row["machine_files_new"] = sorted(set(machine_files()) - set(before_machine))
    return row


def one_config(cfg: dict, work: str, restores: int, profiles: str | None = None) -> dict:
    root = os.path.join(work, cfg["name"])
    store, mega = os.path.join(root, "store"), os.path.join(root, "mega.bin")
    rows = []

    def show(row: dict) -> None:
        counters = row.get("counters", {})
        print(
            f"  {cfg['name']:32s} {row['case']:11s} first call {row.get('first_call_s', float('nan')):8.3f} s  "
            f"autotunes run {counters.get('autotunes_run', '-')}, runtime {counters.get('runtime_autotunes_run', '-')}"
            f"  new files: cache dir {len(row.get('cache_files_new', []))}, machine {len(row['machine_files_new'])}"
            + (f"   ERROR {row['error'][-400:]}" if "error" in row else ""),
            flush=True,
        )

    empty_machine()
    rows.append(run_case(cfg, "cold", os.path.join(root, "cold"), store, ["--mega-out", mega]))
    show(rows[-1])
    empty_machine()
    ours_cold_dir = os.path.join(root, "ours_cold")
    rows.append(run_case(cfg, "ours_cold", ours_cold_dir, store))
    show(rows[-1])
    at_exit = as_members(files_under(ours_cold_dir))
    time.sleep(10)  # compile workers finishing after the cell
    later = as_members(files_under(ours_cold_dir))
    members = bundle_members(store, cfg["name"])
    late = {
        "files_in_cold_dir": len(later),
        "files_in_bundle": len(members),
        "not_in_bundle_at_exit": sorted(set(at_exit) - members),
        "written_after_exit": sorted(set(later) - set(at_exit)),
    }
    print(f"  cold dir vs bundle: {json.dumps({k: v if isinstance(v, int) else len(v) for k, v in late.items()})}")
    for label in ("not_in_bundle_at_exit", "written_after_exit"):
        if late[label]:
            print(f"    {label}: {kinds(dict.fromkeys(late[label], 0))}")

    for case, cache, extra in (
        ("torch_warm", os.path.join(root, "cold"), []),
        ("mega", os.path.join(root, "mega"), ["--mega-in", mega]),
    ):
        empty_machine()
        rows.append(run_case(cfg, case, cache, store, extra))
        show(rows[-1])
    for i in range(restores):
        empty_machine()
        cache = os.path.join(root, f"ours_{i + 1}")
        profile = None
        if profiles and i < 2:  # the first restore on the emptied machine, and the next one
            profile = os.path.join(profiles, f"{cfg['name']}_ours_{i + 1}.txt")
        row = run_case(cfg, "ours", cache, store, profile=profile)
        row["restore_number"] = i + 1
        restored = set(bundle_members(store, cfg["name"]))
        new = {k: v for k, v in as_members(files_under(cache)).items() if k not in restored}
        row["cache_files_new"] = sorted(new)
        row["cache_files_new_kinds"] = kinds(new)
        rows.append(row)
        show(row)
        if new:
            print(f"    new in the cache dir: {kinds(new)}")
        if row["machine_files_new"]:
            print(f"    new in the machine's caches: {kinds(dict.fromkeys(row['machine_files_new'], 0))}")
        shutil.rmtree(cache, ignore_errors=True)
    shutil.rmtree(root, ignore_errors=True)
    return {"config": cfg["name"], "rows": rows, "cold_dir_vs_bundle": late}


def table(results: list[dict]) -> tuple[list[str], list[list[str]]]:
    most = max(sum(r["case"] == "ours" for r in x["rows"]) for x in results)
    headers = ["config", "cold", "torch warm", "mega", *(f"ours #{i + 1}" for i in range(most)), "worst ours / cold"]
    lines = []
    for res in results:
        by = {r["case"]: r for r in res["rows"] if r["case"] != "ours"}
        ours = [r for r in res["rows"] if r["case"] == "ours"]
        cold = by["cold"].get("first_call_s")

        def cell(row: dict | None, cold: float | None = cold) -> str:
            if row is None or "first_call_s" not in row:
                return "error"
            c = row.get("counters", {})
            ratio = f" ({row['first_call_s'] / cold:.3f}x)" if cold else ""
            tuned = c.get("autotunes_run", 0) + c.get("runtime_autotunes_run", 0)
            return f"{row['first_call_s']:.2f}{ratio}" + (f", {tuned} tuned" if tuned else "")

        worst = max((r.get("first_call_s", float("inf")) for r in ours), default=float("nan"))
        cells = [cell(by.get("cold")), cell(by.get("torch_warm")), cell(by.get("mega"))] + [cell(r) for r in ours]
        lines.append([res["config"], *cells, f"{worst / cold:.3f}x"])
    return headers, lines


OPTIONS = [
    option("--restores", type=int, default=5),
    option("--only", nargs="*", default=CONFIGS),
    option("--profiles", help="py-spy the first two restores of each config into this folder"),
]


def run(job: Job) -> None:
    args = job.args
    configs = {c["name"]: c for c in bench.SUITES["gpu"]}
    results = []
    with tempfile.TemporaryDirectory(prefix="autotune-restores-") as work:
        for name in args.only:
            print(f"{name}:", flush=True)
            results.append(one_config(configs[name], work, args.restores, args.profiles))
            job.keep(environment=bench.environment(), results=results)
    title = "first compiled call, s (/ cold); 'tuned': autotunings really run in that process"
    job.table(*table(results), title=title)
