"""Writes the example notebooks from the cells below; `--execute` runs them in order and stores outputs.

The notebooks are the source of truth for readers; this script keeps them short, consistent and re-runnable:
    python example_notebooks/make_notebooks.py --execute     # the CPU notebooks 01-04 (CI runs them under nbval)
    python example_notebooks/make_notebooks.py --gpu         # 05, on a machine with a CUDA GPU

A cell tagged `restart-kernel` restarts the kernel before it runs, as a user would from the Kernel menu.
"""

from __future__ import annotations

import argparse
import json
import os
import re

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from jupyter_compile_cache.frontends import demo

HERE = os.path.dirname(os.path.abspath(__file__))
CHECK = "# NBVAL_CHECK_OUTPUT\n"

SETUP_DEMO_DIRS = """import os, shutil
# A demo store and torch cache dir beside these notebooks, so the example never touches your real caches.
DEMO = os.path.abspath("{demo}")
os.environ["JUPYTER_COMPILE_CACHE_DIR"] = os.path.join(DEMO, "store")
os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(DEMO, "torch-cache-{tag}")
"""

MODEL = demo.MODEL  # the quick start's model is the demo's (`make demo`)

COMPILE_CELL = """%%compile_cache mlp
compiled = torch.compile(model)
with torch.no_grad():
    y = compiled(x)"""

NOTEBOOKS = {
    "01_quickstart.ipynb": [
        new_markdown_cell(
            "# Quick start: keep `torch.compile` results across restarts\n\n"
            "`%%compile_cache NAME` restores what the cell compiled last time (from a local store), "
            "runs the cell, and saves what it compiled. Everything here runs on the CPU."
        ),
        new_markdown_cell(
            "## 1. Load the extension\nIt starts importing torch's compiler in the background, so "
            "the first compile does not wait for it."
        ),
        new_code_cell(SETUP_DEMO_DIRS.format(demo=".jcc-demo/01", tag="01") + "\n%load_ext jupyter_compile_cache"),
        new_markdown_cell("## 2. A model"),
        new_code_cell(MODEL),
        new_markdown_cell(
            "## 3. Compile under `%%compile_cache`\nThe first run compiles as usual and saves a "
            "bundle named `mlp`. The last line of the output says how many cache hits and misses "
            "torch had and what was saved."
        ),
        new_code_cell(COMPILE_CELL),
        new_code_cell(CHECK + 'print("same result as eager:", torch.allclose(y, model(x).detach(), atol=1e-5))'),
        new_markdown_cell(
            "## 4. What is cached\n`status` shows torch's cache layers: whether each is on, what is "
            "on disk, and this kernel's hits and misses. `list` shows the bundles."
        ),
        new_code_cell("%compile_cache status"),
        new_code_cell("%compile_cache list"),
        new_markdown_cell(
            "## 5. What the output means\n- *restored 'mlp' from the local store*: the bundle was "
            "found, verified file by file and put into torch's cache directory before the cell "
            "ran.\n- *N cache hits, M misses*: torch's own counters for this cell. After a restore "
            "you want 0 misses.\n- *saved ... / nothing new to save*: a new version is written only "
            "when the cell compiled something new.\n\nNow restart the kernel and run all cells again "
            "(Kernel > Restart Kernel and Run All Cells): the compile cell says *restored 'mlp' from the local "
            "store* and *0 misses*, and its time drops. `02a`/`02b` show it step by step, into an empty torch "
            "cache directory."
        ),
    ],
    "02a_warm_and_save.ipynb": [
        new_markdown_cell(
            "# The restart story, part 1: compile and save\n\nThis notebook compiles a model cold "
            "and saves it. `02b_restore_after_restart.ipynb`, run next in a new kernel, restores it "
            "into an **empty** torch cache directory."
        ),
        new_code_cell(
            SETUP_DEMO_DIRS.format(demo=".jcc-demo/02", tag="02a") + "shutil.rmtree(DEMO, ignore_errors=True)\n\n"
            "%load_ext jupyter_compile_cache"
        ),
        new_code_cell(MODEL),
        new_markdown_cell("A cold compile: torch traces the model, generates C++ kernels and compiles them."),
        new_code_cell(COMPILE_CELL),
        new_code_cell(
            CHECK + 'import jupyter_compile_cache as jcc\nprint("bundles saved:", [b.name for b in jcc.bundles()])'
        ),
        new_markdown_cell(
            "Now open `02b_restore_after_restart.ipynb`: it runs in a fresh kernel with a different, "
            "empty torch cache directory, like a restarted kernel on a wiped `/tmp`."
        ),
    ],
    "02b_restore_after_restart.ipynb": [
        new_markdown_cell(
            "# The restart story, part 2: restore in a new kernel\n\nSame store as `02a`, but an "
            "**empty** torch cache directory: everything the cell needs comes from the bundle."
        ),
        new_code_cell(
            SETUP_DEMO_DIRS.format(demo=".jcc-demo/02", tag="02b")
            + 'assert os.path.isdir(os.environ["JUPYTER_COMPILE_CACHE_DIR"]), "run 02a first: it saves the bundle"\n'
            + "# an EMPTY torch cache dir on every run, as on a wiped /tmp or a colleague's machine\n"
            + 'shutil.rmtree(os.environ["TORCHINDUCTOR_CACHE_DIR"], ignore_errors=True)\n\n'
            "%load_ext jupyter_compile_cache"
        ),
        new_code_cell(MODEL),
        new_markdown_cell("The same cell: this time it restores `mlp` before running."),
        new_code_cell(COMPILE_CELL),
        new_markdown_cell(
            "## The hits\ntorch's own counters: no FX graph, AOTAutograd or Dynamo misses, and a "
            "Dynamo precompile hit (the cell skipped tracing altogether)."
        ),
        new_code_cell(
            CHECK + "from torch._dynamo.utils import counters\n"
            'print("misses:", counters["inductor"]["fxgraph_cache_miss"], '
            'counters["aot_autograd"]["autograd_cache_miss"], counters["dynamo_cache"]["dynamo_cache_miss"])\n'
            'print("dynamo precompile hit:", counters["dynamo_cache"]["dynamo_cache_hit"] >= 1)\n'
            'print("same result as eager:", torch.allclose(y, model(x).detach(), atol=1e-5))'
        ),
        new_markdown_cell("## The time against cold\nThe cold time is the one `02a` recorded in the bundle."),
        new_code_cell(
            "import jupyter_compile_cache as jcc\n"
            "session = jcc.get_session()\n"
            "restored = session.history[-1]\n"
            'cold = session.store().versions("mlp")[-1].stats["body_seconds"]\n'
            'print(f"cold compile cell (02a): {cold:6.2f} s")\n'
            'print(f"restored cell (02b):    {restored.body_seconds:6.2f} s '
            '({restored.body_seconds / cold:.3f}x)")'
        ),
        new_code_cell("%compile_cache explain mlp"),
    ],
    "03_shared_hub.ipynb": [
        new_markdown_cell(
            "# A shared hub: a colleague restores your compiled cell\n\nA team shares bundles through "
            "one Redis. This notebook starts its own `redis-server` on a free local port, pushes a "
            'bundle signed with a team secret, and lets a "colleague" (a separate process with its '
            "own store and an empty cache directory) restore it."
        ),
        new_code_cell(
            SETUP_DEMO_DIRS.format(demo=".jcc-demo/03", tag="03") + "import shutil, socket, subprocess, sys, time\n"
            "with socket.socket() as s:\n"
            "    s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]\n"
            "redis_proc = subprocess.Popen([shutil.which('redis-server'), '--port', str(port), "
            "'--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], stdout=subprocess.DEVNULL)\n"
            "time.sleep(0.5)\n"
            "os.environ['JUPYTER_COMPILE_CACHE_HUB'] = f'redis://127.0.0.1:{port}/0'\n"
            "os.environ['JUPYTER_COMPILE_CACHE_SECRET'] = 'our-team-secret'\n"
            "os.environ['JUPYTER_COMPILE_CACHE_NAMESPACE'] = 'demo'\n\n"
            "%load_ext jupyter_compile_cache\n"
            "%compile_cache hub status"
        ),
        new_code_cell(MODEL),
        new_markdown_cell(
            "## You: compile and push\nWith a hub configured, the cell saves to the local store "
            "and then to the hub, signed with the team secret."
        ),
        new_code_cell(COMPILE_CELL.replace("mlp", "shared-mlp")),
        new_markdown_cell(
            "## A colleague on a fresh machine\nA new kernel with its own, empty store and cache "
            "directory, the same hub and secret, running the same cells as you: its cell restores from the hub."
        ),
        new_code_cell(
            "from jupyter_client.manager import start_new_kernel\n\n"
            "# The colleague's notebook: your cells above, then a look at torch's counters.\n"
            f'MODEL_CELL = """\\\n{MODEL}"""\n'
            f'COMPILE_CELL = """\\\n{COMPILE_CELL.replace("mlp", "shared-mlp")}"""\n'
            "COUNTERS_CELL = ('from torch._dynamo.utils import counters\\n'\n"
            '                 \'print("fx graph misses:", counters["inductor"]["fxgraph_cache_miss"])\')\n'
            "COLLEAGUE_CELLS = ['%load_ext jupyter_compile_cache', MODEL_CELL, COMPILE_CELL, COUNTERS_CELL]\n\n"
            "def colleague(secret):\n"
            "    env = dict(os.environ, JUPYTER_COMPILE_CACHE_DIR=os.path.join(DEMO, f'store-{secret}'),\n"
            "               TORCHINDUCTOR_CACHE_DIR=os.path.join(DEMO, f'cache-{secret}'),\n"
            "               JUPYTER_COMPILE_CACHE_SECRET=secret)\n"
            "    said, out = [], []  # what the extension told them; what their cells printed\n"
            "    def keep(msg):\n"
            "        if msg['msg_type'] == 'stream':\n"
            "            for line in msg['content']['text'].splitlines():\n"
            "                if line.startswith('compile_cache: '):\n"
            "                    said.append(line)\n"
            "                elif msg['content']['name'] == 'stdout':  # not torch's log lines on stderr\n"
            "                    out.append(line)\n"
            "    km, kc = start_new_kernel(env=env, stderr=subprocess.DEVNULL)  # its log lines, not its output\n"
            "    try:\n"
            "        for cell in COLLEAGUE_CELLS:\n"
            "            kc.execute_interactive(cell, output_hook=keep, timeout=300)\n"
            "    finally:\n"
            "        kc.stop_channels(); km.shutdown_kernel(now=True)\n"
            "    out.append(f'restored from the hub: {any(\"from the hub\" in line for line in said)}')\n"
            "    return said, out\n\n"
            "said, out = colleague('our-team-secret')\n"
            "print('\\n'.join(said))"
        ),
        new_markdown_cell("What the colleague's cells printed: the bundle came from the hub, nothing recompiled."),
        new_code_cell(CHECK + "print('\\n'.join(out))"),
        new_markdown_cell(
            "## Signing\nBundles hold pickled code, so a team sets a secret: every bundle is "
            "signed, and one signed with another secret (or altered on the hub) is refused; the "
            "cell then compiles itself."
        ),
        new_code_cell("said, out = colleague('some-other-secret')\nprint('\\n'.join(said))"),
        new_markdown_cell(
            "The hub's version was refused, the colleague's cell compiled (one FX graph miss), and what it "
            "compiled stayed in their own store: the team would refuse a version signed with another secret."
        ),
        new_code_cell(
            CHECK + "print('\\n'.join(out))\n"
            "print('refused:', any('wrong signature' in l for l in said))\n"
            "print('pushed:', not any('not pushed' in l for l in said))"
        ),
        new_markdown_cell("The hub holds one version: yours. Nobody pushed again."),
        new_code_cell("%compile_cache list"),
        new_markdown_cell("## Clean up"),
        new_code_cell("redis_proc.terminate(); redis_proc.wait()\nshutil.rmtree(DEMO, ignore_errors=True)"),
    ],
    "04_panel.ipynb": [
        new_markdown_cell(
            "# The panel: what is cached, what hit, what it saved\n\n`%compile_cache panel` shows "
            "torch's cache layers with toggles bound to torch's switches, the bundles (local and "
            "hub) with restore / delete / push / explain, and cold vs restored time per cell. It "
            "uses standard ipywidgets only, so it renders offline in JupyterLab, Notebook 7 and VS "
            "Code."
        ),
        new_code_cell(
            SETUP_DEMO_DIRS.format(demo=".jcc-demo/04", tag="04") + "shutil.rmtree(DEMO, ignore_errors=True)\n\n"
            "%load_ext jupyter_compile_cache"
        ),
        new_markdown_cell(
            "## Yesterday's kernel\nA kernel of its own (another process, the same store) runs this notebook's "
            "cells cold and saves the bundle, as you did before a restart."
        ),
        new_code_cell(
            "import subprocess\n"
            "from jupyter_client.manager import start_new_kernel\n\n"
            f'MODEL_CELL = """\\\n{MODEL}"""\n'
            f'COMPILE_CELL = """\\\n{COMPILE_CELL}"""\n\n'
            "env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(DEMO, 'torch-cache-yesterday'))\n"
            "km, kc = start_new_kernel(env=env, stderr=subprocess.DEVNULL)\n"
            "try:\n"
            "    for cell in ('%load_ext jupyter_compile_cache', MODEL_CELL, COMPILE_CELL):\n"
            "        kc.execute_interactive(cell, timeout=300)  # its output shows here\n"
            "finally:\n"
            "    kc.stop_channels(); km.shutdown_kernel(now=True)"
        ),
        new_markdown_cell(
            "## This kernel, after the restart\nIts torch cache dir is empty, as after a restart on a wiped `/tmp` "
            "or on a colleague's machine: the same cells restore the bundle, and the panel compares the cold "
            "time recorded in it with this restored one."
        ),
        new_code_cell(MODEL),
        new_code_cell(COMPILE_CELL),
        new_markdown_cell(
            "## The panel\nTick or untick a layer to switch torch's cache for it in this kernel; "
            "the panel updates by itself after every `%%compile_cache` cell."
        ),
        new_code_cell("%compile_cache panel"),
        new_markdown_cell("## Toggles from code\nThe same switches as the panel's check boxes:"),
        new_code_cell(CHECK + "%compile_cache disable fx_graph"),
        new_code_cell(CHECK + "%compile_cache enable fx_graph"),
        new_markdown_cell(
            "## Why would a bundle not restore?\n`explain` answers field by field (torch build, "
            "Python, GPU, CPU ISA ...) and shows what the last run hit and missed per layer."
        ),
        new_code_cell("%compile_cache explain mlp"),
    ],
}

GPU_MODEL = """import logging, time, warnings, torch

# max-autotune logs every Triton config that does not fit in shared memory, and its choice statistics: quiet.
logging.getLogger("torch._inductor.select_algorithm").setLevel(logging.CRITICAL)
torch._inductor.config.max_autotune_report_choices_stats = False
torch._inductor.config.autotune_num_choices_displayed = 0  # no AUTOTUNE table per matmul on stderr
warnings.filterwarnings("ignore", message=".*(TensorFloat32|TypedStorage)")

# The 6-layer transformer encoder of the benchmarks (benchmarks/_case.py), on the GPU; no dropout, so the
# compiled result can be compared with eager below.
torch.manual_seed(0)
layer = torch.nn.TransformerEncoderLayer(512, 8, 2048, dropout=0.0, batch_first=True, norm_first=True)
model = torch.nn.TransformerEncoder(layer, 6, enable_nested_tensor=False).cuda()
x = torch.randn(8, 128, 512, device="cuda")"""

GPU_COMPILE_CELL = """%%compile_cache transformer-max-autotune
compiled = torch.compile(model, mode="max-autotune-no-cudagraphs")
start = time.perf_counter()
with torch.no_grad():
    y = compiled(x)
torch.cuda.synchronize()
first_call = time.perf_counter() - start"""

GPU_SETUP = (
    SETUP_DEMO_DIRS
    + """import json, time, jupyter_compile_cache as jcc
TIMES = os.path.join(DEMO, "05-times.json")  # kept across the restart


def record(which, first_call, cell):
    times = json.load(open(TIMES)) if os.path.exists(TIMES) else {{}}
    times[which] = {{"first_call_s": first_call, "cell_s": cell}}
    os.makedirs(DEMO, exist_ok=True)
    json.dump(times, open(TIMES, "w"))
    print(f"{{which}}: first call {{first_call:.2f}} s, whole cell {{cell:.2f}} s")


def last_cell_seconds():
    report = jcc.get_session().history[-1]  # the last %%compile_cache cell: restore + body
    return (report.restore.seconds if report.restore else 0.0) + report.body_seconds
"""
)

GPU_NOTEBOOKS = {
    "05_gpu_max_autotune.ipynb": [
        new_markdown_cell(
            "# GPU + max-autotune: a minute of autotuning, back in seconds after a restart\n\n"
            "**Needs a CUDA GPU.** The outputs below come from a real run on the GPU named in the first "
            "output, committed as they were. CPU CI does not execute this notebook (`.ci/run` and the "
            "Makefile run 01-04 only). To run it again on a GPU machine: "
            "`python example_notebooks/make_notebooks.py --gpu` (it restarts the kernel where this notebook "
            "says so), or run it by hand and restart the kernel at section 4."
        ),
        new_markdown_cell("## 1. Setup: a demo store and an empty torch cache dir"),
        new_code_cell(
            GPU_SETUP.format(demo=".jcc-demo", tag="05") + "shutil.rmtree(DEMO, ignore_errors=True)\n\n"
            "%load_ext jupyter_compile_cache\n"
            "import torch\n"
            "print(torch.cuda.get_device_name(), '| torch', torch.__version__)"
        ),
        new_code_cell(GPU_MODEL),
        new_markdown_cell("## 2. The floor: the model's first eager call (CUDA and cuBLAS start-up included)"),
        new_code_cell(
            "start = time.perf_counter()\nwith torch.no_grad():\n    model(x)\ntorch.cuda.synchronize()\n"
            "record('eager', time.perf_counter() - start, time.perf_counter() - start)"
        ),
        new_markdown_cell(
            "## 3. Cold: `max-autotune-no-cudagraphs`\nInductor benchmarks Triton templates against cuBLAS "
            "for every matmul, then compiles the winners: about a minute. The cell saves it all as a bundle."
        ),
        new_code_cell(GPU_COMPILE_CELL),
        new_code_cell("record('cold', first_call, last_cell_seconds())"),
        new_markdown_cell(
            "## 4. Restart the kernel\nEverything in memory is gone. To show the restore comes from our "
            "bundle and not from torch's own cache directory, torch now gets a **new, empty** cache dir."
        ),
        new_code_cell(
            GPU_SETUP.format(demo=".jcc-demo", tag="05-after-restart")
            + 'assert not os.path.exists(os.environ["TORCHINDUCTOR_CACHE_DIR"])\n\n'
            "%load_ext jupyter_compile_cache",
            metadata={"tags": ["restart-kernel"]},
        ),
        new_code_cell(GPU_MODEL),
        new_markdown_cell("## 5. The same cell, restored"),
        new_code_cell(GPU_COMPILE_CELL),
        new_code_cell("record('restored', first_call, last_cell_seconds())"),
        new_markdown_cell(
            "torch's own counters: a Dynamo precompile hit and no AOTAutograd or FX graph misses: nothing was "
            "traced, compiled or autotuned again. (torch's `select_algorithm_autotune` counter is no proof either "
            "way: on a cache hit torch adds the counts recorded by the cold compile.)"
        ),
        new_code_cell(
            "from torch._dynamo.utils import counters\n"
            'print("dynamo precompile hits / misses:", counters["dynamo_cache"]["dynamo_cache_hit"], '
            'counters["dynamo_cache"]["dynamo_cache_miss"])\n'
            'print("aot / fx graph misses:", counters["aot_autograd"]["autograd_cache_miss"], '
            'counters["inductor"]["fxgraph_cache_miss"])\n'
            'print("same result as eager:", torch.allclose(y, model(x).detach(), atol=1e-3, rtol=1e-3))'
        ),
        new_code_cell(
            "times = json.load(open(TIMES))\n"
            "print(f\"{'':10s} {'first call':>11s} {'whole cell':>11s}\")\n"
            "for which, t in times.items():\n"
            "    print(f\"{which:10s} {t['first_call_s']:9.2f} s {t['cell_s']:9.2f} s\")\n"
            "print(f\"restored / cold: {times['restored']['first_call_s'] / times['cold']['first_call_s']:.3f}x "
            "(first call), {times['restored']['cell_s'] / times['cold']['cell_s']:.3f}x (cell)\")"
        ),
        new_markdown_cell(
            "The first call is the model's own: nothing is compiled or autotuned again. The whole cell also holds the "
            "restore itself (the bundle's files written into the empty cache dir: the restore line above says how "
            "long) and loading the compiled kernels once in this process; the README's results table gives both."
        ),
        new_markdown_cell("## 6. The panel, on the GPU"),
        new_code_cell("%compile_cache panel"),
    ],
}


def execute(nb: nbformat.NotebookNode, timeout: int = 900) -> None:
    """Run every cell in one kernel, restarting it before cells tagged `restart-kernel`; keep widget state."""
    from jupyter_core.utils import run_sync
    from nbclient import NotebookClient

    client = NotebookClient(
        nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": HERE}}, store_widget_state=True
    )

    async def run() -> None:
        async with client.async_setup_kernel():
            reply = await client.async_wait_for_reply(client.kc.kernel_info())
            nb.metadata["language_info"] = reply["content"]["language_info"]
            count = 0
            for index, cell in enumerate(nb.cells):
                if "restart-kernel" in cell.metadata.get("tags", []):
                    await client.km.restart_kernel()
                    await client.kc.wait_for_ready(timeout=120)
                    count = 0  # a restarted kernel counts from 1 again
                if cell.cell_type == "code":
                    count += 1
                await client.async_execute_cell(cell, index, execution_count=count)
            client.set_widgets_metadata()

    run_sync(run)()


# A stored notebook shows no path of the machine that ran it: the checkout becomes relative, the home folder `~`.
MACHINE_PATH = re.compile(r"(?<![\w.~])/(?:home|root|tmp|Users|work|var|private|mnt|opt|srv)/|[A-Z]:\\Users")


def scrub(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The notebook with the checkout's and the home folder's absolute paths made relative (`~` for home)."""
    text = nbformat.writes(nb)
    for path, short in ((os.path.dirname(HERE) + os.sep, ""), (os.path.expanduser("~") + os.sep, "~/")):
        text = text.replace(json.dumps(path)[1:-1], short).replace(path, short)
    return nbformat.reads(text, as_version=4)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--execute", action="store_true", help="run the notebooks in order and store their outputs")
    p.add_argument("--gpu", action="store_true", help="write and run the GPU notebook (05) instead of 01-04")
    args = p.parse_args()
    notebooks = GPU_NOTEBOOKS if args.gpu else NOTEBOOKS
    for name, cells in notebooks.items():
        nb = new_notebook(
            cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
        )
        path = os.path.join(HERE, name)
        if args.execute or args.gpu:
            execute(nb)
            nb = scrub(nb)
        nbformat.write(nb, path)
        print("wrote", path)


if __name__ == "__main__":
    main()
