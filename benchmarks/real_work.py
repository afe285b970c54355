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

Families beyond those (each was once restored with a trace or a miss; `--workloads families` runs them all):

  autocast   the decoder's forward under torch.autocast (bfloat16), no_grad
  inference  the decoder's forward under torch.inference_mode
  dynamic    an MLP at three batch sizes, the batch marked with torch._dynamo.mark_dynamic
  shapeless  the same MLP compiled with dynamic=True, at two batch sizes
  lora       a peft LoRA (r=4 on q_proj and v_proj) of the decoder
  int8       an MLP with torchao's int8 weight-only quantized weights (int4, float8: the same, GPU only)
  regional   regional compilation: `layer.compile()` on each decoder layer of a Llama (3 layers at least)
  blocks32   regional compilation of 32 small blocks told apart by an index (past Dynamo's recompile limit)
  unet       a diffusers UNet2DConditionModel from a small config, one denoising call

Cases: eager (no compile; for generate, the dynamic cache), cold (plain torch.compile, empty cache dir), torch_warm
(plain, a new kernel on cold's cache dir), mega (torch's mega-cache from the cold kernel, loaded into an empty dir
before the cell; the load is timed apart), ours_cold (`%%compile_cache`, empty dir and store), ours (`%%compile_cache`
restoring from that store into an empty dir), ours_warm (the same, in a kernel of the warm kernel spec: forked
from a template that has torch and its compiler loaded; the template is made before the first of these kernels,
and its cache dir emptied before each, since the template is kept per cache dir), ours_hub (a colleague: an empty
store and dir, the bundle on a shared-folder hub that ours_cold pushed to, pulled by the cell), ours_staged (the
same colleague whose kernel knows its notebook, JPY_SESSION_NAME, as under a Jupyter server: %load_ext fetches
the bundle while the model is built), torch_precompile (torch's own precompile, without the extension: a plain
kernel with torch's caching_precompile on, on a copy of the cache dir ours restored; it shows what the restore
costs in torch, where ours adds its checks). Each time is the whole cell, as a user sees it; the model is built in an
earlier cell, not timed. What each of our cells said (restores, fallbacks, misses) is kept in the JSON.

  python -m benchmarks real_work --size tiny --out benchmarks/results/real_work_cpu.json
  python -m benchmarks real_work --size real --device cuda --out benchmarks/results/real_work_h100.json
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import tempfile
import time

from benchmarks.harness import Job, option
from jupyter_compile_cache.kernels.kernel_runner import KernelRunner
from jupyter_compile_cache.kernels.protocol import start_record_path

CASES = (
    "eager", "cold", "torch_warm", "mega", "ours_cold", "ours", "ours_warm", "ours_hub", "ours_staged",
    "torch_precompile",
)  # fmt: skip
# the others make the caches these read
REPEATED = ("eager", "torch_warm", "ours", "ours_warm", "ours_hub", "ours_staged", "torch_precompile")

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

QUANTIZED = """
from torchao.quantization import quantize_
import torchao.quantization as Q
width = S["hidden"] * 4
qnet = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, width))
qnet = qnet.to(DEVICE).to(torch.bfloat16 if DEVICE == "cuda" else torch.float32)
quantize_(qnet, Q.{config})
xq = torch.randn(S["batch"] * 8, width, device=DEVICE, dtype=next(qnet.parameters()).dtype)
"""

BUILD = {
    "layers3": """
with torch.device(DEVICE):
    cfg = T.LlamaConfig(vocab_size=S["vocab"], hidden_size=S["hidden"], intermediate_size=S["inter"],
                        num_hidden_layers=max(3, S["layers"]), num_attention_heads=S["heads"],
                        num_key_value_heads=S["kv"], max_position_embeddings=S["prompt"] + 8)
    model = T.LlamaForCausalLM(cfg).to(DTYPE).eval()
prompt = torch.randint(0, S["vocab"], (1, S["prompt"]), device=DEVICE)
""",
    "mlp": """
width = S["hidden"] * 4
mlp = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, width))
mlp = mlp.to(DEVICE).eval()
""",
    "lora": """
from peft import LoraConfig, get_peft_model
with torch.device(DEVICE):
    cfg = T.LlamaConfig(vocab_size=S["vocab"], hidden_size=S["hidden"], intermediate_size=S["inter"],
                        num_hidden_layers=S["layers"], num_attention_heads=S["heads"], num_key_value_heads=S["kv"],
                        max_position_embeddings=S["prompt"] + 8)
    lora = get_peft_model(T.LlamaForCausalLM(cfg).to(DTYPE), LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
lora = lora.eval()
prompt = torch.randint(0, S["vocab"], (1, S["prompt"]), device=DEVICE)
""",
    "int8": QUANTIZED.format(config="Int8WeightOnlyConfig()"),
    "int4": QUANTIZED.format(config="Int4WeightOnlyConfig(group_size=32)"),
    "float8": QUANTIZED.format(config="Float8WeightOnlyConfig()"),
    "blocks32": """
class Block(torch.nn.Module):
    def __init__(self, index, width):
        super().__init__()
        self.index, self.lin = index, torch.nn.Linear(width, width)
    def forward(self, x):
        return torch.tanh(self.lin(x)) * (self.index + 1)
blocks = torch.nn.Sequential(*[Block(i, S["hidden"]) for i in range(32)]).to(DEVICE).eval()
xs = torch.randn(S["batch"] * 8, S["hidden"], device=DEVICE)
""",
    "unet": """
from diffusers import UNet2DConditionModel
unet = UNet2DConditionModel(
    sample_size=32, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(32, 64),
    down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
    cross_attention_dim=32, attention_head_dim=8, norm_num_groups=8,
).to(DEVICE).eval()
latents, step = torch.randn(2, 4, 32, 32, device=DEVICE), torch.tensor([10], device=DEVICE)
text = torch.randn(2, 8, 32, device=DEVICE)
""",
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
step = maybe_compile(model.forward, mode="reduce-overhead", fullgraph=True)
# As generate does: one cache, allocated before the first compiled call (its tensors then have static addresses,
# which CUDA graphs need: allocated lazily inside the compiled prefill, every step re-records and recompiles) and
# reset in place for each generation.
cache = T.StaticCache(config=model.config, max_cache_len=S["prompt"] + S["new"] + 8)
cache.early_initialization(batch_size=1, num_heads=S["kv"], head_dim=S["hidden"] // S["heads"], dtype=DTYPE,
                           device=DEVICE)
def decode(ids, new, times=None):
    cache.reset()
    pos, tokens = torch.arange(ids.shape[1], device=DEVICE), []
    with torch.no_grad():
        for i in range(new):
            start = time.perf_counter()
            torch.compiler.cudagraph_mark_step_begin()  # the last step's outputs are read: CUDA graphs may reuse them
            logits = step(input_ids=ids, past_key_values=cache, cache_position=pos, use_cache=True).logits
            ids = logits[:, -1:].argmax(-1)
            tokens.append(int(ids))  # waits for the GPU
            if times is not None and i:  # the decode steps, not the prefill
                times.append(time.perf_counter() - start)
            pos = pos[-1:] + 1
    return tokens
print("RESULT", decode(prompt, S["new"])[-4:])
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


FORWARD_RESULT = """
sync()
print("RESULT", round(float(logits.float().abs().mean()), 4))
"""
QUANTIZED_CELL = (
    """
with torch.no_grad():
    logits = maybe_compile(qnet)(xq)
"""
    + FORWARD_RESULT
)

FAMILIES = {
    "autocast": (
        "layers3",
        """
with torch.no_grad(), torch.autocast(DEVICE, dtype=torch.bfloat16):
    logits = maybe_compile(model)(prompt).logits
"""
        + FORWARD_RESULT,
    ),
    "inference": (
        "layers3",
        """
with torch.inference_mode():
    logits = maybe_compile(model)(prompt).logits
"""
        + FORWARD_RESULT,
    ),
    "dynamic": (
        "mlp",
        """
compiled, total = maybe_compile(mlp), 0.0
with torch.no_grad():
    for batch in (2, 4, 8):
        xb = torch.randn(batch * S["batch"], width, device=DEVICE, generator=torch.Generator(DEVICE).manual_seed(batch))
        torch._dynamo.mark_dynamic(xb, 0)
        total += float(compiled(xb).float().abs().mean())
print("RESULT", round(total, 4))
""",
    ),
    "shapeless": (
        "mlp",
        """
compiled, total = maybe_compile(mlp, dynamic=True), 0.0
with torch.no_grad():
    for batch in (3, 5):
        xb = torch.randn(batch * S["batch"], width, device=DEVICE, generator=torch.Generator(DEVICE).manual_seed(batch))
        total += float(compiled(xb).float().abs().mean())
print("RESULT", round(total, 4))
""",
    ),
    "lora": (
        "lora",
        """
with torch.no_grad():
    logits = maybe_compile(lora)(input_ids=prompt).logits
"""
        + FORWARD_RESULT,
    ),
    "int8": ("int8", QUANTIZED_CELL),
    "int4": ("int4", QUANTIZED_CELL),
    "float8": ("float8", QUANTIZED_CELL),
    "regional": (
        "layers3",
        """
with torch.no_grad():
    for layer in model.model.layers if COMPILE else ():
        layer.compile()
    logits = model(prompt).logits
"""
        + FORWARD_RESULT,
    ),
    "blocks32": (
        "blocks32",
        """
with torch.no_grad():
    for block in blocks if COMPILE else ():
        block.compile()
    logits = blocks(xs)
"""
        + FORWARD_RESULT,
    ),
    "unet": (
        "unet",
        """
with torch.no_grad():
    logits = maybe_compile(unet)(latents, step, encoder_hidden_states=text).sample
"""
        + FORWARD_RESULT,
    ),
}
CELLS.update(FAMILIES)
GPU_ONLY = ("autotune", "int4", "float8")

OTHER_PROMPT = {
    "generate": """
with torch.no_grad():
    out = model.generate(prompt[:, S["prompt"] // 3 :], max_new_tokens=S["new"], do_sample=False, **kwargs)
sync()
print("RESULT", out[0, -4:].tolist())
""",
    "decode": """print("RESULT", decode(prompt[:, S["prompt"] // 3 :], S["new"])[-4:])""",
}

# --profile: the compiled cell under cProfile (its whole time, the magic's restore included); the 30 functions with the
# most cumulative time follow a PROFILE_TOP line. --profile sample: under a stack sampler instead (_stack_sampler.py),
# which does not slow the cell's many small calls.
PROFILED = """
import cProfile as _cp, pstats as _ps, io as _io
_prof = _cp.Profile()
_prof.enable()
try:
    if {magic!r}:
        get_ipython().run_cell_magic("compile_cache", {magic!r}, {cell!r})
    else:
        get_ipython().ex({cell!r})
finally:
    _prof.disable()
    _text = _io.StringIO()
    _ps.Stats(_prof, stream=_text).sort_stats("cumulative").print_stats(30)
    print("PROFILE_TOP")
    print(_text.getvalue())
"""
SAMPLED = """
from benchmarks._stack_sampler import StackSampler as _Sampler
with _Sampler() as _sampler:
    if {magic!r}:
        get_ipython().run_cell_magic("compile_cache", {magic!r}, {cell!r})
    else:
        get_ipython().ex({cell!r})
print("PROFILE_TOP")
print(_sampler.report(top=120))
"""

# torch_precompile's build cell: the hashes of torch's and Triton's files that Inductor takes once per process,
# taken before the compiled cell, as our %load_ext takes them in the background (the same function; importing it
# patches nothing).
HASH_TORCH = """
from jupyter_compile_cache.torch_adapter.compiler import hash_torch_and_triton
hash_torch_and_triton()
"""

# Decode cost per call, as users pay it at steady state: the median of the decode steps of 10 more generations.
PER_CALL = """
import statistics
times = []
for _ in range(10):
    decode(prompt, S["new"], times)
print("PER_CALL_MS", round(statistics.median(times) * 1000, 4))
"""

# After a compiled cell: torch's own hit/miss counters, its phase timings (CUDA-graph capture is
# CUDAGraphNode.record: per-process work no cache carries) and the files in the cache dir.
STATS = """
import json as _j, os as _o
from torch._dynamo.utils import counters as _c, compilation_time_metrics as _m
_keep = {{"inductor": ("fxgraph_cache_hit", "fxgraph_cache_miss", "async_compile_cache_miss"),
         "aot_autograd": ("autograd_cache_hit", "autograd_cache_miss"),
         "dynamo_cache": ("dynamo_cache_hit", "dynamo_cache_miss"), "stats": ("unique_graphs",),
         "jupyter_compile_cache": ("precompile_fallback", "precompile_bypass")}}
print(_j.dumps({{"counters": {{f"{{g}}.{{n}}": _c[g][n] for g, ns in _keep.items() for n in ns if _c[g][n]}},
    "phases_s": {{k: round(sum(v), 3) for k, v in sorted(_m.items(), key=lambda kv: -sum(kv[1]))[:8]}},
    "cudagraph_record_s": round(sum(_m.get("CUDAGraphNode.record", [])), 3),
    "files": sum(len(f) for _, _, f in _o.walk({cache_dir!r}))}}))
"""


def run_workload(
    name: str,
    size: str,
    device: str,
    work: str,
    case_timeout: float,
    cases: tuple[str, ...] = CASES,
    profile: str | None = None,
    think: float = 0.0,
    hub: str | None = None,
    repeat: int = 1,
) -> dict:
    build, cell = CELLS[name]
    store = os.path.join(work, name, "store")
    dirs = {case: os.path.join(work, name, case) for case in CASES}
    mega = os.path.join(work, name, "mega.bin")
    row: dict = {"workload": name}
    share = os.path.join(work, name, "share")
    os.makedirs(share, exist_ok=True)
    times: dict[str, list[float]] = {}
    runs = [(case, i) for case in cases for i in range(repeat if case in REPEATED else 1)]
    for case, i in runs:
        again = f"-{i}" if i else ""  # each kernel of a repeated case starts as the first did: an empty dir and store
        cache_dir = dirs["cold"] if case == "torch_warm" else dirs[case] + again
        env = {"TORCHINDUCTOR_CACHE_DIR": cache_dir, "JUPYTER_COMPILE_CACHE_DIR": store}
        if case in ("ours_cold", "ours_hub", "ours_staged"):
            env["JUPYTER_COMPILE_CACHE_HUB"] = hub or f"file://{share}"
        if case in ("ours_hub", "ours_staged"):  # a colleague: nothing local
            env["JUPYTER_COMPILE_CACHE_DIR"] = os.path.join(work, name, f"store_{case}{again}")
        if case == "ours_staged":
            env["JPY_SESSION_NAME"] = _notebook(work, name, size, device, build, cell)
        kernel_cmd = None
        if case == "ours_warm":
            cache_dir = env["TORCHINDUCTOR_CACHE_DIR"] = dirs[case]  # one dir for all: it selects the template
            env["JUPYTER_COMPILE_CACHE_RUNTIME_DIR"] = _runtime(work)
            kernel_cmd = WARM_KERNEL_CMD
            if i == 0:
                row["ours_warm_template_s"] = _template_for(env, case_timeout)
            shutil.rmtree(cache_dir, ignore_errors=True)  # as ours: the bundle restores into an empty dir
        if case == "torch_precompile":
            shutil.rmtree(cache_dir, ignore_errors=True)
            shutil.copytree(dirs["ours"], cache_dir)
        k = KernelRunner(env, case_timeout, kernel_cmd)
        if kernel_cmd is not None:
            row.setdefault(f"{case}_started", []).append(_start_record(k))
        try:
            # A notebook loads the extension in its first cell; the compiler imports it starts overlap the build.
            row[f"{case}_load_ext"] = k.run("%load_ext jupyter_compile_cache")[0] if case.startswith("ours") else 0.0
            row[f"{case}_build"], _ = k.run(
                SETUP.format(size=SIZES[size], device=device, compile_=case != "eager")
                + BUILD[build]
                + (HASH_TORCH if case == "torch_precompile" else "")
            )
            if case == "mega":
                row["mega_load_s"], _ = k.run(f"torch.compiler.load_cache_artifacts(open({mega!r}, 'rb').read())")
            code = f"torch._dynamo.config.caching_precompile = True\n{cell}" if case == "torch_precompile" else cell
            body = f"%%compile_cache real-{name}\n{code}" if case.startswith("ours") else code
            time.sleep(think)  # a user reading before running the cell: background work (ours) may finish meanwhile
            if profile and case in ("eager", "ours", "ours_staged", "torch_warm", "torch_precompile"):
                body = (SAMPLED if profile == "sample" else PROFILED).format(
                    magic=f"real-{name}" if case.startswith("ours") else "", cell=code
                )
            row[case], out = k.run(body)
            times.setdefault(case, []).append(row[case])
            if profile and "PROFILE_TOP" in out:
                row[f"{case}_profile"] = out.split("PROFILE_TOP\n", 1)[1]
                out = out.split("PROFILE_TOP\n", 1)[0]
            row[f"{case}_result"] = next((line for line in out.splitlines() if line.startswith("RESULT")), None)
            if case.startswith("ours"):
                row[f"{case}_said"] = [line for line in out.splitlines() if "compile_cache" in line]
            if case != "eager":
                _, stats = k.run(STATS.format(cache_dir=cache_dir))
                row[f"{case}_stats"] = json.loads(stats.strip().splitlines()[-1])
            if name in OTHER_PROMPT and case != "eager":
                # PGO: a prompt of another length; in the restored kernel it must compile nothing the cold one had
                other = (
                    OTHER_PROMPT[name]
                    if not case.startswith("ours")
                    else f"%%compile_cache real-{name}-other\n{OTHER_PROMPT[name]}"
                )
                row[f"{case}_other_prompt"], out = k.run(other)
                _, stats = k.run(STATS.format(cache_dir=cache_dir))
                after = json.loads(stats.strip().splitlines()[-1])
                row[f"{case}_other_prompt_new"] = {
                    key: n - row[f"{case}_stats"]["counters"].get(key, 0)
                    for key, n in after["counters"].items()
                    if n != row[f"{case}_stats"]["counters"].get(key, 0)
                }
                row[f"{case}_other_prompt_result"] = next((x for x in out.splitlines() if x.startswith("RESULT")), None)
                if case.startswith("ours"):
                    row[f"{case}_other_prompt_said"] = [x for x in out.splitlines() if "compile_cache" in x]
            if name == "decode" and case in ("cold", "torch_warm", "ours"):
                _, out = k.run(PER_CALL)
                row[f"{case}_per_call_ms"] = float(out.split()[-1])
            if case == "cold":
                k.run(f"open({mega!r}, 'wb').write(torch.compiler.save_cache_artifacts()[0])")
            print(f"{name:9s} {case:10s} {row[case]:7.2f} s", file=sys.stderr, flush=True)
        except (TimeoutError, RuntimeError) as exc:  # one case failing or hanging leaves the others to measure
            row[case] = None
            row[f"{case}_error"] = str(exc)[:2000]
            print(f"{name:9s} {case:10s} FAILED: {str(exc).splitlines()[0]}", file=sys.stderr, flush=True)
        finally:
            k.close()
    for case, seconds in times.items():
        if len(seconds) > 1:  # the median of the case's kernels; each kernel's time kept beside it
            row[f"{case}_runs"], row[case] = seconds, statistics.median(seconds)
    return row


WARM_KERNEL_CMD = [sys.executable, "-m", "jupyter_compile_cache.kernels.launcher", "-f", "{connection_file}"]


def _runtime(work: str) -> str:
    """The warm kernel's private runtime folder for this run (its templates)."""
    folder = os.path.join(work, "runtime")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    return folder


def _template_for(env: dict[str, str], timeout: float) -> float:
    """A warm template that fits `env`, made by a first kernel of the warm spec (cold, untimed) if none fits; the
    seconds until it was ready."""
    from jupyter_compile_cache.kernels.launcher import templates
    from jupyter_compile_cache.kernels.template_fit import install_stamp

    full = {**os.environ, "PYTHONWARNINGS": "ignore", **env}
    start = time.perf_counter()
    KernelRunner(env, timeout, WARM_KERNEL_CMD).close()
    while time.perf_counter() - start < 600:
        if any(t.mismatch(sys.executable, full, install_stamp()) is None for t in templates(_runtime_of(env))):
            return time.perf_counter() - start
        time.sleep(0.2)
    raise TimeoutError("the warm template did not get ready in 600 s")


def _runtime_of(env: dict[str, str]) -> str:
    return env["JUPYTER_COMPILE_CACHE_RUNTIME_DIR"]


def _start_record(k: KernelRunner) -> dict:
    """How the warm kernel started (forked or cold, and why), as the launcher wrote it beside the connection file."""
    try:
        with open(start_record_path(k.km.connection_file)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def _notebook(work: str, name: str, size: str, device: str, build: str, cell: str) -> str:
    """The notebook the ours_staged kernel serves: the cells that case runs, saved as a Jupyter server would."""
    sources = [
        "%load_ext jupyter_compile_cache",
        SETUP.format(size=SIZES[size], device=device, compile_=True) + BUILD[build],
        f"%%compile_cache real-{name}\n{cell}",
    ]
    if name in OTHER_PROMPT:  # the cell of another prompt length, which the case runs next
        sources.append(f"%%compile_cache real-{name}-other\n{OTHER_PROMPT[name]}")
    cells = [
        {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": src} for src in sources
    ]
    path = os.path.join(work, name, f"{name}.ipynb")
    with open(path, "w") as f:
        json.dump({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, f)
    return path


def total(row: dict, case: str) -> float | None:
    """What the user waits for from a new kernel: %load_ext (ours), the build cell and the compiled cell."""
    if row.get(case) is None:
        return None
    return row.get(f"{case}_load_ext", 0.0) + row.get(f"{case}_build", 0.0) + row[case]


def _c(row: dict, case: str) -> str:
    """A case's seconds; "-" for a case not run, "failed" for one that ran and failed."""
    if row.get(case) is None:
        return "failed" if f"{case}_error" in row else "-"
    return f"{row[case]:.2f}"


def _x(a: float | None, b: float | None, digits: int = 2) -> str:
    return "-" if a is None or not b else f"{a / b:.{digits}f}x"


def table(job: Job, rows: list[dict], hub: str = "a shared-folder hub") -> None:
    headers = [
        "workload", "eager", "torch cold", "torch warm", "mega (+load)", "ours cold", "**ours restored**", "/eager",
        "/torch warm", "/cold", "ours restored, warm kernel", "/torch warm",
    ]  # fmt: skip
    cells = []
    for r in rows:
        ours, warm = r.get("ours"), r.get("ours_warm")
        cells.append([
            r["workload"], _c(r, "eager"), _c(r, "cold"), _c(r, "torch_warm"),
            f"{_c(r, 'mega')} (+{_c(r, 'mega_load_s')})", _c(r, "ours_cold"), f"**{_c(r, 'ours')}**",
            _x(ours, r.get("eager")), _x(ours, r.get("torch_warm")), _x(ours, r.get("cold"), 3),
            _c(r, "ours_warm"), _x(warm, r.get("torch_warm")),
        ])  # fmt: skip
    job.table(headers, cells, title="Whole cell, seconds, one fresh kernel per case.")
    headers = [
        "workload", "eager", "torch cold", "torch warm", "ours restored", "/eager", "/torch warm", "ours, warm kernel",
        "/torch warm",
    ]  # fmt: skip
    cells = []
    for r in rows:
        t = {case: total(r, case) for case in ("eager", "cold", "torch_warm", "ours", "ours_warm")}
        t.update({key: value for key, value in r.items() if key.endswith("_error")})
        cells.append([
            r["workload"], _c(t, "eager"), _c(t, "cold"), _c(t, "torch_warm"), f"**{_c(t, 'ours')}**",
            _x(t["ours"], t["eager"]), _x(t["ours"], t["torch_warm"]), _c(t, "ours_warm"),
            _x(t["ours_warm"], t["torch_warm"]),
        ])  # fmt: skip
    title = "From a new kernel to the cell's answer (%load_ext + build cell + compiled cell), seconds:"
    job.table(headers, cells, title=title)
    if any(r.get("ours_hub") is not None or r.get("ours_staged") is not None for r in rows):
        headers = [
            "workload", "eager", "torch warm", "pulled by the cell", "**fetched at %load_ext (notebook known)**",
            "/eager", "/torch warm",
        ]  # fmt: skip
        cells = []
        for r in rows:
            staged = r.get("ours_staged")
            cells.append([
                r["workload"], _c(r, "eager"), _c(r, "torch_warm"), _c(r, "ours_hub"), f"**{_c(r, 'ours_staged')}**",
                _x(staged, r.get("eager")), _x(staged, r.get("torch_warm")),
            ])  # fmt: skip
        job.table(headers, cells, title=f"A colleague's new kernel, the bundle on {hub} (compiled cell, seconds):")


OPTIONS = [
    option("--size", choices=sorted(SIZES), default="tiny"),
    option("--device", default="cpu"),
    option(
        "--workloads",
        default=",".join(n for n in CELLS if n not in FAMILIES),
        help="comma-separated, of: " + ", ".join(CELLS) + "; families: all of " + ", ".join(FAMILIES),
    ),
    option("--cell-timeout", type=float, default=600.0, help="seconds one cell may take (default 600)"),
    option("--cases", default=",".join(CASES), help="comma-separated, of: " + ", ".join(CASES)),
    option(
        "--think",
        type=float,
        default=0.0,
        help="seconds between the build cell and the compiled cell, in every case (default 0: Run All)",
    ),
    option(
        "--profile",
        nargs="?",
        const="cprofile",
        choices=("cprofile", "sample"),
        help="the compiled cell of eager, torch_warm, torch_precompile, ours and ours_staged under cProfile, or "
        "under a stack sampler (sample)",
    ),
    option(
        "--hub",
        default=None,
        help="the hub of ours_cold, ours_hub and ours_staged (default: a shared folder); a redis:// URL through "
        "benchmarks/slow_link.py measures a colleague across a network",
    ),
    option(
        "--repeat",
        type=int,
        default=1,
        help="kernels for each of " + ", ".join(REPEATED) + " (default 1); the table shows their median",
    ),
]


def run(job: Job) -> None:
    args = job.args
    cases = tuple(c for c in CASES if c in args.cases.split(","))
    needing = (
        ("torch_warm", "cold"), ("mega", "cold"), ("ours", "ours_cold"), ("ours_warm", "ours_cold"),
        ("ours_hub", "ours_cold"), ("torch_precompile", "ours"),
    )  # fmt: skip
    for case, needs in (*needing, ("ours_staged", "ours_cold")):
        if case in cases and needs not in cases:
            raise SystemExit(f"--cases: {case} needs {needs}, which makes its caches")
    asked = [n for w in args.workloads.split(",") for n in (FAMILIES if w == "families" else [w]) if n]
    names = [n for n in asked if n not in GPU_ONLY or args.device == "cuda"]
    job.meta |= {"size": args.size, "device": args.device, "think_s": args.think}
    job.meta |= {"hub": args.hub or "a shared folder", "repeat": args.repeat}
    rows = []
    with tempfile.TemporaryDirectory(prefix="real-work-") as work:
        for name in names:
            rows.append(
                run_workload(
                    name,
                    args.size,
                    args.device,
                    work,
                    args.cell_timeout,
                    cases,
                    args.profile,
                    args.think,
                    args.hub,
                    args.repeat,
                )
            )
            job.keep(rows=rows)
    table(job, rows, f"the hub {args.hub}" if args.hub else "a shared-folder hub")
