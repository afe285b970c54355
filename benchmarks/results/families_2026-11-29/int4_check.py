import sys, time, json, torch, warnings
warnings.filterwarnings("ignore")
import jupyter_compile_cache as jcc
from torchao.quantization import quantize_, Int4WeightOnlyConfig
torch.manual_seed(0)
width = 256
net = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, width))
net = net.to("cuda").to(torch.bfloat16)
quantize_(net, Int4WeightOnlyConfig(group_size=32))
x = torch.randn(16, width, device="cuda", dtype=torch.bfloat16)
with torch.no_grad():
    want = net(x)
start = time.perf_counter()
with jcc.cell("int4") as report:
    with torch.no_grad():
        got = torch.compile(net)(x)
    torch.cuda.synchronize()
print("RESULT", sys.argv[1], round(float(got.float().abs().mean()), 5), round(float(want.float().abs().mean()), 5), f"{time.perf_counter() - start:.2f}s")
