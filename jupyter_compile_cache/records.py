"""What a `%%compile_cache` cell asks for and what it did: the plain records the session hands to the magics, the
panel, the CLI and scripts. No behaviour beyond checking options, so every layer can import it."""

from __future__ import annotations

import getpass
import math
import socket
from dataclasses import asdict, dataclass, field
from typing import Any

from .settings import check_hub_url, check_namespace


def writer() -> str:
    """user@host, recorded in manifests and hub leases."""
    try:
        user = getpass.getuser()
    except Exception:
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


@dataclass
class CellOptions:
    """One cell's options; None means the session's setting (`CompileCache.<name>`)."""

    store: str | None = None
    restore: bool = True
    save: bool = True
    force_save: bool = False
    quiet: bool = False
    precompile: bool | None = None
    whole_cache: bool = False  # bundle every file in the cache dirs, not only this block's (API `save`)
    hub: str | None = None
    no_hub: bool = False
    namespace: str | None = None
    ttl: int | None = None
    wait: float = 0.0  # seconds to wait for a collaborator who is compiling the same NAME
    torch_remote: bool = False  # also point torch's own Redis caches (FX graph, AOTAutograd, autotune) at the hub

    def __post_init__(self) -> None:
        """The same rules as the magic's options, for scripts: a bad value is a ValueError naming the option."""
        if self.ttl is not None and (isinstance(self.ttl, bool) or not isinstance(self.ttl, int) or self.ttl < 1):
            raise ValueError(f"ttl: must be a whole number of seconds, 1 or more, not {self.ttl!r}")
        if not isinstance(self.wait, (int, float)) or not math.isfinite(self.wait) or self.wait < 0:
            raise ValueError(f"wait: must be a number of seconds, 0 or more, not {self.wait!r}")
        for option, value, check in (("namespace", self.namespace, check_namespace), ("hub", self.hub, check_hub_url)):
            try:
                if value is not None:
                    check(value)
            except ValueError as exc:
                raise ValueError(f"{option}: {exc}") from None


@dataclass
class RestoreResult:
    name: str
    source: str | None = None  # "local", "hub"; None when nothing was restored
    version: str | None = None
    files: int = 0
    bytes: int = 0
    seconds: float = 0.0
    skipped: list[str] = field(default_factory=list)  # why versions were not used
    uses_cpu_kernels: bool = False
    hub_url: str | None = None  # redacted
    pull_seconds: float = 0.0
    cold_seconds: float | None = None  # the cold run's time, recorded in the restored version
    hub_signed_elsewhere: bool = False  # every hub version seen was refused as signed with another secret

    @property
    def restored(self) -> bool:
        return self.source is not None


@dataclass
class CellReport:
    name: str
    ok: bool = True
    restore: RestoreResult | None = None
    saved_version: str | None = None
    saved_bytes: int = 0
    saved_files: int = 0
    save_seconds: float = 0.0  # writing the bundle into the local store
    pushed: bool = False
    body_seconds: float = 0.0
    # waiting for torch's compiler stack to import (and, for C++ kernels, the CPU probe): once per process
    waited_seconds: float = 0.0
    layers: dict[str, dict[str, int]] = field(default_factory=dict)  # hits/misses/bypasses/written per layer
    stale_rejected: int = 0
    precompile_fallbacks: int = 0  # functions whose precompile failed in torch and ran the plain way
    warnings: list[str] = field(default_factory=list)
    finished: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
