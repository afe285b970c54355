"""How long a warm kernel template takes to be ready, on a quiet machine and with CPUs kept busy, side by side.

Each round starts a template as the Jupyter server does (`launcher --template-only`) in a runtime folder of its own,
with N processes spinning at the normal priority (a notebook's training run on every core), and times it from the
start to its info file (ready to fork kernels), with the steps its `.warming` file showed on the way. `--code DIR`
runs the same with the package of another checkout (a `git worktree` of an older commit), so before and after print
in one table.

    python -m benchmarks template_warm_up --busy 0,2 --code before=/tmp/before --out results.json
"""

from __future__ import annotations

import glob
import os
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks.harness import CODE_OPTION, Job, checkouts, option


def ready_after(code_dir: str, busy: int, limit: float) -> tuple[float | None, list[tuple[float, str]]]:
    """Seconds until a template started with BUSY spinning processes is ready (None: not within LIMIT), and the
    steps it showed, each with when it began."""
    from jupyter_compile_cache.kernels.protocol import LAUNCHER_MODULE, Warming, is_info_file, warming_path
    from jupyter_compile_cache.kernels.runtime_dir import RUNTIME_DIR_ENV

    spinning = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    with tempfile.TemporaryDirectory() as work:
        runtime = os.path.join(work, "runtime")
        os.mkdir(runtime, 0o700)
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join(p for p in (code_dir, os.environ.get("PYTHONPATH", "")) if p),
            JUPYTER_COMPILE_CACHE_DIR=os.path.join(work, "store"),
            TORCHINDUCTOR_CACHE_DIR=os.path.join(work, "cache"),
            **{RUNTIME_DIR_ENV: runtime},
        )
        start, steps = time.monotonic(), []
        try:
            subprocess.run([sys.executable, "-m", LAUNCHER_MODULE, "--template-only"], env=env, check=True)
            while time.monotonic() - start < limit:
                if any(is_info_file(name) for name in os.listdir(runtime)):
                    return time.monotonic() - start, steps
                found = glob.glob(warming_path(runtime, "*"))
                warming = Warming.read(found[0]) if found else None
                if warming is not None and (not steps or steps[-1][1] != warming.step.value):
                    steps.append((round(time.monotonic() - start, 1), warming.step.value))
                time.sleep(0.2)
            return None, steps
        finally:
            for process in spinning:
                process.kill()
            # the template: started by the launcher for this process (its holder), it would stay for an hour
            subprocess.run(["pkill", "-f", f"kernels.template {os.getpid()} "], check=False)


OPTIONS = [
    CODE_OPTION,
    option("--busy", default="0,2", help="how many processes spin, one run each (comma-separated)"),
    option("--rounds", type=int, default=1),
    option("--limit", type=float, default=180.0, help="seconds to wait for a template at most"),
]


def run(job: Job) -> None:
    args = job.args
    codes = checkouts(args.code)
    counts = [int(n) for n in args.busy.split(",")]
    results: dict[str, dict[int, list]] = {label: {} for label in codes}
    for busy in counts:
        for label, code_dir in codes.items():
            for i in range(args.rounds):
                seconds, steps = ready_after(code_dir, busy, args.limit)
                results[label].setdefault(busy, []).append({"seconds": seconds, "steps": steps})
                shown = f"{seconds:.1f} s" if seconds is not None else f"not within {args.limit:.0f} s"
                job.say(f"{label:>12}  {busy} busy  round {i + 1}: ready after {shown}; steps {steps}")
                job.keep(codes=codes, results={k: {str(b): r for b, r in v.items()} for k, v in results.items()})

    def median(runs: list) -> str:
        done = [r["seconds"] for r in runs if r["seconds"] is not None]
        return f"{statistics.median(done):.1f}" if len(done) == len(runs) else f"> {args.limit:.0f}"

    rows = [
        [f"{busy} of {os.cpu_count()} CPUs busy"] + [median(results[label][busy]) for label in codes] for busy in counts
    ]
    title = f"a template ready after (s), median of {args.rounds}"
    job.table(["machine", *codes], rows, title=title, align="l" + "r" * len(codes))
