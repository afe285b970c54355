"""Which warm template a kernel launch may be forked from: one whose warm-up would have come out the same in that
launch. That is, it runs the same Python with the same installed files (`install_stamp`: the interpreter, every
distribution's metadata in the site folders, this package's own files), and every environment variable that could
have steered its warm-up has the launch's value (unset counts as a value): those it read through `os.environ`
(`EnvironReads`), and those native code reads when a library loads (CPython's `PYTHON*`, the loader's `LD_*`, the
locale and time zone, the OpenMP and BLAS runtimes, CUDA, torch's and Triton's C++: `NATIVE_NAMES` and
`NATIVE_PREFIXES`, named after reading their sources). Per-launch variables (`JPY_*`) never select a template: the
child gets them. Everything here is light: the launcher runs it on every kernel start.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import site
import sys
import threading
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from .protocol import TemplateProblem, TemplateTrouble

PER_LAUNCH_PREFIXES = ("JPY_",)
NATIVE_NAMES = frozenset({"HOME", "PATH", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TEMP", "TMP", "USER", "LOGNAME"})
NATIVE_PREFIXES = (
    "PYTHON",  # CPython at start-up (PYTHONPATH, PYTHONHASHSEED, PYTHONIOENCODING, ...)
    "LD_",  # the dynamic loader
    "LC_",  # the C library's locale
    "MALLOC_",
    "GLIBC_",
    "OMP_",  # OpenMP runtimes and BLAS libraries read their thread settings when they load
    "GOMP_",
    "KMP_",
    "MKL_",
    "OPENBLAS_",
    "GOTO",
    "BLIS_",
    "DNNL_",
    "ONEDNN_",
    "CUDA",  # the CUDA runtime and its libraries
    "CUBLAS",
    "CUDNN",
    "NCCL_",
    "NVIDIA_",
    "HIP",
    "ROCM",
    "HSA_",
    "TORCH",  # torch's C++ (c10::utils::get_env) and its Python, TORCHINDUCTOR_* and TORCHDYNAMO_* included
    "PYTORCH",
    "KINETO",
    "TRITON",
    "MLIR_",  # Triton's compiler
    "LLVM_",
)


def per_launch(name: str) -> bool:
    return name.startswith(PER_LAUNCH_PREFIXES)


def read_natively(name: str) -> bool:
    return name in NATIVE_NAMES or name.startswith(NATIVE_PREFIXES)


def template_env(env: dict[str, str]) -> dict[str, str]:
    """The environment a template for this launch starts with: the launch's, less its per-launch variables."""
    return {k: v for k, v in env.items() if not per_launch(k)}


def launch_key(python: str, env: dict[str, str], stamp: str) -> str:
    """What a launch looks like before any template is made for it: the name of the template being made for it
    (so that several launches at once start one)."""
    text = json.dumps([python, stamp, sorted(template_env(env).items())])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _our_files() -> list[str]:
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found = []
    for root, dirs, files in os.walk(package):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        found += [os.path.join(root, f) for f in files if f.endswith(".py")]
    return sorted(found)


def _site_dirs() -> list[str]:
    dirs = list(site.getsitepackages()) if hasattr(site, "getsitepackages") else []
    user = site.getusersitepackages() if hasattr(site, "getusersitepackages") else None
    return [d for d in [*dirs, user] if d and os.path.isdir(d)]


def install_stamp() -> str:
    """A digest of what is installed: the interpreter, each distribution's metadata folder and .pth file in the
    site folders (a pip install, upgrade or reinstall makes them anew), and this package's own files."""
    parts: list[Any] = []
    for path in [os.path.realpath(sys.executable), *_our_files()]:
        try:
            info = os.stat(path)
            parts.append([path, info.st_mtime_ns, info.st_size])
        except OSError:
            parts.append([path, None])
    for directory in _site_dirs():
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue
        for name in names:
            if name.endswith((".dist-info", ".egg-info", ".pth", ".egg-link")):
                try:
                    parts.append([directory, name, os.stat(os.path.join(directory, name)).st_mtime_ns])
                except OSError:
                    continue
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


@dataclass
class TemplateInfo:
    """What a ready template says about itself, in `<runtime dir>/<name>.json` beside its socket."""

    pid: int
    python: str
    stamp: str
    launch_key: str
    selecting: dict[str, str | None]  # variable -> the value it had for the template (None: unset)
    socket: str
    started: float
    warm_up_seconds: float
    holders: list[int] = field(default_factory=list)
    idle_seconds: float = 0.0  # it retires after this long without a fork (0: never)
    grace_seconds: float = 0.0  # and this long after the last process that launched from it ended

    def to_json(self) -> dict[str, Any]:
        return dict(vars(self))

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TemplateInfo:
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        return cls(**known)

    def mismatch(self, python: str, env: dict[str, str], stamp: str) -> TemplateProblem | None:
        """Why this template does not fit the launch (the first difference found), or None if it fits."""
        if python != self.python:
            return TemplateProblem(TemplateTrouble.OTHER_PYTHON, self.python)
        if stamp != self.stamp:
            return TemplateProblem(TemplateTrouble.PACKAGES_CHANGED)
        for name, value in self.selecting.items():
            if env.get(name) != value:
                return TemplateProblem(TemplateTrouble.VARIABLE_DIFFERS, name)
        for name in env:
            if read_natively(name) and not per_launch(name) and name not in self.selecting:
                return TemplateProblem(TemplateTrouble.VARIABLE_DIFFERS, name)
        return None


class EnvironReads:
    """Records the names read through `os.environ` or `os.environb` (`[]`, `.get`, `in`, `os.getenv`) by this thread
    while active, as text. A copy of the whole environment (`os.environ.copy()`, `dict(os.environ)`, `.items()`:
    what a subprocess call does) is not a read of each variable: it is not recorded."""

    BULK = frozenset({"copy", "__iter__", "__eq__", "items", "values", "__len__"})

    def __init__(self) -> None:
        self.names: set[str] = set()
        self._original: Any = None
        self._thread = threading.get_ident()

    def __enter__(self) -> EnvironReads:
        environ_type = type(os.environ)
        original = environ_type.__getitem__
        names, bulk, thread = self.names, self.BULK, self._thread

        def recording_getitem(environ: Any, key: str) -> str:
            if threading.get_ident() == thread:
                caller = sys._getframe(1)
                if caller.f_code.co_name not in bulk and not _copies_environ(caller):
                    # os.environb shares the class: a subprocess's PATH lookup reads b"PATH", a read of PATH
                    names.add(os.fsdecode(key))
            return original(environ, key)

        self._original = original
        environ_type.__getitem__ = recording_getitem  # type: ignore[method-assign]
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        type(os.environ).__getitem__ = self._original  # type: ignore[method-assign]


def _copies_environ(frame: Any) -> bool:
    """`dict(os.environ)` and `{**os.environ}` read every key from C, called from the copying frame: the frame that
    reads a key itself names os.environ with a subscript or `.get`, not with `dict(`/`**`."""
    import linecache

    first = last = frame.f_lineno
    with contextlib.suppress(AttributeError, IndexError, ValueError, TypeError):
        # the whole expression the frame is running: a `{**os.environ, ...}` may span lines (torch's
        # python_subprocess_env), and the frame's line is then its first, `env = {`
        start, end, _, _ = list(frame.f_code.co_positions())[frame.f_lasti // 2]
        if start and end and start <= frame.f_lineno <= end:
            first, last = start, end
    text = "".join(linecache.getline(frame.f_code.co_filename, n) for n in range(first, last + 1))
    return "dict(os.environ" in text or "**os.environ" in text or "environ.copy()" in text
