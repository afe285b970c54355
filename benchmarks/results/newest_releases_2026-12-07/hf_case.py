"""One zoo model (tests/helpers/zoo_models.py) compiled in a cell of the script API, then whether Dynamo traced a
graph (`unique_graphs`) and whether the answer matches eager: `python hf_case.py llama` (run by matrix.sh)."""

import os
import sys

import torch
import transformers as T  # noqa: N812  (the zoo's expressions name it T)
from torch._dynamo.utils import counters

import jupyter_compile_cache as jcc

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "tests"))
from helpers.zoo_models import HF_MODELS  # noqa: E402

which = sys.argv[1]
model_expr, inputs_expr = HF_MODELS[which]
torch.manual_seed(0)
model = eval(model_expr, {"T": T, "torch": torch}).eval()
inputs = eval(inputs_expr, {"torch": torch})
with jcc.cell(which), torch.no_grad():
    compiled = torch.compile(model)(**inputs)
with torch.no_grad():
    eager = model(**inputs)
first = (compiled[0], eager[0]) if isinstance(compiled, tuple) else (compiled.to_tuple()[0], eager.to_tuple()[0])
print("RESULT", which, "graphs", counters["stats"]["unique_graphs"], "match", torch.allclose(*first, atol=1e-5))
