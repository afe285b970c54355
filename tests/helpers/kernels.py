"""Real Jupyter kernels for tests: start, run cells, restart with a fresh cache dir, read torch's counters; and
whether a process has gone."""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import sys
import tempfile
import time

import psutil
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager

from jupyter_compile_cache.kernels.idle_cpu import QUIET_WAIT_ENV
from jupyter_compile_cache.kernels.kernel_runner import CellOutput, argv_spec, execute
from jupyter_compile_cache.kernels.protocol import LAUNCHER_MODULE, start_record_path

# JCC_TEST_KERNELS=warm (`make test`'s first lane): the tests' plain kernels are kernels of the warm kernel spec
# instead, each forked from a template of its pytest worker (started before the workers: `start_templates`), so
# that a test waits for no `import torch` and every suite checks that a forked kernel answers as a fresh one; each
# start's record (forked, or cold and why) is appended to the file JCC_TEST_KERNELS_LOG names (`start_summary`).
WARM_KERNELS = os.environ.get("JCC_TEST_KERNELS") == "warm"
LAUNCHER_CMD = [sys.executable, "-m", LAUNCHER_MODULE, "-f", "{connection_file}"]
PLAIN_CMD = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]  # this Python's ipykernel
TEMPLATES_ENV = "JCC_TEST_TEMPLATES_STARTED"  # set where `start_templates` started the workers' templates
_spec_folders: dict[str, str] = {}
_template_ready = False
_live_warm: set[Kernel] = set()  # this worker's forked kernels not shut down: they share its cache dir's symlink

COUNTERS_CODE = (
    "import json as _json\n"
    "from torch._dynamo.utils import counters as _c\n"
    "print('COUNTERS=' + _json.dumps({k: dict(v) for k, v in _c.items()}))"
)


class CellResult(CellOutput):
    """A cell's output (the product's own runner collects it), with what tests ask of it."""

    @property
    def usage_error(self) -> str | None:
        """IPython prints a UsageError to stderr (no traceback, no error message) and marks the reply as error."""
        if self.status == "error" and "UsageError: " in self.stderr:
            return self.stderr.split("UsageError: ", 1)[1]
        return None

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def check(self) -> CellResult:
        assert self.status == "ok" and self.error is None, f"cell failed: {self.output}"
        return self


class Kernel:
    def __init__(
        self, env: dict[str, str], kernel_name: str | None = None, plain: bool = False, unset: tuple[str, ...] = ()
    ) -> None:
        """A kernel of this Python; with `kernel_name`, the installed kernel spec of that name (its provisioner);
        `plain`: a plain ipykernel even under JCC_TEST_KERNELS=warm; `unset`: variables of this process it lacks."""
        self.env = {k: v for k, v in {**os.environ, "PYTHONWARNINGS": "ignore", **env}.items() if k not in unset}
        self.kernel_name = kernel_name
        self.plain = plain
        self._start()

    def _start(self) -> None:
        global _template_ready
        # a second kernel alive at once (two collaborators) is a plain one: the symlink is its cache dir's only way
        warm = self.warm = WARM_KERNELS and self.kernel_name is None and not self.plain and not (_live_warm - {self})
        if warm:
            _live_warm.add(self)
            self.env = _warm_env(self.env)
            if not _template_ready:  # the first of this worker's: its template may still be warming up
                _template_ready = _make_template(self.env, start=TEMPLATES_ENV not in os.environ)
        if self.kernel_name is None:
            self.km = KernelManager(kernel_name="argv", kernel_spec_manager=_specs(LAUNCHER_CMD if warm else PLAIN_CMD))
        else:
            self.km = KernelManager(kernel_name=self.kernel_name)
        self.km.start_kernel(env=self.env)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=120)
        if warm:
            _log_start(self.km.connection_file)

    def run(self, code: str, timeout: float = 600) -> CellResult:
        try:
            result = CellResult(**vars(execute(self.kc, code, timeout)))
        except TimeoutError as exc:
            raise TimeoutError(f"cell did not finish in {timeout} s:\n{code}\n{exc}") from None
        # Every miss after a restore says why, in the cell's closing line: held for every cell the tests run.
        if "compile_cache: restored" in result.stdout:
            unexplained = re.search(r"cache hits?, [1-9][0-9]* (?:misses|miss)\b(?! \()", result.stdout)
            assert unexplained is None, f"a restored cell missed without saying why:\n{result.output}"
        return result

    def counters(self) -> dict[str, dict[str, int]]:
        out = self.run(COUNTERS_CODE).check().stdout
        line = [x for x in out.splitlines() if x.startswith("COUNTERS=")][-1]
        return json.loads(line[len("COUNTERS=") :])

    def value(self, expr: str) -> object:
        out = self.run(f"import json as _json\nprint('VALUE=' + _json.dumps({expr}))").check().stdout
        line = [x for x in out.splitlines() if x.startswith("VALUE=")][-1]
        return json.loads(line[len("VALUE=") :])

    def restart(self, env: dict[str, str] | None = None, same_process_env: dict[str, str] | None = None) -> None:
        """A kernel restart; with `env` the new kernel gets those variables (a fresh cache dir, say). With
        `same_process_env`, the same kernel manager restarts it with them (jupyter_client's restart arguments)."""
        if same_process_env is not None:
            self.env.update(same_process_env)
            if self.warm:
                self.env = _warm_env(self.env)
            self.km.restart_kernel(now=True, env=self.env)
            self.kc.wait_for_ready(timeout=120)
        elif env is not None:
            self.env.update(env)
            self.shutdown()
            self._start()  # a new kernel process, as after "Restart kernel", with the new environment
        else:
            self.km.restart_kernel(now=True)
            self.kc.wait_for_ready(timeout=120)

    def shutdown(self, now: bool = True) -> None:
        """Stop the kernel; `now=False`: ask it to shut down, as a frontend does (killed only if it does not exit)."""
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=now)
        _live_warm.discard(self)


def _specs(argv: list[str]) -> KernelSpecManager:
    """A spec manager whose one spec, "argv", runs `argv`; one folder per argv for the whole test run."""
    key = json.dumps(argv)
    if key not in _spec_folders:
        _spec_folders[key] = tempfile.mkdtemp(prefix="jcc-test-spec-")
        atexit.register(shutil.rmtree, _spec_folders[key], ignore_errors=True)
    return argv_spec(argv, _spec_folders[key])


def warm_base(worker: str | None = None) -> str:
    """The folder of one pytest worker's template (its runtime folder and its cache dir's symlink)."""
    worker = worker or os.environ.get("PYTEST_XDIST_WORKER") or "main"
    return os.path.join(tempfile.gettempdir(), f"jcc-warm-test-kernels-{os.getuid()}-{worker}")


def _warm_env(env: dict[str, str], worker: str | None = None) -> dict[str, str]:
    """A template is kept per TORCHINDUCTOR_CACHE_DIR, and each test has its own: every warm kernel of a worker gets
    one path instead, a symlink pointed at the test's dir before each start (a worker's kernels run one after
    another; two workers have a symlink, and so a template, each)."""
    base = warm_base(worker)
    runtime = os.path.join(base, "runtime")
    os.makedirs(runtime, mode=0o700, exist_ok=True)
    env = {**env, "JUPYTER_COMPILE_CACHE_RUNTIME_DIR": runtime}
    target = env.get("TORCHINDUCTOR_CACHE_DIR")
    link = os.path.join(base, "torch-cache")
    if target and target != link:
        os.makedirs(target, exist_ok=True)  # (torch makes a missing one, but not through a dangling symlink)
        fresh = f"{link}.{os.getpid()}"
        os.symlink(os.path.realpath(target), fresh)
        os.replace(fresh, link)
        env["TORCHINDUCTOR_CACHE_DIR"] = link
    return env


def start_templates(workers: list[str]) -> None:
    """Before pytest's workers start: a template for each worker's kernels, started as the Jupyter server extension
    starts one (`--template-only`), warming up at once on the CPU time the tests leave (no wait for a quiet machine:
    the tests' is never quiet); a worker's first warm kernel waits for its template."""
    import shutil
    import subprocess

    end_worker_templates(workers)  # a run cut short left them, or a failed warm-up's mark that holds off a new one
    for worker in workers:
        shutil.rmtree(warm_base(worker), ignore_errors=True)
    envs = [
        _warm_env({
            **os.environ, "PYTHONWARNINGS": "ignore", "PYTEST_XDIST_WORKER": w, QUIET_WAIT_ENV: "0",
            "TORCHINDUCTOR_CACHE_DIR": os.path.join(warm_base(w), "first-cache"),  # until a test's kernel repoints it
        }, w)
        for w in workers
    ]  # fmt: skip
    for env in envs:
        subprocess.run([sys.executable, "-m", LAUNCHER_MODULE, "--template-only"], env=env, check=True)
    os.environ[TEMPLATES_ENV] = "1"  # the workers, started after this, inherit it


def end_worker_templates(workers: list[str]) -> None:
    from helpers.warm_kernels import end_templates

    for worker in workers:
        runtime = os.path.join(warm_base(worker), "runtime")
        if os.path.isdir(runtime):
            end_templates(runtime)


def start_summary(log: str) -> str:
    """How the tests' kernels started: "N forked", and each cold start with why (a template that did not fit)."""
    try:
        with open(log) as f:
            records = [json.loads(line) for line in f if line.strip()]
    except OSError:
        return "test kernels: no start recorded"
    cold = [r for r in records if r.get("how") != "forked"]
    lines = [f"test kernels of the warm spec: {len(records) - len(cold)} of {len(records)} forked from a template"]
    lines += [f"  cold: {r.get('test')}: {r.get('cold')} {r.get('problem') or r.get('detail') or ''}" for r in cold]
    return "\n".join(lines)


def _fitting(env: dict[str, str]) -> bool:
    from jupyter_compile_cache.kernels.launcher import templates
    from jupyter_compile_cache.kernels.template_fit import install_stamp

    folder = env["JUPYTER_COMPILE_CACHE_RUNTIME_DIR"]
    return any(t.mismatch(sys.executable, env, install_stamp()) is None for t in templates(folder))


def _make_template(env: dict[str, str], start: bool = True) -> bool:
    """A template that fits these kernels: started by a first kernel (cold) if none fits (`start`), then waited for."""
    if start and not _fitting(env):
        km = KernelManager(kernel_name="argv", kernel_spec_manager=_specs(LAUNCHER_CMD))
        km.start_kernel(env=env)
        kc = km.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=120)  # its launcher has started the template by then
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    deadline = time.time() + 300
    while not _fitting(env):
        assert time.time() < deadline, "no warm template got ready for the tests' kernels"
        time.sleep(0.2)
    return True


def _log_start(connection_file: str) -> None:
    try:
        with open(start_record_path(connection_file)) as f:
            record = json.load(f)
    except (OSError, ValueError) as exc:
        record = {"how": "unknown", "detail": str(exc)}
    log = os.environ.get("JCC_TEST_KERNELS_LOG")
    if log:
        test = os.environ.get("PYTEST_CURRENT_TEST", "")
        with open(log, "a") as f:
            f.write(json.dumps({"test": test, **record}) + "\n")


def misses(counters: dict[str, dict[str, int]]) -> dict[str, int]:
    """torch's cache-miss counters that must stay at zero after a full restore."""
    return {
        "fxgraph_cache_miss": counters.get("inductor", {}).get("fxgraph_cache_miss", 0),
        "autograd_cache_miss": counters.get("aot_autograd", {}).get("autograd_cache_miss", 0),
        "dynamo_cache_miss": counters.get("dynamo_cache", {}).get("dynamo_cache_miss", 0),
    }


def process_gone(pid: int, timeout: float = 10) -> bool:
    """The process ended (or is a zombie its parent has not reaped yet) within `timeout` seconds."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return True
        time.sleep(0.1)
    return False
