"""Real work, timed in real kernels: each workload's whole cell, side by side, one fresh kernel per case.

Workloads (`--size real`: a 1.1 B-parameter Llama-architecture decoder in bf16 and a ViT-B/16 at batch 32, for a
GPU; `--size tiny`: the same code at tiny width, for the CPU):

  generate   HF `generate` with a static cache (transformers compiles the forward itself, reduce-overhead, on CUDA;
             on the CPU it does not, so there the cell uses the explicit recipe below)
  decode     the explicit recipe: model.forward = torch.compile(model.forward, mode="reduce-overhead",
             fullgraph=True), then a greedy generate with a static cache
  autotune   max-autotune on the decoder's prefill (GPU only)
  train      a training step: compiled forward and backward, AdamW's step under torch.compile
  flex       a transformer block whose attention is a compiled flex_attention
  vision     ViT-B/16 (HF, from its config, no download) inference at batch 32

Cases: eager (no compile; for generate, the dynamic cache), cold (plain torch.compile, empty cache dir), torch_warm
(plain, a new kernel on cold's cache dir), mega (torch's mega-cache from the cold kernel, loaded into an empty dir
before the cell; the load is timed apart), ours_cold (`%%compile_cache`, empty dir and store), ours (`%%compile_cache`
restoring from that store into an empty dir). Each time is the whole cell, as a user sees it; the model is built
in an earlier cell, not timed. What each of our cells said (restores, fallbacks, misses) is kept in the JSON.

  python benchmarks/real_work.py --size tiny --out benchmarks/results/real_work_cpu.json
  python benchmarks/real_work.py --size real --device cuda --out benchmarks/results/real_work_h100.json
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import sys
import tempfile
import time

CASES = ("eager", "cold", "torch_warm", "mega", "ours_cold", "ours")

SIZES = {
    "tiny": dict(hidden=32, layers=1, heads=2, kv=1, inter=64, vocab=96, prompt=6, new=8, vit=None, batch=2),
    "real": dict(
        hidden=2048, layers=16, heads=32, kv=8, inter=5632, vocab=32000, prompt=64, new=32, vit="b16", batch=32
    ),
}

SETUP = """
import copy, json, time, warnings
import torch
warnings.filterwarnings("ignore")
import transformers as T
from torch.nn.attention.flex_attention import flex_attention
S, DEVICE, COMPILE = {size!r}, {device!r}, {compile_}
DTYPE = torch.bfloat16 if DEVICE == "cuda" else torch.float32
torch.manual_seed(0)
def maybe_compile(fn, **kw):
    return torch.compile(fn, **kw) if COMPILE else fn
def sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()
"""

BUILD = {
    "llm": """
with torch.device(DEVICE):
    cfg = T.LlamaConfig(vocab_size=S["vocab"], hidden_size=S["hidden"], intermediate_size=S["inter"],
                        num_hidden_layers=S["layers"], num_attention_heads=S["heads"], num_key_value_heads=S["kv"],
                        max_position_embeddings=S["prompt"] + S["new"] + 8)
    model = T.LlamaForCausalLM(cfg).to(DTYPE).eval()
prompt = torch.randint(0, S["vocab"], (1, S["prompt"]), device=DEVICE)
""",
    "train": """
width = S["hidden"] * 4
net = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, width))
net = net.to(DEVICE)
opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
x, y = torch.randn(S["batch"] * 8, width, device=DEVICE), torch.randn(S["batch"] * 8, width, device=DEVICE)
""",
    "flex": """
class FlexBlock(torch.nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.qkv, self.out = heads, torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
        self.attend = maybe_compile(flex_attention)
    def forward(self, x):
        b, t, c = x.shape
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in self.qkv(x).split(c, dim=2))
        return x + self.out(self.attend(q, k, v).transpose(1, 2).reshape(b, t, c))
dim = max(64, S["hidden"])
block = FlexBlock(dim, 4).to(DEVICE)
xb = torch.randn(S["batch"], 128, dim, device=DEVICE)
""",
    "vision": """
if S["vit"]:
    vcfg = T.ViTConfig()  # ViT-B/16: 12 layers, width 768, 224x224
else:
    vcfg = T.ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                       image_size=32, patch_size=8)
vit = T.ViTForImageClassification(vcfg).to(DEVICE).eval()
pixels = torch.randn(S["batch"], 3, vcfg.image_size, vcfg.image_size, device=DEVICE)
""",
}

CELLS = {
    "generate": (
        "llm",
        """
with torch.no_grad():
    if COMPILE and DEVICE != "cuda":  # transformers compiles a static-cache forward itself on CUDA only
        model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
    kwargs = dict(cache_implementation="static") if COMPILE else {}
    out = model.generate(prompt, max_new_tokens=S["new"], do_sample=False, **kwargs)
sync()
print("RESULT", out[0, -4:].tolist())
""",
    ),
    "decode": (
        "llm",
        """
with torch.no_grad():
    model.forward = maybe_compile(model.forward, mode="reduce-overhead", fullgraph=True)
    out = model.generate(prompt, max_new_tokens=S["new"], do_sample=False, cache_implementation="static")
sync()
print("RESULT", out[0, -4:].tolist())
""",
    ),
    "autotune": (
        "llm",
        """
with torch.no_grad():
    prefill = maybe_compile(model, mode="max-autotune")
    logits = prefill(prompt).logits
sync()
print("RESULT", round(float(logits.float().abs().mean()), 4))
""",
    ),
    "train": (
        "train",
        """
fwd = maybe_compile(net)
@maybe_compile
def opt_step():
    opt.step()
loss = torch.nn.functional.mse_loss(fwd(x), y)
loss.backward()
opt_step()
sync()
print("RESULT", round(float(net[0].weight.float().sum()), 4))
""",
    ),
    "flex": (
        "flex",
        """
with torch.no_grad():
    out = maybe_compile(block)(xb)
sync()
print("RESULT", round(float(out.float().abs().mean()), 4))
""",
    ),
    "vision": (
        "vision",
        """
with torch.no_grad():
    logits = maybe_compile(vit)(pixel_values=pixels).logits
sync()
print("RESULT", round(float(logits.float().abs().mean()), 4))
""",
    ),
}


class Kernel:
    """A real kernel through jupyter_client; `run` returns (seconds from execute to idle, output)."""

    def __init__(self, env: dict[str, str]) -> None:
        from jupyter_client import KernelManager

        self.km = KernelManager(kernel_name="python3")
        self.km.kernel_cmd = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
        self.km.start_kernel(env={**os.environ, "PYTHONWARNINGS": "ignore", **env})
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=120)

    def run(self, code: str) -> tuple[float, str]:
        start = time.perf_counter()
        msg_id = self.kc.execute(code)
        out, error = "", None
        while True:
            try:
                msg = self.kc.get_iopub_msg(timeout=900)
            except queue.Empty:
                raise TimeoutError(code) from None
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                out += content["text"]
            elif kind == "error":
                error = f"{content['ename']}: {content['evalue']}"
            elif kind == "status" and content["execution_state"] == "idle":
                break
        seconds = time.perf_counter() - start
        if error:
            raise RuntimeError(f"{error}\n{out[-2000:]}")
        return seconds, out

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


def run_workload(name: str, size: str, device: str, work: str) -> dict:
    build, cell = CELLS[name]
    store = os.path.join(work, name, "store")
    dirs = {case: os.path.join(work, name, case) for case in CASES}
    mega = os.path.join(work, name, "mega.bin")
    row: dict = {"workload": name}
    for case in CASES:
        cache_dir = dirs["cold"] if case == "torch_warm" else dirs[case]
        env = {"TORCHINDUCTOR_CACHE_DIR": cache_dir, "JUPYTER_COMPILE_CACHE_DIR": store}
        k = Kernel(env)
        try:
            k.run(SETUP.format(size=SIZES[size], device=device, compile_=case != "eager") + BUILD[build])
            if case.startswith("ours"):
                k.run("%load_ext jupyter_compile_cache")
            if case == "mega":
                row["mega_load_s"], _ = k.run(f"torch.compiler.load_cache_artifacts(open({mega!r}, 'rb').read())")
            body = f"%%compile_cache real-{name}\n{cell}" if case.startswith("ours") else cell
            row[case], out = k.run(body)
            row[f"{case}_result"] = next((line for line in out.splitlines() if line.startswith("RESULT")), None)
            if case.startswith("ours"):
                row[f"{case}_said"] = [line for line in out.splitlines() if "compile_cache" in line]
            if case == "cold":
                k.run(f"open({mega!r}, 'wb').write(torch.compiler.save_cache_artifacts()[0])")
            print(f"{name:9s} {case:10s} {row[case]:7.2f} s", file=sys.stderr, flush=True)
        finally:
            k.close()
    return row


def table(rows: list[dict]) -> str:
    head = (
        "| workload | eager | torch cold | torch warm | mega (+load) | ours cold | **ours restored** | /eager "
        "| /torch warm | /cold |"
    )
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        lines.append(
            f"| {r['workload']} | {r['eager']:.2f} | {r['cold']:.2f} | {r['torch_warm']:.2f} | "
            f"{r['mega']:.2f} (+{r['mega_load_s']:.2f}) | {r['ours_cold']:.2f} | **{r['ours']:.2f}** | "
            f"{r['ours'] / r['eager']:.2f}x | {r['ours'] / r['torch_warm']:.2f}x | {r['ours'] / r['cold']:.3f}x |"
        )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", choices=sorted(SIZES), default="tiny")
    p.add_argument("--device", default="cpu")
    p.add_argument("--workloads", default=",".join(CELLS), help="comma-separated, of: " + ", ".join(CELLS))
    p.add_argument("--out", required=True, help="JSON file; a .md table is written beside it")
    args = p.parse_args()
    names = [n for n in args.workloads.split(",") if n and (n != "autotune" or args.device == "cuda")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="real-work-") as work:
        for name in names:
            rows.append(run_workload(name, args.size, args.device, work))
    import torch

    meta = {"size": args.size, "device": args.device, "torch": torch.__version__, "time": time.ctime()}
    with open(args.out, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    text = f"{meta}\n\nWhole cell, seconds, one fresh kernel per case.\n\n{table(rows)}\n"
    with open(os.path.splitext(args.out)[0] + ".md", "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
