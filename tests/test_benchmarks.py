"""benchmarks/: one entry point (`python -m benchmarks`) and one harness (the arguments, the result file, the tables),
no `sys.path` edits; every benchmark's imports of its siblings and of the test harness name things that exist."""

from __future__ import annotations

import ast
import importlib.util
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
SCRIPTS = sorted(p for p in BENCHMARKS.glob("*.py") if not p.name.startswith("_") and p.stem != "harness")


def test_the_entry_point_lists_every_benchmark_with_what_it_measures():
    out = subprocess.run([sys.executable, "-m", "benchmarks"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    listed = {line.split()[0]: line for line in out.stdout.splitlines() if line.startswith("  ")}
    assert set(listed) == {p.stem for p in SCRIPTS}
    assert all(len(line.split()) > 3 for line in listed.values()), listed  # each says what it measures
    unknown = subprocess.run([sys.executable, "-m", "benchmarks", "nonesuch"], cwd=ROOT, capture_output=True, text=True)
    assert unknown.returncode == 2 and "no benchmark 'nonesuch'" in unknown.stderr


def test_one_harness_owns_the_arguments_the_result_file_and_the_tables():
    from benchmarks.harness import markdown_table

    assert markdown_table(["a", "b"], [[1, "x"], [2.5, ""]], "lr") == "| a | b |\n| --- | --: |\n| 1 | x |\n| 2.5 |  |"
    for script in SCRIPTS:
        code = script.read_text().split('"""', 2)[2]  # the docstring's tables are the script's documentation
        assert "|---" not in code and "---|" not in code, f"{script.name} writes a table by hand"
        tree = ast.parse(code)
        defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
        assert "run" in defined and "main" not in defined, f"{script.name}: a benchmark is `run(job)`, no main"
        for text in ("ArgumentParser(", "args.out", "__main__", "markdown_table("):
            assert text not in code, f"{script.name} has its own {text!r}: the harness's"


def test_a_benchmark_run_through_the_harness_writes_its_result_and_its_table(tmp_path):
    """hub_backends on a small bundle (a real redis-server and a shared folder): the table on stdout, and the result
    file with the machine, the command as typed without --out, the figures and the table, the table again in .md."""
    import json

    out = tmp_path / "results" / "hub.json"
    argv = ["hub_backends", "--sizes", "4", "--repeats", "1", "--out", str(out)]
    run = subprocess.run([sys.executable, "-m", "benchmarks", *argv], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "| code | backend | size | push s | pull s |" in run.stdout and "run 1:" in run.stderr
    result = json.loads(out.read_text())
    assert result["meta"]["command"] == "python -m benchmarks hub_backends --sizes 4 --repeats 1"
    assert {"date", "cpu", "cores", "python", "torch"} <= set(result["meta"])
    assert [(r["backend"], r["size_mb"]) for r in result["rows"]] == [("redis", 4), ("file", 4)]
    (table,) = result["tables"]
    assert table["headers"] == ["code", "backend", "size", "push s", "pull s"] and len(table["rows"]) == 2
    assert "| this checkout | file | 4 MB |" in out.with_suffix(".md").read_text()
    wrong = subprocess.run([sys.executable, "-m", "benchmarks", "hub_backends", "--sizes", "x"], cwd=ROOT,
                           capture_output=True, text=True)  # fmt: skip
    assert wrong.returncode == 2 and "usage: python -m benchmarks hub_backends" in wrong.stderr


def test_no_benchmark_edits_sys_path_and_each_import_of_ours_resolves():
    for script in SCRIPTS:
        tree = ast.parse(script.read_text())
        edits = [
            node.lineno
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr == "insert" and ast.unparse(node.value) == "sys.path"
        ]
        # many_small_files times two checkouts of the code against each other: the one it is given goes first
        assert not edits or script.stem == "many_small_files", (script.name, edits)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ("benchmarks", "tests"):
                path = ROOT.joinpath(*node.module.split(".")).with_suffix(".py")
                package = ROOT.joinpath(*node.module.split("."))
                if package.is_dir():  # `from benchmarks import bench`: the names are modules
                    missing = [a.name for a in node.names if not (package / f"{a.name}.py").exists()]
                else:
                    names = _top_level_names(path)
                    missing = [a.name for a in node.names if a.name not in names]
                assert not missing, f"{script.name}:{node.lineno}: {node.module} has no {missing}"
    assert importlib.util.find_spec("benchmarks.harness") is not None


def _top_level_names(path: pathlib.Path) -> set[str]:
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names
