"""The cells the kernel tests run: a small model with a helper and a global, and the cell that compiles it."""

DEFINE = """
import torch
torch.manual_seed(0)
SCALE = 2.0
def helper(x):
    return x.relu()
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(32, 64)
        self.l2 = torch.nn.Linear(64, 32)
    def forward(self, x):
        return self.l2(helper(self.l1(x)).sin()) * SCALE
model = Net()
x = torch.randn(8, 32)
"""

COMPILE = """%%compile_cache {name} {options}
with torch.no_grad():
    compiled = torch.compile(model)
    y = compiled(x)
    expected = model(x)
print("MATCHES_EAGER", torch.allclose(y, expected, atol=1e-5))
"""
