"""A NEW kernel's first compiled cell, and what the warm kernel's templates cost: side by side in one run.

Each row is a new kernel (not a restart) running a three-cell notebook (import torch [and %load_ext]; define a
model; its first call), timed from the start request to the last cell's reply, the median of `--rounds` kernels:

| variant | kernel | third cell |
|---|---|---|
| `plain_eager` | the plain kernel | the eager call: the baseline |
| `torch_warm` | the plain kernel | `torch.compile`, torch's cache dir already warm |
| `ours_plain` | the plain kernel | `%%compile_cache`, restored from the store |
| `ours_warm` | the warm kernel spec through jupyter_client (a template ready) | `%%compile_cache`, restored |
| `ours_raw` | the same spec's argv launched raw, as VS Code does | `%%compile_cache`, restored |

`--misfit N`: N pairs, alternating, of new kernels on an empty cache dir of their own, so the warm spec's kernel
fits no template and starts cold while a template warms up beside it (`ours_misfit`), against a plain kernel
(`ours_new_dir`); each restores the bundle into its empty cache dir. The warm spec must never be the slower.

Then, on the warm spec: two restarts 2 s apart (how each started), `--at-once` kernels started at the same moment
(each forked? each cell's answer equal to eager's?), and the memory of 4 forked kernels against 4 plain ones that
imported the same modules (PSS, the template counted once).

    python -m benchmarks kernel_start --out benchmarks/results/kernel_start_cpu.json
    python -m benchmarks kernel_start --device cuda --at-once 8 --out benchmarks/results/kernel_start_h100.json
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import threading
import time

from benchmarks.harness import Job, option
from benchmarks.warm_restart import (
    CALL,
    MODEL,
    JupyterClientFrontEnd,
    RawFrontEnd,
    environment,
    run_cell,
    template_ready,
)

HERE = os.path.dirname(os.path.abspath(__file__))

WARM = "python3-compile-cache"
LOAD = "import torch\n%load_ext jupyter_compile_cache"
OURS = "%%compile_cache start-bench --quiet\n" + CALL.format(call="torch.compile(model)(x)")
VARIANTS = {
    "plain_eager": (None, "import torch", CALL.format(call="model(x)")),
    "torch_warm": (None, "import torch", CALL.format(call="torch.compile(model)(x)")),
    "ours_plain": (None, LOAD, OURS),
    "ours_warm": (WARM, LOAD, OURS),
    "ours_raw": (WARM, LOAD, OURS),
}
START_RECORD = (
    "from ipykernel.connect import get_connection_file as _file\n"
    "from jupyter_compile_cache.kernels.protocol import start_record_path as _path\n"
    "print(open(_path(_file())).read())"
)


MISFIT = {"ours_misfit": WARM, "ours_new_dir": None}  # kernel spec; each kernel gets an empty cache dir


def variant_env(work: str, variant: str) -> dict[str, str]:
    # ours_* share one store and cache dir (one template fits them all); torch_warm and eager have their own.
    env = environment("ours" if variant.startswith("ours") else variant, work)
    if variant in MISFIT:
        env["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="cache-new-", dir=work)
    return env


def front_end(variant: str, work: str):
    kernel_name = MISFIT[variant] if variant in MISFIT else VARIANTS[variant][0]
    env = variant_env(work, variant)
    return RawFrontEnd(kernel_name, env, work) if variant == "ours_raw" else JupyterClientFrontEnd(kernel_name, env)


def notebook(variant: str, device: str) -> list[str]:
    _, first, third = VARIANTS["ours_plain" if variant in MISFIT else variant]
    return [first, f"DEVICE = {device!r}\n" + MODEL, third]


def new_kernel(variant: str, device: str, work: str) -> dict:
    """Start a kernel, run the notebook, stop it: seconds from the start request to the last cell's reply."""
    fe = front_end(variant, work)
    start = time.perf_counter()
    fe.start()
    ready = time.perf_counter() - start
    cells = [run_cell(fe.kc, c) for c in notebook(variant, device)]
    total = time.perf_counter() - start
    how = None
    if (MISFIT[variant] if variant in MISFIT else VARIANTS[variant][0]) is not None:
        how = json.loads(_output(fe.kc, START_RECORD))["how"]
    fe.stop()
    return {"total_s": total, "ready_s": ready, "cells_s": cells, "how": how}


def _output(kc, code: str) -> str:
    out: list[str] = []
    kc.execute_interactive(code, output_hook=lambda m: out.append(m["content"].get("text", "")), timeout=60)
    return "".join(out)


def wait_for_template(work: str, variant: str, timeout: float = 300) -> float:
    start = time.perf_counter()
    env = variant_env(work, variant)
    while not template_ready(env):
        if time.perf_counter() - start > timeout:
            raise RuntimeError("no template got ready")
        time.sleep(0.1)
    return time.perf_counter() - start


def restarts_apart(device: str, work: str, gap: float) -> list[str]:
    """Two restarts `gap` seconds apart on the warm spec: how each new kernel started."""
    fe = front_end("ours_warm", work)
    fe.start()
    hows = []
    for _ in range(2):
        time.sleep(gap)
        fe.restart()
        hows.append(json.loads(_output(fe.kc, START_RECORD))["how"])
    fe.stop()
    return hows


def at_once(n: int, device: str, work: str) -> dict:
    """N kernels of the warm spec started together, each running the notebook; each forked? each right?"""
    check = (
        "%%compile_cache start-bench --quiet\nwith torch.no_grad():\n"
        "    same = bool(torch.allclose(torch.compile(model)(x), model(x), rtol=1e-4, atol=1e-5))\nprint(same)"
    )
    results: list[dict] = [{} for _ in range(n)]

    def one(i: int) -> None:
        fe = front_end("ours_warm", work)
        start = time.perf_counter()
        fe.start()
        for cell in notebook("ours_warm", device)[:2]:
            run_cell(fe.kc, cell)
        right = _output(fe.kc, check).strip().endswith("True")
        results[i] = {
            "total_s": time.perf_counter() - start,
            "how": json.loads(_output(fe.kc, START_RECORD))["how"],
            "right": right,
        }
        fe.stop()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    wall = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"kernels": results, "wall_s": time.perf_counter() - wall}


def misfit_pairs(n: int, device: str, work: str) -> dict:
    """N pairs, alternating which goes first: a kernel of the warm spec that fits no template (cold, a template
    warming up beside it) and a plain kernel, each on an empty cache dir restoring the same bundle."""
    rounds: dict[str, list[dict]] = {name: [] for name in MISFIT}
    for i in range(n):
        for name in list(MISFIT) if i % 2 == 0 else list(MISFIT)[::-1]:
            r = new_kernel(name, device, work)
            rounds[name].append(r)
            cells = ", ".join(f"{s:.2f}" for s in r["cells_s"])
            print(f"  {name}: {r['total_s']:.2f} s (ready {r['ready_s']:.2f}; cells {cells}; {r['how'] or 'plain'})")
    return {
        name: {"rounds": rs, "median_s": statistics.median(r["total_s"] for r in rs)} for name, rs in rounds.items()
    }


def pss(pid: int) -> int:
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    return 0


def memory(device: str, work: str, n: int = 4) -> dict:
    """PSS of N forked kernels (+ their template once) against N plain kernels that imported the same modules."""
    import psutil

    from jupyter_compile_cache.kernels.launcher import templates

    cell = "import torch, torch._inductor.compile_fx\nx = torch.randn(256, 256)\nfloat((x @ x).sum())"
    out = {}
    for variant in ("plain_eager", "ours_warm"):
        fes = [front_end(variant, work) for _ in range(n)]
        pids = []
        for fe in fes:
            fe.start()
            run_cell(fe.kc, cell)
            pids.append(int(_output(fe.kc, "print(__import__('os').getpid())")))
        time.sleep(1)
        total = sum(pss(pid) for pid in pids)
        if variant == "ours_warm":
            total += sum(pss(t.pid) for t in templates(variant_env(work, variant)["JUPYTER_COMPILE_CACHE_RUNTIME_DIR"]))
        out[variant] = {"pss_bytes": total, "rss_bytes": sum(psutil.Process(p).memory_info().rss for p in pids)}
        for fe in fes:
            fe.stop()
    return out


OPTIONS = [
    option("--device", default="cpu"),
    option("--rounds", type=int, default=3),
    option("--at-once", type=int, default=4),
    option("--only", nargs="*", default=list(VARIANTS)),
    option("--misfit", type=int, default=0, metavar="N", help="N pairs of ours_misfit / ours_new_dir"),
    option("--no-extras", action="store_true", help="skip the restarts, at-once and memory parts"),
]


def run(job: Job) -> None:
    args = job.args
    job.meta |= {"device": args.device, "rounds": args.rounds, "misfit_pairs": args.misfit}
    from jupyter_compile_cache.kernels.warm_kernel import install_kernel_spec

    results: dict = {"variants": {}}
    with tempfile.TemporaryDirectory(prefix="kernel-start-") as work:
        os.makedirs(os.path.join(work, "runtime"), mode=0o700)
        install_kernel_spec(prefix=os.path.join(work, "prefix"))
        os.environ["JUPYTER_PATH"] = os.path.join(work, "prefix", "share", "jupyter")
        for variant in args.only:  # fill the caches and the store; the warm spec's first start makes its template
            first = new_kernel(variant, args.device, work)
            job.say(f"{variant}: first kernel {first['total_s']:.2f} s ({first['how'] or 'plain'})")
            if VARIANTS[variant][0] is not None:
                job.say(f"  template ready {wait_for_template(work, variant):.1f} s later")
        for variant in args.only:
            rounds = [new_kernel(variant, args.device, work) for _ in range(args.rounds)]
            for r in rounds:
                cells = ", ".join(f"{s:.2f}" for s in r["cells_s"])
                job.say(f"  {variant}: {r['total_s']:.2f} s (ready {r['ready_s']:.2f}; cells {cells}; {r['how']})")
            results["variants"][variant] = {
                "rounds": rounds,
                "median_s": statistics.median(r["total_s"] for r in rounds),
            }
            job.keep(**results)
        if args.misfit:
            if "ours_plain" not in args.only:  # the bundle both restore
                new_kernel("ours_plain", args.device, work)
            results["misfit"] = misfit_pairs(args.misfit, args.device, work)
        if not args.no_extras:
            results["restarts_2s_apart"] = restarts_apart(args.device, work, 2.0)
            results["at_once"] = at_once(args.at_once, args.device, work)
            results["memory"] = memory(args.device, work)
    job.keep(**results)

    v = results["variants"]
    base, warm = v.get("plain_eager", {}).get("median_s"), v.get("torch_warm", {}).get("median_s")
    headers = ["variant", "new kernel to the compiled cell's end (median s)", "/ plain eager", "/ torch warm"]
    rows = [
        [
            name,
            f"{r['median_s']:.2f}",
            f"{r['median_s'] / base:.2f}x" if base else "-",
            f"{r['median_s'] / warm:.2f}x" if warm else "-",
        ]
        for name, r in v.items()
    ]
    job.table(headers, rows, align="lrrr")
    if "misfit" in results:
        m = results["misfit"]
        headers = ["empty cache dir, the bundle restored", "kernels", "median s", "ready (median s)", "restored cell"]
        rows = [
            [
                name,
                len(r["rounds"]),
                f"{r['median_s']:.2f}",
                f"{statistics.median(x['ready_s'] for x in r['rounds']):.2f}",
                f"{statistics.median(x['cells_s'][-1] for x in r['rounds']):.2f}",
            ]
            for name, r in m.items()
        ]
        job.table(headers, rows, align="lrrrr")
        job.note(f"ours_misfit / ours_new_dir: {m['ours_misfit']['median_s'] / m['ours_new_dir']['median_s']:.2f}x")
    if args.no_extras:
        return
    job.note(f"two restarts 2 s apart: {results['restarts_2s_apart']}")
    once = results["at_once"]
    hows = [k["how"] for k in once["kernels"]]
    rights = [k["right"] for k in once["kernels"]]
    slowest = max(k["total_s"] for k in once["kernels"])
    job.note(f"{len(hows)} kernels at once: {hows.count('forked')} forked, {sum(rights)} right; "
             f"slowest {slowest:.2f} s, all done in {once['wall_s']:.2f} s")  # fmt: skip
    mem = results["memory"]
    rows = [[name, f"{m['pss_bytes'] / 2**20:.0f} MiB", f"{m['rss_bytes'] / 2**20:.0f} MiB"] for name, m in mem.items()]
    job.table(["4 kernels", "PSS (template counted once)", "RSS"], rows, align="lrr")
