"""The benchmark: ours vs torch's own caches, every case side by side in one run.

Each case is a fresh process (= a kernel restart; benchmarks/_case.py), so nothing is warm in memory:

  eager         the model's first eager call: the floor
  cold          torch.compile on an empty cache dir (it also writes torch's Redis caches and the mega-cache)
  torch_warm    the same cache dir again: torch's own local caches
  mega          torch.compiler.load_cache_artifacts() of the cold run's mega-cache, into an empty dir
  torch_remote  torch's Redis remote caches (FX graph, AOTAutograd, autotune), into an empty dir
  ours_cold     %%compile_cache on an empty dir and store: a cold compile plus our capture, save and push
  ours          %%compile_cache restoring from the local store into an empty dir
  ours_hub      %%compile_cache with an empty store and an empty dir: pulled from the hub

Then: what `%%compile_cache` costs a cell with nothing to restore (overhead), and pulling a 100+ MB bundle from
the hub (transfer). Needs redis-server on PATH (or --redis-server) for torch_remote, ours_hub and the hub parts;
the other cases run without one.

  python -m benchmarks bench --suite cpu --out benchmarks/results/cpu.json --plot benchmarks/results/cpu.png
  python -m benchmarks bench --suite gpu --out gpu.json                  # on a CUDA machine
  python -m benchmarks bench --report a.json b.json --plot all.png        # tables and plot of earlier runs
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from benchmarks.harness import Job, option

HERE = os.path.dirname(os.path.abspath(__file__))

CASES = ["eager", "cold", "torch_warm", "mega", "torch_remote", "ours_cold", "ours", "ours_hub"]
TORCH_REMOTE_ENV = {
    "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE": "1",
    "TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE": "1",
    "TORCHINDUCTOR_AUTOTUNE_REMOTE_CACHE": "1",
    "TORCHINDUCTOR_NON_BLOCKING_REMOTE_CACHE_WRITE": "0",  # the writes land before the cold process exits
}
MAX_AUTOTUNE = "max-autotune-no-cudagraphs"


def config(model: str, device: str, mode: str = "default", train: bool = False, batches: str = "8") -> dict:
    step = "train" if train else "infer"
    shapes = "" if "," not in batches else "-dyn" + batches.replace(",", "-")
    name = f"{model}-{'max-autotune' if mode != 'default' else 'default'}-{step}{shapes}"
    return dict(name=name, model=model, device=device, mode=mode, train=train, batches=batches)


SUITES = {
    "cpu": [
        config("mlp", "cpu"),
        config("mlp", "cpu", train=True),
        config("lm", "cpu"),
        config("mlp", "cpu", batches="8,16"),
    ],
    "gpu": [
        config("transformer", "cuda"),
        config("transformer", "cuda", train=True),
        config("transformer", "cuda", MAX_AUTOTUNE),
        config("convnet", "cuda"),
        config("convnet", "cuda", train=True),
        config("convnet", "cuda", MAX_AUTOTUNE),
        config("lm", "cuda"),
        config("lm", "cuda", train=True),
        config("lm", "cuda", MAX_AUTOTUNE),
        config("transformer", "cuda", batches="8,16"),
    ],
}


# -- running cases --------------------------------------------------------------------------------------------------
def run_case(
    cfg: dict, case: str, env: dict, extra: list[str] = (), think: float = 0.0, prefix: list[str] = ()
) -> dict:
    """One case in a fresh process; `prefix` runs it under another program (a sampling profiler)."""
    cmd = [*prefix, sys.executable, os.path.join(HERE, "_case.py"), "--case", case, "--model", cfg["model"]]
    cmd += ["--device", cfg["device"], "--mode", cfg["mode"], "--batches", cfg["batches"], "--name", cfg["name"]]
    cmd += ["--think", str(think), *extra] + (["--train"] if cfg["train"] else [])
    env = dict(env, PYTHONPATH=os.pathsep.join([os.path.dirname(HERE), os.environ.get("PYTHONPATH", "")]))
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    except subprocess.TimeoutExpired:
        return {"case": case, "error": "timed out after 1800 s"}
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        return {"case": case, "error": proc.stderr[-3000:]}
    return json.loads(lines[-1][len("RESULT ") :])


def clean_env() -> dict[str, str]:
    """This process's environment without torch's or our cache settings: each case sets its own."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("TORCHINDUCTOR_", "JUPYTER_COMPILE_CACHE_"))}


def dir_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def redis_bytes(url: str, pattern: str) -> int:
    """Bytes of torch's remote cache entries (string values) in the benchmark's Redis."""
    import redis

    client = redis.Redis.from_url(url)
    return sum(client.strlen(k) for k in client.scan_iter(pattern) if client.type(k) == b"string")


def run_config(cfg: dict, work: str, redis_url: str | None, think: float, keep_cold: str | None = None) -> list[dict]:
    """All cases of one model/mode/step, in order; each case gets the cache dir and store its story needs."""
    root = os.path.join(work, cfg["name"])
    dirs = {d: os.path.join(root, d) for d in ("eager", "cold", "mega", "remote", "ours_cold", "ours", "ours_hub")}
    stores = {s: os.path.join(root, s) for s in ("store", "store_hub")}
    for d in [*dirs.values(), *stores.values()]:
        os.makedirs(d)
    mega = os.path.join(root, "mega.bin")
    base = clean_env()
    if redis_url:  # each config starts with an empty Redis (torch's db 0 and 1, our hub in db 0)
        import redis

        redis.Redis.from_url(redis_url).flushall()
    # Every torch case runs with torch's Redis switches on (they are part of torch's cache keys: a warm run with
    # other switches than the cold one misses). cold writes Redis db 0, torch_remote reads it into an empty dir;
    # torch_warm and mega see an empty db 1, so what they get comes from their own cache dir alone.
    plans = {  # case: (cache dir, store, torch's Redis db or None, uses our hub, extra args)
        "eager": (dirs["eager"], stores["store"], None, False, []),
        "cold": (dirs["cold"], stores["store"], 0, False, ["--mega-out", mega]),
        "torch_warm": (dirs["cold"], stores["store"], 1, False, []),
        "mega": (dirs["mega"], stores["store"], 1, False, ["--mega-in", mega]),
        "torch_remote": (dirs["remote"], stores["store"], 0, False, []),
        "ours_cold": (dirs["ours_cold"], stores["store"], None, True, []),
        "ours": (dirs["ours"], stores["store"], None, False, []),
        "ours_hub": (dirs["ours_hub"], stores["store_hub"], None, True, []),
    }
    rows = []
    for case in CASES:
        cache, store, redis_db, hub, extra = plans[case]
        if case in ("torch_remote", "ours_hub") and not redis_url:  # ours_cold and ours need no server
            rows.append(dict(cfg, case=case, error="skipped: no redis-server"))
            continue
        env = dict(base, TORCHINDUCTOR_CACHE_DIR=cache, JUPYTER_COMPILE_CACHE_DIR=store)
        if redis_db is not None and redis_url:
            env.update(TORCH_REMOTE_ENV, TORCHINDUCTOR_REDIS_URL=f"{redis_url.rsplit('/', 1)[0]}/{redis_db}")
        if hub and redis_url:
            env.update(JUPYTER_COMPILE_CACHE_HUB=redis_url, JUPYTER_COMPILE_CACHE_NAMESPACE=f"bench/{cfg['name']}")
        row = dict(cfg, **run_case(cfg, case, env, extra, think))
        if case == "cold" and "error" not in row:
            row["bytes_moved"] = dir_bytes(cache)  # what the compile wrote
            row["remote_bytes"] = redis_bytes(redis_url, "*") if redis_url else 0  # db 0: torch's entries
        if case == "torch_remote" and "error" not in row:
            row["bytes_moved"] = next((r.get("remote_bytes", 0) for r in rows if r["case"] == "cold"), 0)
        if case == "torch_warm":
            row["bytes_moved"] = 0  # read in place
        rows.append(row)
        print(
            f"  {cfg['name']:36s} {case:12s} first call {row.get('first_call_s', float('nan')):8.3f} s   "
            f"cell {row.get('cell_s', float('nan')):8.3f} s"
            + (f"   ERROR {row['error'][-300:]}" if "error" in row else ""),
            flush=True,
        )
    if keep_cold:  # a populated cache dir for the overhead measurement
        os.rename(dirs["cold"], keep_cold)
    shutil.rmtree(root, ignore_errors=True)
    return rows


# -- the hub: a loopback redis-server, a big transfer ---------------------------------------------------------------
@contextlib.contextmanager
def redis_server(binary: str | None, workdir: str):
    if not binary:
        yield None
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = ["--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", workdir]
    proc = subprocess.Popen([binary, *args], stdout=subprocess.DEVNULL)
    try:
        import redis

        for _ in range(200):
            with contextlib.suppress(redis.ConnectionError):
                redis.Redis(port=port).ping()
                break
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.kill()
        proc.wait()


def transfer(url: str, size_mb: int, work: str) -> dict:
    """Push a bundle of incompressible files (the worst case), pull it into an empty store, restore it."""
    from jupyter_compile_cache.storage import bundle
    from jupyter_compile_cache.storage.bundle import Manifest
    from jupyter_compile_cache.storage.hub import Hub, HubConfig
    from jupyter_compile_cache.storage.store import LocalStore

    src = os.path.join(work, f"src{size_mb}")
    os.makedirs(src)
    files, per_file = {}, 4 << 20
    for i in range(max(1, (size_mb << 20) // per_file)):
        path = os.path.join(src, f"k{i}.bin")
        with open(path, "wb") as f:
            f.write(os.urandom(per_file))
        files[f"inductor/ab/k{i}.bin"] = path
    manifest = Manifest.new(f"big{size_mb}", {}, "0" * 12, "bench")
    store_a = LocalStore(os.path.join(work, f"a{size_mb}"))
    manifest = store_a.write(manifest, files)
    hub = Hub(HubConfig(url=url, namespace="bench-transfer"))
    t = time.perf_counter()
    hub.push(manifest, store_a.payload_path(manifest))
    push_s = time.perf_counter() - t
    store_b = LocalStore(os.path.join(work, f"b{size_mb}"))
    t = time.perf_counter()
    [listed] = hub.versions(manifest.name)
    with tempfile.TemporaryFile(dir=work) as buf:
        hub.pull(listed, buf)
        buf.seek(0)
        local = store_b.adopt(listed, buf)
    pull_s = time.perf_counter() - t
    timings = {}
    for label, store, m in (("hub", store_b, local), ("local", store_a, manifest)):
        target = os.path.join(work, f"cache-{label}{size_mb}")
        os.makedirs(target)
        t = time.perf_counter()
        with store.open_payload(m) as f:
            bundle.extract(f, m, {"inductor": target})
        timings[label] = time.perf_counter() - t
    shutil.rmtree(src)
    return {
        "size_mb": size_mb,
        "payload_bytes": manifest.payload_bytes,
        "chunks": len(listed.chunk_sha256),
        "push_s": push_s,
        "pull_s": pull_s,
        "hub_restore_s": pull_s + timings["hub"],
        "local_restore_s": timings["local"],
    }


def overhead(redis_url: str | None, work: str, cache_dir: str) -> list[dict]:
    """`%%compile_cache` on a cell with nothing to restore, without and with a hub, beside a populated cache dir."""
    rows = []
    for hub in (False, True) if redis_url else (False,):
        env = dict(clean_env(), TORCHINDUCTOR_CACHE_DIR=cache_dir)
        env.update(JUPYTER_COMPILE_CACHE_DIR=os.path.join(work, f"overhead-store-{hub}"))
        if hub and redis_url:
            env.update(JUPYTER_COMPILE_CACHE_HUB=redis_url, JUPYTER_COMPILE_CACHE_NAMESPACE="bench-overhead")
        rows.append(run_case(config("mlp", "cpu"), "overhead", env))
    return rows


# -- reporting ------------------------------------------------------------------------------------------------------
def environment() -> dict:
    import torch

    env = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "triton": None,
        "gpu": None,
        "cuda": torch.version.cuda,
    }
    with contextlib.suppress(ImportError):
        import triton

        env["triton"] = triton.__version__
    if torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name()
    return env


def merged_rows(results: list[dict]) -> list[dict]:
    """The cases of several runs; a config measured again in a later run keeps both rows ("... (run 2)")."""
    rows, seen = [], {}
    for res in results:
        names = {r["name"] for r in res["cases"]}
        for name in names:
            seen[name] = seen.get(name, 0) + 1
        for r in res["cases"]:
            rows.append(dict(r, name=r["name"] if seen[r["name"]] == 1 else f"{r['name']} (run {seen[r['name']]})"))
    return rows


def _group(rows: list[dict]) -> dict[str, dict[str, dict]]:
    groups: dict[str, dict[str, dict]] = {}
    for r in rows:
        groups.setdefault(r["name"], {})[r["case"]] = r
    return groups


def table(rows: list[dict], metric: str, unit: str = "s") -> tuple[list[str], list[list[str]]]:
    """One row per config, the cases side by side, and ours against eager and cold."""
    lines = []
    for name, cases in _group(rows).items():

        def value(case: str, cases: dict = cases) -> float | None:
            return cases.get(case, {}).get(metric)

        def fmt(v: float | None) -> str:
            if v is None:
                return "-"
            if unit == "MB":
                return f"{v / 1e6:.1f}"
            return f"{v:.3f}" if v < 10 else f"{v:.1f}"

        cells = [fmt(value(c)) for c in CASES]
        ours, eager, cold = value("ours"), value("eager"), value("cold")
        ratio_e = f"{ours / eager:.2f}x" if ours and eager and unit == "s" else "-"
        ratio_c = f"{ours / cold:.3f}x" if ours and cold and unit == "s" else "-"
        lines.append([name, *cells, ratio_e, ratio_c])
    return ["config", *CASES, "ours / eager", "ours / cold"], lines


def counters_table(rows: list[dict]) -> tuple[list[str], list[list[object]]]:
    """torch's own counters per case: misses/hits of the FX graph, AOTAutograd and Dynamo precompile caches; matmul
    autotunings as torch's counter says (on a cache hit torch replays the cold compile's count) / really run."""
    headers = [
        "config",
        "case",
        "fx miss/hit",
        "aot miss/hit",
        "dynamo miss/hit",
        "autotunings counted/run",
        "recompiles",
    ]
    lines = []
    for r in rows:
        c = r.get("counters")
        if not c:
            continue
        ind, aot, dyn = c.get("inductor", {}), c.get("aot_autograd", {}), c.get("dynamo_cache", {})
        lines.append([
            r["name"],
            r["case"],
            f"{ind.get('fxgraph_cache_miss', 0)}/{ind.get('fxgraph_cache_hit', 0)}",
            f"{aot.get('autograd_cache_miss', 0)}/{aot.get('autograd_cache_hit', 0)}",
            f"{dyn.get('dynamo_cache_miss', 0)}/{dyn.get('dynamo_cache_hit', 0)}",
            f"{ind.get('select_algorithm_autotune', 0)}/{c.get('autotunes_run', '-')}",
            sum(c.get("recompiles", {}).values()),
        ])  # fmt: skip
    return headers, lines


def report(job: Job, results: list[dict]) -> None:
    rows = merged_rows(results)
    for res in results:
        e = res["environment"]
        job.note(
            f"{e.get('gpu') or e['cpu']} ({e['cores']} cores), torch {e['torch']}, Triton {e['triton']}, "
            f"CUDA {e['cuda']}, Python {e['python']}, {e['date']}; think time {res['think_s']} s"
        )
    job.table(*table(rows, "first_call_s"), title="First compiled call (s; with two batch sizes: both first calls)")
    title = "Whole compile cell (s): torch.compile + first call(s); ours adds restore/capture/save"
    job.table(*table(rows, "cell_s"), title=title)
    title = "Bytes moved (MB): written cold, loaded (mega), pulled (remote, ours)"
    job.table(*table(rows, "bytes_moved", "MB"), title=title)
    job.table(*counters_table(rows), title="torch's counters")
    for res in results:
        for o in res.get("overhead", []):
            if "error" in o:
                job.note(f"overhead: ERROR {o['error'][-300:]}")
                continue
            job.note(
                f"%%compile_cache on a cell with nothing to restore ({'with' if o['hub'] else 'no'} hub, "
                f"{o['cells']} cells): median {o['median_ms']:.1f} ms, max {o['max_ms']:.1f} ms, "
                f"first cell {o['first_cell_ms']:.1f} ms"
            )
        for t in res.get("transfers", []):
            job.note(
                f"hub transfer {t['payload_bytes'] / 1e6:.0f} MB ({t['chunks']} chunks): push {t['push_s']:.2f} s, "
                f"pull into an empty store {t['pull_s']:.2f} s, restore from hub {t['hub_restore_s']:.2f} s vs from "
                f"the local store {t['local_restore_s']:.2f} s"
            )


def plot(results: list[dict], path: str) -> None:
    """Bars per config: first compiled call and whole cell, each case, log scale (matplotlib; not a dependency)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = _group(merged_rows(results))
    names = list(groups)
    colors = {
        "eager": "#777777",
        "cold": "#d62728",
        "torch_warm": "#ff7f0e",
        "mega": "#bcbd22",
        "torch_remote": "#9467bd",
        "ours_cold": "#e7969c",
        "ours": "#2ca02c",
        "ours_hub": "#17becf",
    }
    fig, axes = plt.subplots(1, 2, figsize=(15, 0.55 * len(names) * len(CASES) / 4 + 2), sharey=True)
    height = 0.8 / len(CASES)
    for ax, metric, title in zip(axes, ("first_call_s", "cell_s"), ("first compiled call", "whole cell")):
        for i, case in enumerate(CASES):
            ys = [j + i * height for j in range(len(names))]
            xs = [groups[n].get(case, {}).get(metric) or 0 for n in names]
            ax.barh(ys, xs, height=height, color=colors[case], label=case)
        ax.set_xscale("log")
        ax.set_xlabel(f"{title} (s, log scale)")
        ax.grid(axis="x", which="both", alpha=0.3)
    axes[0].set_yticks([j + 0.4 - height / 2 for j in range(len(names))], names)
    axes[0].invert_yaxis()
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(CASES), fontsize=9)
    env = results[0]["environment"]
    fig.suptitle(
        f"A restarted kernel: {env.get('gpu') or env['cpu']}, torch {env['torch']} (each case a fresh process)"
    )
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=110)


OPTIONS = [
    option("--suite", choices=sorted(SUITES), default="cpu"),
    option("--only", nargs="*", help="config names of the suite to run (default: all)"),
    option("--think", type=float, default=0.0, help="idle seconds between the definition and compile cells"),
    option("--redis-server", default=shutil.which("redis-server")),
    option("--transfer-mb", type=int, nargs="*", default=[110]),
    option("--parts", nargs="*", default=["cases", "overhead", "transfer"], help="what to measure"),
    option("--plot", help="write a PNG plot here (needs matplotlib)"),
    option("--report", nargs="*", help="print tables (and --plot) of these JSON results; run nothing"),
]


def run(job: Job) -> None:
    args = job.args
    if args.report:
        results = []
        for path in args.report:
            with open(path) as f:
                results.append(json.load(f))
    else:
        configs = [c for c in SUITES[args.suite] if not args.only or c["name"] in args.only]
        work = tempfile.mkdtemp(prefix="jcc-bench-")
        result = {"environment": environment(), "suite": args.suite, "think_s": args.think, "cases": []}
        job.say(json.dumps(result["environment"]))
        try:
            with redis_server(args.redis_server, work) as url:
                populated = os.path.join(work, "populated-cache")
                for i, cfg in enumerate(configs if "cases" in args.parts else []):
                    result["cases"] += run_config(cfg, work, url, args.think, populated if i == 0 else None)
                    job.keep(**result)
                if "overhead" in args.parts:
                    os.makedirs(populated, exist_ok=True)
                    result["overhead"] = overhead(url, work, populated)
                if "transfer" in args.parts and url:
                    result["transfers"] = [transfer(url, mb, work) for mb in args.transfer_mb]
        finally:
            shutil.rmtree(work, ignore_errors=True)
        job.keep(**result)
        results = [result]
    report(job, results)
    if args.plot:
        plot(results, args.plot)
        job.note(f"plot: {args.plot}")
