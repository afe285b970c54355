"""The test suite (or a part of it) on another torch: one environment per torch version, one result file each, for
the README's support table (`make docs` renders it).

    python -m venv /tmp/torch2.10 && /tmp/torch2.10/bin/pip install torch==2.10.0 -e ".[test]"
    python -m benchmarks torch_versions --python /tmp/torch2.10/bin/python --suite restore \\
        --out benchmarks/results/torch_versions/2.10.0_cpu.json

`--suite all` is the README's test command without ruff, pyright and the notebooks; `restore` the restore tests
CI's second lane runs (kernel restore, precompile semantics, the model zoo); `gpu` the two of them that run on a GPU
(`JCC_TEST_DEVICE=cuda`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

from benchmarks.harness import Job, option

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUITES = {
    "all": ["tests"],
    "restore": [
        "tests/end_to_end/test_kernel_restore.py",
        "tests/torch_adapter/test_precompile_semantics.py",
        "tests/end_to_end/test_model_zoo.py",
    ],
    # on a GPU (JCC_TEST_DEVICE=cuda): the edit matrix, the model zoo, cold and restored, and one function at two
    # input sizes in two cells
    "gpu": [
        "tests/torch_adapter/test_precompile_semantics.py",
        "tests/end_to_end/test_model_zoo.py",
        "tests/end_to_end/test_kernel_restore.py::test_a_later_cells_input_size_restores_without_a_new_trace",
    ],
}
ABOUT = (
    "import json, os, platform, torch; from jupyter_compile_cache.torch_adapter import precompile; "
    "print(json.dumps({'torch': torch.__version__, 'python': platform.python_version(), 'cores': os.cpu_count(), "
    "'cpu': platform.processor() or platform.machine(), "
    "'gpu': torch.cuda.get_device_name() if torch.cuda.is_available() else None, "
    "'precompile': precompile.PrecompileGuard.available()}))"
)


OPTIONS = [
    option("--python", default=sys.executable, help="the environment's python (torch and the package)"),
    option("--suite", choices=sorted(SUITES), default="restore"),
    option("--rerun", metavar="JSON", help="run only the tests that failed in this earlier result"),
    option("--out", required=True, metavar="FILE.json"),
]


def run(job: Job) -> int:
    args = job.args
    tests = SUITES[args.suite]
    if args.rerun:
        with open(args.rerun, encoding="utf-8") as f:
            earlier = json.load(f)
        # junit names a test by its module's dotted path: tests.core.test_x::test_y
        tests = [f"{c.split('::')[0].replace('.', '/')}.py::{c.split('::', 1)[1]}" for c in earlier["failures"]]
        args.suite = "rerun"
    about = json.loads(subprocess.run([args.python, "-c", ABOUT], capture_output=True, text=True, check=True).stdout)
    start = time.time()
    with tempfile.TemporaryDirectory() as work:
        report = os.path.join(work, "junit.xml")
        cmd = [args.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}", *tests]
        proc = subprocess.run(cmd, cwd=REPO)
        root = ET.parse(report).getroot()
    suites = [root] if root.tag == "testsuite" else list(root)
    count = {key: sum(int(s.get(key, 0)) for s in suites) for key in ("tests", "failures", "errors", "skipped")}
    failed = [
        f"{case.get('classname')}::{case.get('name')}"
        for s in suites
        for case in s.iter("testcase")
        if case.find("failure") is not None or case.find("error") is not None
    ]
    job.meta.update(about)  # the environment that ran the tests, not the harness's
    result = {
        "suite": args.suite,
        "tests": len(tests) if args.rerun else None,
        "passed": count["tests"] - count["failures"] - count["errors"] - count["skipped"],
        "failed": count["failures"] + count["errors"],
        "skipped": count["skipped"],
        "failures": failed,
        "seconds": round(time.time() - start),
        "fallback": None
        if about["precompile"]
        else "FX graph, AOTAutograd and kernels, with Dynamo tracing again (no precompile before torch 2.11)",
    }
    job.keep(**result)
    job.note(f"torch {about['torch']}: {result['passed']} passed, {result['failed']} failed in {result['seconds']} s")
    return proc.returncode
