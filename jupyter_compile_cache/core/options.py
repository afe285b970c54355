"""What a `%%compile_cache` cell or a store command is asked for: the options records and the checks of a bundle's
name, a hub's URL and a namespace that every front end applies. No behaviour beyond checking, so every layer can
import it."""

from __future__ import annotations

import getpass
import math
import socket
from dataclasses import dataclass

from ..storage.backends import check_url
from ..storage.bundle import check_name
from ..storage.namespace import check_namespace


def bundle_name(text: str) -> str:
    """TEXT if it is a valid bundle name (letters, digits, '.', '_', '-'), else a ValueError saying the rule: what
    the front ends check a NAME against, as the store does."""
    return check_name(text)


def hub_url(text: str) -> str:
    """TEXT if some hub backend takes it as a URL, else a ValueError naming the URLs there are."""
    return check_url(text)


def namespace(text: str) -> str:
    """TEXT if it is a valid hub namespace, else a ValueError saying the rule."""
    return check_namespace(text)


def writer() -> str:
    """user@host, recorded in manifests and hub leases."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no login name and no passwd entry (some containers)
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


@dataclass
class CellOptions:
    """One cell's options; None means the session's setting (`CompileCache.<name>`)."""

    store_dir: str | None = None
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
    source_digest: str | None = None  # the cell body's identity (notebook.source_digest), kept with the bundle
    body: str | None = None  # the cell's source, when a magic runs it: one that does not look like it compiles
    version: str | None = None  # restore this version of NAME only (an id, a prefix of one, or a short id)
    # False: the block compiles nothing itself, only the processes it starts do (the CLI's `run`): torch's compiler
    # is not loaded here, nor waited for
    compiles_here: bool = True
    # True: with no hub in play, NAME is restored while the block starts its processes, which look torch's caches
    # up only after their own start (the CLI's `run`); what they compile before it lands is compiled as without us
    restore_beside_body: bool = False
    # True: the processes the block starts load and save Dynamo precompile entries too (torch_adapter/process_hook.py)
    precompile_processes: bool = False

    def __post_init__(self) -> None:
        """The same rules as the magic's options, for scripts: a bad value is a ValueError naming the option."""
        if self.ttl is not None and (isinstance(self.ttl, bool) or not isinstance(self.ttl, int) or self.ttl < 1):
            raise ValueError(f"ttl: must be a whole number of seconds, 1 or more, not {self.ttl!r}")
        if self.version is not None and (not isinstance(self.version, str) or not self.version.strip()):
            raise ValueError(f"version: an id as `list` shows it, not {self.version!r}")
        if not isinstance(self.wait, (int, float)) or not math.isfinite(self.wait) or self.wait < 0:
            raise ValueError(f"wait: must be a number of seconds, 0 or more, not {self.wait!r}")
        for option, value, check in (("namespace", self.namespace, check_namespace), ("hub", self.hub, check_url)):
            try:
                if value is not None:
                    check(value)
            except ValueError as exc:
                raise ValueError(f"{option}: {exc}") from None


@dataclass(frozen=True)
class RemoveOptions:
    """`rm NAME`: every version of NAME, or the one whose id starts with `version` (a prefix `list` shows)."""

    name: str
    version: str | None = None
    dry_run: bool = False
    store_dir: str | None = None


@dataclass(frozen=True)
class GcOptions:
    """`gc`: versions unused for `older_than` seconds, those `incompatible` with this machine, then the least
    recently used down to `max_size` bytes (the cap when no rule is given); `yes` to empty the store."""

    store_dir: str | None = None
    max_size: int | None = None
    older_than: float | None = None
    incompatible: bool = False
    dry_run: bool = False
    yes: bool = False
