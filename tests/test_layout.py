"""The package's layers: only the torch adapter touches torch's private names (`torch._dynamo`, `torch._inductor`,
...), so a new torch release is met in one folder."""

from __future__ import annotations

import ast
import pathlib

import jupyter_compile_cache

PACKAGE = pathlib.Path(jupyter_compile_cache.__file__).parent


def _private_torch_names(tree: ast.AST) -> list[tuple[int, str]]:
    """Imports of, attribute chains into, and module-name strings of torch's private modules."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("torch._")]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torch._"):
            found.append((node.lineno, node.module or ""))
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            base = node.value
            if isinstance(base, ast.Name) and base.id == "torch":
                found.append((node.lineno, f"torch.{node.attr}"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("torch._"):
            found.append((node.lineno, node.value))
    return found


def test_only_the_torch_adapter_touches_torchs_private_names():
    outside = {
        f"{path.relative_to(PACKAGE)}:{line}: {name}"
        for path in PACKAGE.rglob("*.py")
        if "torch_adapter" not in path.parts
        for line, name in _private_torch_names(ast.parse(path.read_text()))
    }
    assert not outside, sorted(outside)


def test_the_check_sees_each_way_of_reaching_a_private_name():
    code = "import torch._dynamo\nfrom torch._inductor import config\ntorch._C\nsys.modules['torch._inductor.x']\n"
    assert [name for _, name in _private_torch_names(ast.parse(code))] == [
        "torch._dynamo",
        "torch._inductor",
        "torch._C",
        "torch._inductor.x",
    ]
