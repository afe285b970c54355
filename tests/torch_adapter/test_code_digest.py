"""code_digest.py: the digest of the code a function can reach, which keeps Dynamo precompile entries from running
stale code."""

from __future__ import annotations

import types

import torch

from jupyter_compile_cache.torch_adapter.code_digest import changed_parts, code_digest, code_parts


def _cell(source: str, filename: str) -> dict:
    """Run source like a notebook cell: module __main__-like namespace, a per-kernel file name."""
    ns = {"__name__": "__main__", "torch": torch}
    exec(compile(source, filename, "exec"), ns)
    return ns


NET = """
SCALE = 2.0
def helper(x):
    return x.relu()
class Block(torch.nn.Module):
    def forward(self, x):
        return x * 3
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(4, 4)
        self.b = Block()
    def forward(self, x):
        return self.b(helper(self.l(x)).sin()) * SCALE
"""


def _digest(source: str, filename: str = "/tmp/ipykernel_1/1.py") -> str:
    ns = _cell(source, filename)
    torch.manual_seed(0)
    return code_digest(ns["Net"]().forward)


def test_digest_is_stable_across_kernels_with_other_cell_filenames():
    assert _digest(NET, "/tmp/ipykernel_1/111.py") == _digest(NET, "/tmp/ipykernel_2/222.py")


def test_digest_changes_when_forward_helper_global_or_submodule_changes():
    base = _digest(NET)
    assert _digest(NET.replace(".sin()", ".tanh()")) != base
    assert _digest(NET.replace("x.relu()", "x.abs()")) != base
    assert _digest(NET.replace("SCALE = 2.0", "SCALE = 3.0")) != base
    assert _digest(NET.replace("x * 3", "x * 4")) != base


def test_digest_sees_closures_and_defaults():
    def make(k):
        def f(x, y=1):
            return x * k + y

        return f

    assert code_digest(make(2)) != code_digest(make(3))
    g = types.FunctionType(make(2).__code__, make(2).__globals__, "f", (5,), make(2).__closure__)
    assert code_digest(g) != code_digest(make(2))


def test_library_modules_digest_is_stable_across_instances():
    # torch classes are named, not walked (the fingerprint pins torch), so two equal models digest equally
    a = torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True)
    b = torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True)
    assert code_digest(a.forward) == code_digest(b.forward)
    c = torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, norm_first=True)
    assert code_digest(a.forward) != code_digest(c.forward)  # a constant attribute differs


class _Scale(torch.nn.Module):
    def __init__(self, s: float) -> None:
        super().__init__()
        self.s = s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.s


class _TwoScales(torch.nn.Module):
    def __init__(self, a: float, b: float) -> None:
        super().__init__()
        self.a, self.b = _Scale(a), _Scale(b)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(x))


def test_digest_sees_every_submodules_constants():
    # Found on the GPU: each submodule's constants are walked as a temporary dict; a freed dict's id came back for
    # the next submodule, which then counted as already seen. The second submodule's constant was invisible (stale
    # code could be restored) and the digest depended on memory reuse (a false "stale" in another process).
    assert code_digest(_TwoScales(1.0, 2.0).forward) != code_digest(_TwoScales(1.0, 3.0).forward)
    assert code_digest(_TwoScales(1.0, 2.0).forward) == code_digest(_TwoScales(1.0, 2.0).forward)


def _parts(source: str) -> dict[str, str]:
    ns = _cell(source, "/tmp/ipykernel_1/1.py")
    torch.manual_seed(0)
    return code_parts(ns["Net"]().forward)


def test_the_digest_ignores_lines_added_above_the_model():
    # torch names entries by the first line: the digest, which finds them by their code, must not move with it
    assert _digest("import math\n# tidied\n\n" + NET) == _digest(NET)
    assert _parts("import math\n# tidied\n\n" + NET) == _parts(NET)


def test_parts_say_where_the_code_changed():
    base = _parts(NET)
    assert set(base) == {"Net.forward", "helper", "SCALE", "self (Net)"}
    assert changed_parts(base, _parts(NET.replace("x.relu()", "x.abs()"))) == ["helper"]
    assert changed_parts(base, _parts(NET.replace("SCALE = 2.0", "SCALE = 3.0"))) == ["SCALE"]
    assert changed_parts(base, _parts(NET.replace(".sin()", ".tanh()"))) == ["Net.forward"]
    # a submodule's code: only the module the method belongs to differs, so it is named
    assert changed_parts(base, _parts(NET.replace("x * 3", "x * 4"))) == ["self (Net)"]
    assert changed_parts(base, base) == []


PACKAGE = """
import uuid
SESSION_ID = uuid.uuid4().hex  # as diffusers' hub utilities: another value in every process
def tag(x):
    return x * len(SESSION_ID)
"""
DIGEST_OF_CALLER = """
import sys
sys.path.insert(0, sys.argv[1])
from {name} import tag
def forward(x):
    return tag(x)
from jupyter_compile_cache.torch_adapter.code_digest import code_digest
print(code_digest(forward))
"""


def test_a_package_installed_outside_site_packages_is_library_code_and_a_folder_of_the_users_is_not(tmp_path):
    # `pip install --target` (a folder on PYTHONPATH) puts a package beside its *.dist-info: library code, named and
    # not walked, so a module global that differs per process does not change the digest; the same code in a folder
    # of the user's is walked (an edit there must refuse a saved entry).
    import subprocess
    import sys

    source = tmp_path / "src"
    (source / "tracked_lib").mkdir(parents=True)
    (source / "tracked_lib" / "__init__.py").write_text(PACKAGE)
    (source / "pyproject.toml").write_text('[project]\nname = "tracked_lib"\nversion = "1.0"\n')
    target = tmp_path / "target"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--no-build-isolation",
         "--target", str(target), str(source)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    assert any(path.name.endswith(".dist-info") for path in target.iterdir())
    user = tmp_path / "user"
    (user / "own_lib").mkdir(parents=True)
    (user / "own_lib" / "__init__.py").write_text(PACKAGE)

    def digests(folder, name):
        script = DIGEST_OF_CALLER.format(name=name)
        return {
            subprocess.run(
                [sys.executable, "-c", script, str(folder)], check=True, capture_output=True, text=True, timeout=300
            ).stdout.strip()
            for _ in range(2)
        }

    assert len(digests(target, "tracked_lib")) == 1  # the same in two processes
    assert len(digests(user, "own_lib")) == 2  # walked: its uuid differs per process
