"""Large bundles against the machine's own limits, in one run: save, push, pull and restore of 10 MB, 100 MB and 1 GB
bundles (incompressible kernels, and compressible ones), each step in a fresh process (its time and peak memory),
beside a plain copy of the same files, dd with and without fsync, sha256 throughput and redis-benchmark SET/GET of
the hub's chunk size.

The cache dir is laid out as Triton's (`triton/0/<hash>/<kernel>.cubin`, 25 MB files for the 1 GB case), as a
max-autotune bundle of a real model is. Each step is what a user runs: `jupyter_compile_cache.save(NAME)`, the CLI's
`hub push` and `hub pull` (a fresh store, a real redis-server on loopback, a team secret), and `with cell(NAME)`
restoring into an empty cache dir (the restore, then the whole cell), then again into that cache dir, as a restarted
kernel does. Every step starts after a `sync`, so it does not pay for the disk still writing out the step before;
each case runs `--repeat` times (fresh stores, a flushed Redis) and the table shows the median, with the fastest and
slowest beside it in the JSON.

  python -m benchmarks large_bundles --out benchmarks/results/large_bundles_cpu.json [--sizes 10,100,1000]
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from benchmarks.bench import redis_server  # a loopback redis-server, as the other benchmarks use
from benchmarks.harness import Job, option

HERE = os.path.dirname(os.path.abspath(__file__))

SECRET = "large-bundles-benchmark"

# One step in a fresh process; prints a JSON line: the step's seconds (measured around the call, after torch, its
# compiler and redis-py are imported, as in a notebook whose cells compile) and the process's peak RSS (torch's
# share included).
CHILD = r"""
import json, resource, sys, time
step, name, url = sys.argv[1], sys.argv[2], sys.argv[3]
import redis, torch, torch._dynamo  # imported by any cell that compiles: the step's time is its own work
import jupyter_compile_cache as jcc
from jupyter_compile_cache.frontends import cli
from jupyter_compile_cache.core.options import CellOptions
import os
go = os.environ.get("BENCH_GO")
if go:  # several at once: start together, after every process has imported
    print("READY", flush=True)
    while not os.path.exists(go):
        time.sleep(0.005)
out = {"imports_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
start = time.perf_counter()
if step == "save":
    jcc.save(name, quiet=True)
elif step in ("push", "pull"):
    rc = cli.main(["hub", step, name, "--hub", url])
    assert rc == 0, rc
elif step == "restore":
    result = jcc.get_session().restore(name)
    assert result.source is not None, result.skipped
    out["restore_s"] = time.perf_counter() - start
    start = time.perf_counter()
    with jcc.cell(name, CellOptions(save=False, quiet=True)):
        pass
    out["cell_after_restore_s"] = time.perf_counter() - start
    start = None
if start is not None:
    out["seconds"] = time.perf_counter() - start
out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print("STEP", json.dumps(out))
"""


def make_cache(root: str, total_mb: int, compressible: bool) -> int:
    """Kernels in Triton's layout adding up to `total_mb`; returns the bytes written."""
    per_file = min(25, max(1, total_mb // 40)) << 20
    files = max(1, (total_mb << 20) // per_file)
    block = os.urandom(1 << 16)
    written = 0
    for i in range(files):
        folder = os.path.join(root, "triton", "0", hashlib.sha256(str(i).encode()).hexdigest()[:32])
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"triton_k{i}.cubin"), "wb") as f:
            if compressible:  # repeating text-like content, as PTX or source files are
                f.write((block[:4096] * (per_file // 4096 + 1))[:per_file])
            else:
                f.write(os.urandom(per_file))
        written += per_file
    return written


def step(name: str, what: str, env: dict[str, str], url: str) -> dict:
    os.sync()  # the step does not pay for the disk still writing out the step before
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, what, name, url],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=900,
    )
    wall = time.perf_counter() - start
    line = next((x for x in proc.stdout.splitlines() if x.startswith("STEP ")), None)
    if proc.returncode != 0 or line is None:
        return {"error": (proc.stderr or proc.stdout)[-1500:], "process_s": wall}
    return {**json.loads(line[5:]), "process_s": wall, "said": proc.stderr.strip().splitlines()[-3:]}


def concurrent_pulls(name: str, n: int, case_dir: str, env: dict[str, str], url: str) -> dict:
    """n collaborators pulling the same bundle at once (each a fresh process and store): time each, and the wall
    time from the start signal to the last one done."""
    go = os.path.join(case_dir, "go")
    procs = []
    for i in range(n):
        store = os.path.join(case_dir, f"store_pull{i}")
        child_env = {**os.environ, **env, "JUPYTER_COMPILE_CACHE_DIR": store, "BENCH_GO": go}
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", CHILD, "pull", name, url],
                env=child_env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    for proc in procs:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "READY":
            raise RuntimeError(proc.stderr.read() if proc.stderr else "a pull did not start")
    start = time.perf_counter()
    open(go, "w").close()
    each = []
    for proc in procs:
        out, err = proc.communicate(timeout=900)
        line = next((x for x in out.splitlines() if x.startswith("STEP ")), None)
        each.append(json.loads(line[5:])["seconds"] if proc.returncode == 0 and line else None)
    return {"n": n, "each_s": each, "wall_s": time.perf_counter() - start}


def floors(src: str, nbytes: int, work: str, url: str | None) -> dict:
    """The machine's limits for the same bytes, in the same run."""
    out: dict = {}
    dest = os.path.join(work, "copy")
    os.sync()
    start = time.perf_counter()
    shutil.copytree(src, dest)
    out["copy_s"] = time.perf_counter() - start
    shutil.rmtree(dest)
    mb = max(1, nbytes >> 20)
    # dd_kept_s: a second file while the first stays, so the page cache needs memory no file just gave back (on a
    # virtual machine, memory new to the guest can cost several times what recycled memory does)
    for label, extra, keep in (
        ("dd_s", [], False),
        ("dd_fsync_s", ["conv=fdatasync"], False),
        ("dd_kept_first_s", [], True),
        ("dd_kept_s", [], False),
    ):
        os.sync()
        target = os.path.join(work, "dd-kept.bin" if keep else "dd.bin")
        start = time.perf_counter()
        subprocess.run(["dd", "if=/dev/zero", f"of={target}", "bs=1M", f"count={mb}", *extra], capture_output=True)
        out[label] = time.perf_counter() - start
        if not keep:
            os.remove(target)
    os.remove(os.path.join(work, "dd-kept.bin"))
    start = time.perf_counter()
    for folder, _, names in os.walk(src):
        for n in names:
            with open(os.path.join(folder, n), "rb") as f:
                hashlib.file_digest(f, "sha256")
    out["sha256_read_s"] = time.perf_counter() - start
    if url and shutil.which("redis-benchmark"):
        port = url.rsplit(":", 1)[1].split("/")[0]
        proc = subprocess.run(
            ["redis-benchmark", "-p", port, "-t", "set,get", "-d", str(4 << 20), "-n", "100", "-c", "1", "-q"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        # one client, as one pull is: requests per second of one 4 MB chunk, as MB/s
        for line in proc.stdout.replace("\r", "\n").splitlines():
            op, _, rest = line.partition(":")
            if "requests per second" in rest and op.strip() in ("SET", "GET"):
                out[f"redis_{op.strip().lower()}_mb_s"] = float(rest.split()[0]) * 4
    return out


def save_push_pull_restore(name: str, cache: str, run_dir: str, url: str, base: dict, between=None) -> dict:
    """The four steps a user runs, each in a fresh process: save from CACHE into one store, push it, pull it into
    another store, restore from there into an empty cache dir, then again into the same cache dir (a restarted kernel).
    `between(empty_cache)` runs after the pull."""
    store_a, store_b = os.path.join(run_dir, "store_a"), os.path.join(run_dir, "store_b")
    run: dict = {}
    run["save"] = step(
        name, "save", {**base, "TORCHINDUCTOR_CACHE_DIR": cache, "JUPYTER_COMPILE_CACHE_DIR": store_a}, ""
    )
    run["push"] = step(
        name, "push", {**base, "TORCHINDUCTOR_CACHE_DIR": cache, "JUPYTER_COMPILE_CACHE_DIR": store_a}, url
    )
    empty = os.path.join(run_dir, "cache_pull")
    run["pull"] = step(
        name, "pull", {**base, "TORCHINDUCTOR_CACHE_DIR": empty, "JUPYTER_COMPILE_CACHE_DIR": store_b}, url
    )
    if between is not None:
        between(empty)
    restored = {
        **base,
        "TORCHINDUCTOR_CACHE_DIR": os.path.join(run_dir, "cache_restored"),
        "JUPYTER_COMPILE_CACHE_DIR": store_b,
    }
    run["restore"] = step(name, "restore", restored, "")
    run["restore_again"] = step(name, "restore", restored, "")  # a restarted kernel: the restored files are there
    return run


def run_case(total_mb: int, compressible: bool, url: str, work: str, repeat: int, pulls_at_once: int = 0) -> dict:
    import redis

    kind = "compressible" if compressible else "incompressible"
    name = f"big-{total_mb}mb-{kind}"
    case_dir = os.path.join(work, name)
    cache = os.path.join(case_dir, "cache")
    nbytes = make_cache(cache, total_mb, compressible)
    row: dict = {"size_mb": total_mb, "kind": kind, "bytes": nbytes, "runs": []}
    base = {"JUPYTER_COMPILE_CACHE_SECRET": SECRET, "JUPYTER_COMPILE_CACHE_PREWARM": "0"}
    for i in range(repeat):
        redis.Redis.from_url(url).flushall()
        run_dir = os.path.join(case_dir, f"run{i}")
        store_a = os.path.join(run_dir, "store_a")
        between = None
        if pulls_at_once and i == 0:

            def between(empty: str, run_dir: str = run_dir) -> None:
                row["concurrent_pulls"] = concurrent_pulls(
                    name, pulls_at_once, run_dir, {**base, "TORCHINDUCTOR_CACHE_DIR": empty}, url
                )

        run = save_push_pull_restore(name, cache, run_dir, url, base, between)
        with contextlib.suppress(OSError):
            run["stored_bytes"] = sum(
                os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(store_a) for f in fs if f.endswith(".pack")
            )
        row["runs"].append(run)
        shutil.rmtree(run_dir, ignore_errors=True)
    for what in ("save", "push", "pull", "restore", "restore_again"):
        row[what] = _median_run([run[what] for run in row["runs"]])
    row["floors"] = floors(cache, nbytes, case_dir, url)
    print(f"{name}: " + ", ".join(f"{k} {_secs(row[k])}" for k in ("save", "push", "pull", "restore")), flush=True)
    shutil.rmtree(case_dir, ignore_errors=True)
    return row


def _median_run(results: list[dict]) -> dict:
    """The run whose time is the median (an even count: the slower middle one), with the spread beside it."""
    ok = [r for r in results if "error" not in r]
    if not ok:
        return results[0]
    key = "seconds" if "seconds" in ok[0] else "restore_s"
    ordered = sorted(ok, key=lambda r: r[key])
    return {**ordered[len(ordered) // 2], "min_s": ordered[0][key], "max_s": ordered[-1][key], "runs": len(ok)}


def _secs(r: dict) -> str:
    if "error" in r:
        return "FAILED"
    return f"{r.get('seconds', r.get('restore_s', 0.0)):.2f} s"


TARGETS_1GB = {"save": 3.0, "push": 2.5, "pull": 2.5, "restore": 1.5}


def table(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    headers = [
        "bundle", "save", "push", "pull", "restore (+ cell after it)", "after a restart", "peak RSS, max of steps",
        "copy", "dd", "dd+fsync", "dd, new memory", "sha256", "redis SET / GET, 1 client",
    ]  # fmt: skip
    lines = []
    for r in rows:
        f = r["floors"]
        steps = [r[k] for k in ("save", "push", "pull", "restore", "restore_again") if "peak_rss_mb" in r[k]]
        rss = max((s["peak_rss_mb"] for s in steps), default=0.0)
        own = max((s["peak_rss_mb"] - s["imports_rss_mb"] for s in steps), default=0.0)
        rest, again = (
            "FAILED" if "error" in x else f"{x['restore_s']:.2f} s (+{x['cell_after_restore_s']:.2f} s)"
            for x in (r["restore"], r["restore_again"])
        )
        wire = (
            f"{f['redis_set_mb_s']:.0f} / {f['redis_get_mb_s']:.0f} MB/s" if "redis_get_mb_s" in f else "not measured"
        )
        lines.append([
            f"{r['size_mb']} MB {r['kind']}", _secs(r["save"]), _secs(r["push"]), _secs(r["pull"]), rest, again,
            f"{rss:.0f} MB ({own:.0f} MB over the imports)", f"{f['copy_s']:.2f} s", f"{f['dd_s']:.2f} s",
            f"{f['dd_fsync_s']:.2f} s", f"{f['dd_kept_s']:.2f} s", f"{f['sha256_read_s']:.2f} s", wire,
        ])  # fmt: skip
    targets = [f"<= {TARGETS_1GB[k]:.1f} s" for k in ("save", "push", "pull", "restore")]
    lines.append(["target, 1 GB", *targets, "", "<= 500 MB", *[""] * 6])
    return headers, lines


OPTIONS = [
    option("--sizes", default="10,100,1000", help="bundle sizes in MB, comma-separated"),
    option(
        "--pulls-at-once", type=int, default=4, help="collaborators pulling the largest incompressible bundle at once"
    ),
    option("--repeat", type=int, default=3, help="runs of each case; the table shows the median"),
]


def run(job: Job) -> None:
    args = job.args
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="large-bundles-") as work:
        with redis_server(shutil.which("redis-server"), work) as url:
            if url is None:
                raise SystemExit("needs redis-server on PATH (make setup installs it)")
            for size in sizes:
                for compressible in (False, True):
                    at_once = args.pulls_at_once if size == max(sizes) and not compressible else 0
                    rows.append(run_case(size, compressible, url, work, args.repeat, at_once))
                    job.keep(rows=rows)
    title = (
        f"Seconds for each step (a fresh process each, after its imports; the median of {args.repeat} runs), "
        "and the machine's floors for the same bytes in the same run."
    )
    job.table(*table(rows), title=title)
    for r in rows:
        if r.get("concurrent_pulls"):
            c = r["concurrent_pulls"]
            each = ", ".join("failed" if t is None else f"{t:.2f} s" for t in c["each_s"])
            job.note(
                f"{c['n']} pulls of the {r['size_mb']} MB {r['kind']} bundle at once, one redis-server: each {each}; "
                f"all done {c['wall_s']:.2f} s after the start ({r['pull'].get('seconds', 0):.2f} s alone)"
            )
