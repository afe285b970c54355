"""A forked kernel's cells one by one after each restart: where the quick start's Restart + Run All goes.

`warm_restart`'s warm kernel (through jupyter_client, ready by `wait_for_ready`), its cells timed from request to
reply one at a time, the third split in two: the model's first eager call (on a GPU: cuBLAS's handle), then the
restored `%%compile_cache` cell, with the restore and the body its own line reports. Cell 2 moves the model to the
device (on a GPU: CUDA's context). Neither CUDA's context nor cuBLAS survives a fork: a template cannot hold them.

    python -m benchmarks restored_cell --device cuda --out benchmarks/results/restored_cell_h100.json
"""

from __future__ import annotations

import os
import re
import statistics
import tempfile
import time

from benchmarks.harness import Job, option
from benchmarks.warm_restart import CALL, MODEL, JupyterClientFrontEnd, environment

CELLS = {
    "import torch, %load_ext": "import torch\n%load_ext jupyter_compile_cache",
    "the model to the device": "DEVICE = <device>\n" + MODEL,
    "its first eager call": "with torch.no_grad():\n    _ = model(x)\nfloat(_.sum())",
    "the restored cell": "%%compile_cache restart-bench\n" + CALL.format(call="torch.compile(model)(x)"),
}
SAID = re.compile(r"restored .*? in ([0-9.]+) s.*?ran in ([0-9.]+) s", re.S)  # the cell's own line


def run_cell(kc, code: str) -> tuple[float, str]:
    said: list[str] = []
    start = time.perf_counter()
    reply = kc.execute_interactive(code, timeout=600, output_hook=lambda m: said.append(m["content"].get("text", "")))
    if reply["content"]["status"] != "ok":
        raise RuntimeError(f"cell failed: {reply['content'].get('ename')}: {reply['content'].get('evalue')}")
    return time.perf_counter() - start, "".join(said)


OPTIONS = [
    option("--device", default="cpu"),
    option("--rounds", type=int, default=8),
    option("--pause", type=float, default=3.0),
]


def run(job: Job) -> None:
    from jupyter_compile_cache.kernels.warm_kernel import install_kernel_spec

    args = job.args
    job.meta |= {"device": args.device, "rounds": args.rounds}
    cells = [code.replace("<device>", repr(args.device)) for code in CELLS.values()]
    rounds: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="restored-cell-") as work:
        os.makedirs(os.path.join(work, "runtime"), mode=0o700)
        install_kernel_spec(prefix=os.path.join(work, "prefix"))
        os.environ["JUPYTER_PATH"] = os.path.join(work, "prefix", "share", "jupyter")
        env = environment("ours_warm", work)
        fe = JupyterClientFrontEnd("python3-compile-cache", env)
        fe.start()
        try:
            for code in cells:  # the first run: compiles and saves the bundle; the template warms up meanwhile
                run_cell(fe.kc, code)
            deadline = time.perf_counter() + 300
            while not fe.template_ready() and time.perf_counter() < deadline:
                time.sleep(0.5)
            for i in range(args.rounds):
                time.sleep(args.pause)
                fe.restart()
                timed = [run_cell(fe.kc, code) for code in cells]
                said = SAID.search(timed[-1][1])
                row = dict(zip(CELLS, (seconds for seconds, _ in timed)))
                row |= {"its restore": float(said.group(1)), "its body": float(said.group(2))} if said else {}
                rounds.append(row)
                job.say(f"round {i + 1}: " + ", ".join(f"{k} {v:.3f}" for k, v in row.items()))
                job.keep(rounds=rounds)
        finally:
            fe.stop()
    names = list(rounds[0])
    rows = [
        [name, f"{statistics.median(r[name] for r in rounds):.3f}", f"{min(r[name] for r in rounds):.3f}-"
         f"{max(r[name] for r in rounds):.3f}"]
        for name in names
    ]  # fmt: skip
    job.table(["after a restart (s)", "median", "range"], rows, title=f"{args.rounds} restarts", align="lrr")
