"""The environment a bundle was compiled in, and whether this kernel can use it.

Compiled artifacts are only valid for the same torch build, Triton, CUDA/HIP, GPU model and (for C++ kernels)
CPU instruction set. Each bundle stores the fingerprint of the kernel that saved it; `compare` says field by field
whether this kernel matches. GPU fields only matter for bundles holding GPU kernels, CPU ISA only for bundles
holding compiled C++ (`.so`) kernels, so a CPU-only bundle still restores on a GPU machine with the same torch.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import sys
from dataclasses import dataclass
from typing import Any

# Fields that must be equal for a bundle to be usable at all.
HARD_FIELDS = ("torch", "torch_git", "python", "platform")
GPU_FIELDS = ("cuda", "hip", "triton", "gpu_name", "gpu_capability")
CPU_FIELDS = ("cpu_isa",)
# Reported by `explain`, never blocking: torch's own cache keys include them, so a mismatch only costs hits.
SOFT_FIELDS = ("cpu_model", "inductor_config")

# CPU flags that decide which vectorised C++ kernels inductor emits (torch._inductor.cpu_vec_isa).
_ISA_FLAGS = (
    "avx2",
    "fma",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512dq",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "asimd",
    "sve",
)

_INDUCTOR_CONFIG_KEYS = ("max_autotune", "max_autotune_gemm", "cpp_wrapper", "freezing", "coordinate_descent_tuning")


@functools.cache
def _cpu_flags_and_model() -> tuple[str, str]:
    flags: set[str] = set()
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("flags", "Features") and not flags:
                    flags = set(value.split())
                elif key == "model name" and model in ("", platform.machine()):
                    model = value.strip()
    except OSError:
        pass
    isa = "+".join(flag for flag in _ISA_FLAGS if flag in flags)
    return f"{platform.machine()}:{isa}", model


@functools.cache  # metadata lookups scan sys.path; the answer cannot change within a process
def _package_version(*names: str) -> str | None:
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _inductor_config() -> dict[str, Any] | None:
    # Only once the compiler is imported (None: not known here): importing it would cost ~1 s in a cell with
    # nothing to compile, and a command outside a kernel would only see the defaults, not the kernel's settings.
    inductor_config = sys.modules.get("torch._inductor.config")
    if inductor_config is None:
        return None
    return {key: getattr(inductor_config, key, None) for key in _INDUCTOR_CONFIG_KEYS}


@functools.cache  # the installed files cannot change under a process that has not imported torch yet
def _torch_build_from_files() -> dict[str, Any]:
    """torch's version.py read as a file: the same values `torch.version` holds, without importing torch (1.5 s,
    250 MB), so `list` and `explain` stay instant outside a kernel. Empty when torch is not installed."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return {}
    values: dict[str, Any] = {}
    try:
        with open(os.path.join(list(spec.submodule_search_locations)[0], "version.py"), encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for node in tree.body:
            target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
            value = getattr(node, "value", None)
            if isinstance(target, ast.Name) and value is not None:
                try:
                    values[target.id] = ast.literal_eval(value)
                except ValueError:
                    continue
    except (OSError, SyntaxError):
        return {}
    return values


def _torch_build() -> dict[str, Any]:
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "version"):
        version = torch.version
        return {
            "__version__": str(torch.__version__),
            "git_version": getattr(version, "git_version", None),
            "cuda": version.cuda,
            "hip": getattr(version, "hip", None),
        }
    return _torch_build_from_files()


@dataclass(frozen=True)
class FieldCheck:
    field: str
    saved: Any
    current: Any
    blocking: bool  # a mismatch here makes the bundle unusable
    relevant: bool  # False when the bundle does not contain artifacts this field governs

    @property
    def ok(self) -> bool:
        return self.saved == self.current or not self.relevant or not self.checked

    @property
    def checked(self) -> bool:
        """False for a soft field this process cannot know (the inductor config before the compiler is loaded)."""
        return self.current is not None or self.field not in SOFT_FIELDS


def current(with_gpu: bool = True) -> dict[str, Any]:
    """This process's fingerprint. Cheap: no compiler import. `with_gpu` asks the GPU for its name, which imports
    torch (1.5-3.5 s) when it is not imported yet, on a machine with a GPU driver, once per GPU set (see `_gpu`);
    without it, torch's build is read from its files and the GPU fields are None (they only matter for bundles
    holding GPU kernels)."""
    gpu_name, gpu_capability = _gpu() if with_gpu else (None, None)
    build = _torch_build()
    cpu_isa, cpu_model = _cpu_flags_and_model()
    return {
        "torch": build.get("__version__"),
        "torch_git": build.get("git_version"),
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "platform": f"{sys.platform}-{platform.machine()}",
        "cuda": build.get("cuda"),
        "hip": build.get("hip"),
        "triton": _package_version("triton", "pytorch-triton", "pytorch-triton-rocm"),
        "gpu_name": gpu_name,
        "gpu_capability": gpu_capability,
        "cpu_isa": cpu_isa,
        "cpu_model": cpu_model,
        "inductor_config": _inductor_config(),
    }


def _gpu() -> tuple[str | None, str | None]:
    """The name and compute capability of the GPU torch uses first (None, None without one). Asking needs torch
    (3.3 s on a GPU host, for `jupyter-compile-cache run` before the job's own processes start): on an NVIDIA
    machine the answer is kept per driver, GPU set, visible-device settings and torch build, which are all it
    depends on, so the next process reads it instead."""
    if "torch" not in sys.modules:
        if not any(os.path.exists(path) for path in _GPU_DRIVER_FILES):
            return None, None  # no driver torch.cuda could use: torch would say so after a 1.5-5 s import
        key = _gpu_set_key()
        path = os.path.join(_gpu_answers_dir(), f"{key}.json") if key is not None else None
        if path is not None:
            try:
                with open(path, encoding="utf-8") as f:
                    name, capability = json.load(f)
                if all(isinstance(v, (str, type(None))) for v in (name, capability)):
                    return name, capability
            except (OSError, ValueError, TypeError):
                pass
        answer = _ask_torch_for_gpu()
        if path is not None:
            _keep_answer(path, answer)
        return answer
    return _ask_torch_for_gpu()


def _ask_torch_for_gpu() -> tuple[str | None, str | None]:
    import torch

    if not torch.cuda.is_available():
        return None, None
    return torch.cuda.get_device_name(), ".".join(map(str, torch.cuda.get_device_capability()))


# What the drivers torch.cuda works through make, on the host or passed into a container: NVIDIA's, ROCm's (torch
# reports HIP GPUs through torch.cuda), and WSL2's GPU device.
_GPU_DRIVER_FILES = ("/dev/nvidiactl", "/dev/nvidia0", "/proc/driver/nvidia", "/dev/kfd", "/dev/dxg")
_GPU_SELECTION = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")


def _gpu_set_key() -> str | None:
    """A digest of what decides the answer on an NVIDIA machine: the driver, every GPU it has (model, bus), which
    of them this process may see and in what order, and torch's build; None elsewhere (asked every time)."""
    root = "/proc/driver/nvidia"
    try:
        with open(os.path.join(root, "version"), encoding="utf-8") as f:
            driver = f.read()
        gpus = []
        for bus in sorted(os.listdir(os.path.join(root, "gpus"))):
            with open(os.path.join(root, "gpus", bus, "information"), encoding="utf-8") as f:
                gpus.append([bus, f.read()])
    except OSError:
        return None
    build = _torch_build_from_files()
    if not gpus or not build:
        return None
    selection = {name: os.environ.get(name) for name in _GPU_SELECTION}
    facts = [driver, gpus, selection, build.get("__version__"), build.get("cuda"), sys.executable]
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:24]


def _gpu_answers_dir() -> str:
    """Beside the default local store: the user's cache dir (platformdirs; `~/.cache/...` or XDG_CACHE_HOME)."""
    import platformdirs

    return os.path.join(platformdirs.user_cache_dir("jupyter_compile_cache", appauthor=False), "gpu")


def _keep_answer(path: str, answer: tuple[str | None, str | None]) -> None:
    """Written whole or not at all (a temp file renamed); a folder that cannot be written only costs the next
    process the question."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        temp = f"{path}.{os.getpid()}.tmp"
        with open(temp, "w", encoding="utf-8") as f:
            json.dump(list(answer), f)
        os.replace(temp, path)
    except OSError:
        pass


def digest(fingerprint: dict[str, Any]) -> str:
    """Short stable id of the blocking fields, used in version ids and hub keys."""
    blocking = {k: fingerprint.get(k) for k in HARD_FIELDS + GPU_FIELDS + CPU_FIELDS}
    return hashlib.sha256(json.dumps(blocking, sort_keys=True).encode()).hexdigest()[:12]


def compare(saved: dict[str, Any], now: dict[str, Any], uses_gpu: bool, uses_cpu_kernels: bool) -> list[FieldCheck]:
    checks = [FieldCheck(f, saved.get(f), now.get(f), True, True) for f in HARD_FIELDS]
    checks += [FieldCheck(f, saved.get(f), now.get(f), True, uses_gpu) for f in GPU_FIELDS]
    checks += [FieldCheck(f, saved.get(f), now.get(f), True, uses_cpu_kernels) for f in CPU_FIELDS]
    checks += [FieldCheck(f, saved.get(f), now.get(f), False, True) for f in SOFT_FIELDS]
    return checks
