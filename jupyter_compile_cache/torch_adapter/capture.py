"""Which cache files one cell compiled or used.

torch keeps one cache dir for the whole process, so a cell's share of it is found by watching the cell:

* files created or rewritten while it ran (a listing with sizes and mtimes before, compared after);
* files it read (open_recorder.py sees every `open` in Python, including the imports of generated wrapper modules);
* shared libraries it loaded (new lines in /proc/self/maps: `dlopen` is out of Python's sight);
* what the processes it started read, each watched the same way (`UsedFiles`, in process_hook.py);
* the files of the bundle restored for it, so a re-save after a warm run keeps everything the next kernel needs.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from . import layers
from .open_recorder import OpenRecorder


def _inductor_cache_dir() -> str:
    # torch's own function once its compiler is imported; before that the same rule without the 0.8 s import.
    module = sys.modules.get("torch._inductor.runtime.cache_dir_utils")
    if module is not None and hasattr(module, "cache_dir"):
        return module.cache_dir()
    path = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if not path:
        import getpass
        import re
        import tempfile

        try:
            user = getpass.getuser()
        except (KeyError, ModuleNotFoundError, OSError):
            user = f"uid_{os.getuid()}" if hasattr(os, "getuid") else "unknown_user"
        path = os.path.join(tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))
    path = os.path.abspath(path)
    os.makedirs(path, exist_ok=True)
    return path


def export_cache_dirs() -> None:
    """Name torch's cache dir in this process's environment, so processes a cell starts (torchrun's ranks, a
    launcher's workers) compile into, and restore from, the dirs this process uses: torch's own rule, written down
    (torch does the same once its compiler loads). Triton's dir follows, inside it, unless TRITON_CACHE_DIR is set,
    which children inherit as it is."""
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = _inductor_cache_dir()


def cache_roots() -> dict[str, str]:
    """The cache roots torch will use in this kernel: {'inductor': dir, 'triton': dir (only if outside it)}."""
    inductor = _inductor_cache_dir()
    roots = {"inductor": os.path.realpath(inductor)}
    triton = os.environ.get("TRITON_CACHE_DIR")
    if triton:
        real = os.path.realpath(triton)
        if not (real == roots["inductor"] or real.startswith(roots["inductor"] + os.sep)):
            roots["triton"] = real
    else:
        roots["triton"] = os.path.join(roots["inductor"], "triton", "0")
    return roots


def _torch_named_roots() -> set[str]:
    """The cache roots as torch names them (its variables, absolute, symlinks not resolved)."""
    inductor = os.path.abspath(_inductor_cache_dir())
    triton = os.environ.get("TRITON_CACHE_DIR")
    return {inductor, os.path.abspath(triton) if triton else os.path.join(inductor, "triton", "0")}


def member_name(path: str, roots: dict[str, str]) -> str | None:
    """'inductor/<rel>' or 'triton/<rel>' for a path inside a root, else None."""
    return _name_under_roots(os.path.realpath(path), roots)


def _listed_member_name(path: str, roots: dict[str, str]) -> str | None:
    """`member_name` of a path `_listing` found: os.walk enters no linked folder, so unless the file itself is a
    link the path is already real, and resolving each of its parts again, file by file, is skipped."""
    return member_name(path, roots) if os.path.islink(path) else _name_under_roots(path, roots)


def _name_under_roots(real: str, roots: dict[str, str]) -> str | None:
    inductor = roots["inductor"]
    triton = roots.get("triton")
    if triton and not triton.startswith(inductor + os.sep) and real.startswith(triton + os.sep):
        return "triton/" + real[len(triton) + 1 :].replace(os.sep, "/")
    if real.startswith(inductor + os.sep):
        return "inductor/" + real[len(inductor) + 1 :].replace(os.sep, "/")
    return None


def _unfinished(name: str) -> bool:
    """A file a writer has not renamed into place yet (or never will: a process killed mid-write). torch writes
    `.<pid>.<thread>.tmp` beside the file; Triton a `tmp.pid_<pid>_<n>` folder."""
    return name.startswith(".") and name.endswith(".tmp")


def _listing(root: str) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for dirpath, dirnames, files in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith((".jcc-", "tmp.pid_"))]
        for fname in files:
            if _unfinished(fname):
                continue
            path = os.path.join(dirpath, fname)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            out[path] = (st.st_size, st.st_mtime_ns)
    return out


def listing(roots: dict[str, str]) -> dict[str, tuple[int, int]]:
    """{path: (size, mtime_ns)} of every file under the cache roots."""
    out: dict[str, tuple[int, int]] = {}
    for root in {roots["inductor"], roots.get("triton", roots["inductor"])}:
        out.update(_listing(root))
    return out


def all_files(roots: dict[str, str]) -> list[str]:
    return list(listing(roots))


def _mapped_libraries(roots: tuple[str, ...]) -> set[str]:
    """The libraries under ROOTS this process has loaded (torch's own thousands of mappings are not split)."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            lines = [line for line in f if ".so" in line and any(root in line for root in roots)]
    except OSError:
        return set()
    paths = (line.split(None, 5)[5].strip() for line in lines if line.count(" ") >= 5)
    return {path for path in paths if path.startswith(roots)}


def _is_keyed(path: str, roots: dict[str, str]) -> bool:
    name = member_name(path, roots)
    if name is None or not name.startswith("inductor/"):
        return False
    return layers.layer_of(name.split("/", 1)[1]) in ("fx_graph", "aot_autograd", "dynamo_precompile")


def probe_snippets() -> set[bytes]:
    """The sources of torch's CPU ISA probes: each ISA class's `*_code` snippet (VecISA._avx_code, VecAMX._amx_code,
    ...). Where torch's compiler is not loaded (the parent of a job's processes), read from cpu_vec_isa.py's source,
    as torch's build is: importing it would take torch and Dynamo (5 s on 2 cores) after the job."""
    module = sys.modules.get("torch._inductor.cpu_vec_isa")
    if module is None:
        snippets = _probe_snippets_from_source()
        if snippets:
            return snippets
        try:
            from torch._inductor import cpu_vec_isa as module
        except ImportError:
            return set()
    return {
        value.encode()
        for cls in vars(module).values()
        if isinstance(cls, type)
        for attr, value in vars(cls).items()
        if attr.endswith("_code") and isinstance(value, str)
    }


def _probe_snippets_from_source() -> set[bytes]:
    """The strings assigned to `*_code` names in the classes of torch's cpu_vec_isa.py: constants, or another such
    name's `.replace(a, b)` (torch's AMX-FP16 probe). Empty where the file is not found or one is written some other
    way: the caller imports the module then."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return set()
    if spec is None or not spec.submodule_search_locations:
        return set()
    path = os.path.join(list(spec.submodule_search_locations)[0], "_inductor", "cpu_vec_isa.py")
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return set()
    out = set()
    for cls in (node for node in tree.body if isinstance(node, ast.ClassDef)):
        known: dict[str, str] = {}
        for node in cls.body:
            target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
            value = getattr(node, "value", None)
            if not (isinstance(target, ast.Name) and target.id.endswith("_code") and value is not None):
                continue
            text = _string_of(value, known)
            if text is None:
                return set()
            known[target.id] = text
            out.add(text.encode())
    return out


def _string_of(node: Any, known: dict[str, str]) -> str | None:
    """A string constant, or `NAME.replace("a", "b")` of a string already known; None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "replace"):
        return None
    args = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    subject = node.func.value
    if isinstance(subject, ast.Name) and subject.id in known and len(args) == len(node.args) == 2 and not node.keywords:
        return known[subject.id].replace(args[0], args[1])
    return None


def _isa_probe_programs(paths: set[str]) -> set[str]:
    """torch's CPU ISA probe programs (each `*_code` snippet of torch's ISA classes as `<xx>/<key>.cpp`, built into
    `<key>.so` beside it): not kernels, rebuilt per machine by the prewarm thread or kept in the toolchain bundle."""
    if not any(path.endswith(".cpp") for path in paths):  # nothing to look at: torch's compiler not imported for it
        return set()
    probes = probe_snippets()
    sizes = {len(p) for p in probes}
    out = set()
    for path in paths:
        if not path.endswith(".cpp"):
            continue
        try:
            if os.path.getsize(path) not in sizes:
                continue
            with open(path, "rb") as f:
                if f.read() not in probes:
                    continue
        except OSError:
            continue
        stem = path[: -len(".cpp")]
        out |= {p for p in paths if p == path or p.startswith(stem + ".")}
    return out


@dataclass
class CellFiles:
    """The result of watching one cell."""

    files: dict[str, str] = field(default_factory=dict)  # member name -> path
    new_by_layer: dict[str, int] = field(default_factory=dict)  # files written by this cell, per layer
    created: int = 0  # of those, files no process had written before the cell (new paths)
    created_graphs: int = 0  # of those, entries of a graph layer (an FX graph, an AOTAutograd or precompile entry)
    created_files: dict[str, str] = field(default_factory=dict)  # those new paths: member name -> path
    probe_programs: list[str] = field(default_factory=list)  # torch's CPU ISA probes built during the cell
    processes: int = 0  # processes the cell started (its own children; they may start more)

    def layer_bytes(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for name, path in self.files.items():
            layer = layers.layer_of(name.split("/", 1)[1]) if name.startswith("inductor/") else "kernels"
            if layer is None:
                continue
            try:
                out[layer] = out.get(layer, 0) + os.path.getsize(path)
            except OSError:
                pass
        return out

    def compiled_new(self, layer_counts: dict[str, dict[str, int]], frames: int, restored: bool = False) -> bool:
        """Whether the cell compiled anything new (`frames`: the frames Dynamo compiled here; `restored`: whether a
        bundle was restored for it). Here, new files count only where some graph layer missed (a cache hit still writes
        the Triton kernels it bundles). In the processes the cell started, whose counters are out of sight: files at
        paths no process had written before; after a restore only a new graph entry counts there, since torch re-tunes
        kernels at run time."""
        if sum(n for layer_name, n in self.new_by_layer.items() if layer_name != "pgo") == 0:
            return False
        lookups = sum(  # not "written": files another process wrote are no lookup of this one's
            layer_counts.get(name, {}).get(kind, 0)
            for name in layers.GRAPH_LAYERS
            for kind in ("hits", "misses", "bypasses")
        )
        if (frames > 0 or lookups > 0) and not layers.only_graph_hits(layer_counts):
            return True
        if restored:
            return self.processes > 0 and self.created_graphs > 0
        return self.compiled_elsewhere() > 0

    def compiled_elsewhere(self) -> int:
        """New files the processes the cell started wrote (0 when it started none)."""
        return self.created if self.processes else 0


def all_precompile_keys(roots: dict[str, str]) -> set[str]:
    """Every Dynamo precompile entry in the cache dir (the API's `save`, which bundles the whole cache)."""
    try:
        return set(os.listdir(os.path.join(roots["inductor"], "dynamo")))
    except OSError:
        return set()


_RECORDER = OpenRecorder()  # one per process: a cell inside a cell shares it


class UsedFiles:
    """The files under the cache roots this process reads while started: opened in Python, or loaded as shared
    libraries (new lines in /proc/self/maps). A cell's capture, and a process the cell started, keep one each."""

    def __init__(self, roots: dict[str, str], recorder: OpenRecorder) -> None:
        self.roots = roots
        self._recorder = recorder
        self._libs_before: set[str] = set()

    def dirs(self) -> list[str]:
        dirs = [self.roots["inductor"]]
        if "triton" in self.roots and not self.roots["triton"].startswith(self.roots["inductor"] + os.sep):
            dirs.append(self.roots["triton"])
        return dirs

    def start(self) -> None:
        self._libs_before = _mapped_libraries(self._roots())
        # torch opens its files under the cache dir as its variable names it, which may be a symlink to the real
        # root (a cache dir on a scratch disk): both spellings are watched, and what is opened is resolved.
        self._recorder.start(tuple(r + os.sep for r in {*self.dirs(), *_torch_named_roots()}))

    def stop(self) -> None:
        self._recorder.stop()

    @property
    def processes(self) -> int:
        """Processes started while recording."""
        return self._recorder.processes

    def used(self) -> set[str]:
        """The real paths opened, and the libraries loaded under the roots, since `start` (stops it)."""
        self.stop()
        opened = {os.path.realpath(p) for p in self._recorder.opened}
        return opened | (_mapped_libraries(self._roots()) - self._libs_before)

    def _roots(self) -> tuple[str, ...]:
        return tuple(root + os.sep for root in self.dirs())


class CellCapture:
    def __init__(self, roots: dict[str, str], restored: Iterable[str] = ()) -> None:
        self.roots = roots
        self.restored = set(restored)
        self._restored_during: set[str] = set()  # written by our own restore while the cell ran
        self._before: dict[str, tuple[int, int]] = {}
        self._used = UsedFiles(roots, _RECORDER)

    def add_restored(self, paths: Iterable[str]) -> None:
        """Files a restore wrote while the cell ran (another version's, installed for a function's code): not the
        cell's work, so not new; carried into its bundle, like the restored bundle's files, only if used."""
        self.restored.update(paths)
        self._restored_during.update(paths)

    def start(self) -> None:
        self._before = {}
        for root in self._used.dirs():
            self._before.update(_listing(root))
        self._used.start()

    def stop(self) -> None:
        """Ends the recording (the body's end; `collect` calls it too)."""
        self._used.stop()

    def collect(self, dynamo_keys: set[str] | None = None, extra_paths: Iterable[str] = ()) -> CellFiles:
        """Files for the bundle. `dynamo_keys`: the precompile entries this cell owns (others are left out);
        `extra_paths`: files read elsewhere for it (its precompile records; what the processes it started read)."""
        opened = self._used.used()
        after: dict[str, tuple[int, int]] = {}
        for root in self._used.dirs():
            after.update(_listing(root))
        changed = {p for p, meta in after.items() if self._before.get(p) != meta} - self._restored_during
        processes = self._used.processes
        # Restored keyed entries (graphs, precompile entries) are always read through Python when used, so an
        # unopened one is provably stale (e.g. the graph of code since edited) and is not carried forward. Not so
        # when the cell started processes: what they read is out of sight, so everything restored is carried.
        carried = {
            p for p in self.restored if p in after and (processes or p in opened or not _is_keyed(p, self.roots))
        }
        wanted = changed | {p for p in opened if p in after} | carried
        wanted |= {p for p in extra_paths if p in after}
        probes = _isa_probe_programs(wanted & changed)  # never in a bundle: restored files are none
        wanted -= probes
        result = CellFiles(processes=processes, probe_programs=sorted(probes))
        for path in sorted(wanted):
            name = _listed_member_name(path, self.roots)
            if name is None:
                continue
            rel = name.split("/", 1)[1]
            layer = layers.layer_of(rel) if name.startswith("inductor/") else "kernels"
            if layer is None:
                continue
            if layer == "dynamo_precompile" and dynamo_keys is not None:
                parts = rel.split("/")
                if len(parts) >= 2 and parts[1] not in dynamo_keys:
                    continue
            result.files[name] = path
            if path in changed:
                result.new_by_layer[layer] = result.new_by_layer.get(layer, 0) + 1
                new_path = path not in self._before and layer != "pgo"
                result.created += new_path
                if new_path:
                    result.created_files[name] = path
                result.created_graphs += new_path and layer in layers.GRAPH_LAYERS
        return result
