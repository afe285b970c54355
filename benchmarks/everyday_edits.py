"""Everyday edits, timed in real kernels: a restored cell after an edit that does not touch the compiled code, and
after a colleague's variant of the cell became the newest version; ours against torch's own warm cache, one run.

Workloads:
  mlp      a 48-layer MLP (Linear + GELU), defined in one cell and compiled in the next
  decode2  the decode recipe with two prompt lengths in ONE cell: torch.compile(model.forward,
           mode="reduce-overhead", fullgraph=True) of a Llama-architecture decoder, then a greedy decode of 8 tokens
           per prompt on a static cache (as benchmarks/real_work.py's decode)

Cases, each a new kernel: `cold` (plain torch.compile, empty cache dir), `torch_warm` (plain, a new kernel on cold's
cache dir, the cells as edited), `ours_cold` (`%%compile_cache`, empty dir and store), `ours_edit` (the defining
cell starts with an import and a comment, restored into an empty dir), `ours_variant` (a colleague's real change: the
MLP's activation, so it compiles and saves a newer version), `ours_original` (the original cells again, restored into
an empty dir after the variant's version). Every time is the whole compile cell; the misses are torch's counters.

  python -m benchmarks everyday_edits --out benchmarks/results/everyday_edits_cpu.json
  python -m benchmarks everyday_edits --device cuda --out benchmarks/results/everyday_edits_h100.json
"""

from __future__ import annotations

import json
import os
import tempfile

from benchmarks.harness import Job, option
from jupyter_compile_cache.kernels.kernel_runner import KernelRunner

DEFINE = {
    "mlp": """
import torch
torch.manual_seed(0)
DEVICE = {device!r}
def act(x):
    return torch.nn.functional.gelu(x)
class MLP(torch.nn.Module):
    def __init__(self, width=256, depth=48):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(depth))
    def forward(self, x):
        for layer in self.layers:
            x = act(layer(x))
        return x
model = MLP().to(DEVICE)
x = torch.randn(64, 256, device=DEVICE)
""",
    "decode2": """
import torch, warnings
warnings.filterwarnings("ignore")
import transformers as T
torch.manual_seed(0)
DEVICE = {device!r}
with torch.device(DEVICE):
    cfg = T.LlamaConfig(vocab_size=4096, hidden_size=512, intermediate_size=1408, num_hidden_layers=4,
                        num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=64)
    model = T.LlamaForCausalLM(cfg).eval()
prompts = [torch.randint(0, 4096, (1, n), device=DEVICE) for n in (7, 12)]
# a static cache made before the compile and reset in place per generation (what CUDA graphs need)
cache = T.StaticCache(config=model.config, max_cache_len=40)
cache.early_initialization(batch_size=1, num_heads=4, head_dim=64, dtype=torch.float32, device=DEVICE)
def decode(ids, new=8):
    cache.reset()
    pos, tokens = torch.arange(ids.shape[1], device=DEVICE), []
    with torch.no_grad():
        for _ in range(new):
            torch.compiler.cudagraph_mark_step_begin()
            logits = step(input_ids=ids, past_key_values=cache, cache_position=pos, use_cache=True).logits
            ids = logits[:, -1:].argmax(-1)
            tokens.append(int(ids))
            pos = pos[-1:] + 1
    return tokens
""",
}
CELL = {
    "mlp": """with torch.no_grad():
    compiled = torch.compile(model)
    y = compiled(x)
print("RESULT", round(float(y.double().sum()), 6))""",
    "decode2": """step = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
for p in prompts:  # two prompt lengths in one cell
    print("RESULT", decode(p))""",
}
EDIT = "import math\n# the model, tidied up\n"
VARIANT = {"mlp": ("torch.nn.functional.gelu(x)", "torch.nn.functional.silu(x)"), "decode2": ("(7, 12)", "(7, 12)")}
STATS = """
import json as _j
from torch._dynamo.utils import counters as _c
print(_j.dumps({"dynamo": _c["dynamo_cache"].get("dynamo_cache_miss", 0),
                "fx": _c["inductor"].get("fxgraph_cache_miss", 0),
                "aot": _c["aot_autograd"].get("autograd_cache_miss", 0),
                "unique_graphs": _c["stats"].get("unique_graphs", 0)}))
"""
CASES = ("cold", "torch_warm", "ours_cold", "ours_edit", "ours_variant", "ours_original")


def run_case(workload: str, case: str, device: str, work: str, timeout: float) -> dict:
    cache = os.path.join(work, workload, "cold" if case == "torch_warm" else case)
    env = {"TORCHINDUCTOR_CACHE_DIR": cache, "JUPYTER_COMPILE_CACHE_DIR": os.path.join(work, workload, "store")}
    define = DEFINE[workload].format(device=device)
    if case in ("torch_warm", "ours_edit"):
        define = EDIT + define
    if case == "ours_variant":
        define = define.replace(*VARIANT[workload])
    body = CELL[workload] if not case.startswith("ours") else f"%%compile_cache edits-{workload}\n{CELL[workload]}"
    k = KernelRunner(env, timeout)
    try:
        if case.startswith("ours"):
            k.run("%load_ext jupyter_compile_cache")
        k.run(define)
        seconds, out = k.run(body)
        misses = json.loads(k.run(STATS)[1].strip().splitlines()[-1])
    finally:
        k.close()
    return {
        "workload": workload,
        "case": case,
        "seconds": round(seconds, 3),
        "misses": misses,
        "results": [line for line in out.splitlines() if line.startswith("RESULT")],
        "said": [line for line in out.splitlines() if "compile_cache" in line],
    }


OPTIONS = [
    option("--device", default="cpu"),
    option("--workloads", default="mlp,decode2"),
    option("--timeout", type=float, default=600.0),
]


def run(job: Job) -> None:
    args = job.args
    job.meta["device"] = args.device
    rows = []
    with tempfile.TemporaryDirectory(prefix="jcc-edits-") as work:
        for workload in args.workloads.split(","):
            for case in CASES:
                if workload == "decode2" and case == "ours_variant":
                    continue  # its variant is the same model: the mlp shows the churn
                row = run_case(workload, case, args.device, work, args.timeout)
                rows.append(row)
                job.keep(rows=rows)
                m = row["misses"]
                job.say(
                    f"{workload:8s} {case:14s} {row['seconds']:7.2f} s  misses dynamo {m['dynamo']} fx {m['fx']} "
                    f"aot {m['aot']}  {(row['said'] or [''])[-1][:150]}"
                )
    by = {(r["workload"], r["case"]): r for r in rows}
    table = []
    for r in rows:
        warm = by.get((r["workload"], "torch_warm"))
        ratio = f"{r['seconds'] / warm['seconds']:.2f}" if warm and r["case"].startswith("ours") else ""
        cold = by[(r["workload"], "cold")]
        same = "yes" if r["results"] == cold["results"] or r["case"] == "ours_variant" else "NO"
        m = r["misses"]
        misses = f"{m['dynamo']}/{m['fx']}/{m['aot']}"
        table.append([r["workload"], r["case"], f"{r['seconds']:.2f}", misses, ratio,
                      same if r["case"] != "ours_variant" else "(variant)"])  # fmt: skip
    headers = ["workload", "case", "cell s", "misses (dynamo/fx/aot)", "x torch warm", "same answer"]
    job.table(headers, table, align="llrlrl")
