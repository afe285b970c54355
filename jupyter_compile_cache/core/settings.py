"""Every setting of the extension, in one traitlets `Configurable`.

Set them in ``ipython_config.py`` (``c.CompileCache.hub = "redis://cache:6379/0"``) or in a notebook
(``%config CompileCache.max_size = "5G"``; ``%config CompileCache`` lists them). Each one also reads an environment
variable, which is how scripts, the CLI and a team's kernel specs set them; an explicit `%config` or config-file
value wins over the variable. Variables are read once, when the session starts (`%load_ext` or the first API call).

=====================  ==================================  =================================================
setting                environment variable                default
=====================  ==================================  =================================================
store_dir              JUPYTER_COMPILE_CACHE_DIR           the user cache dir (never /tmp)
hub                    JUPYTER_COMPILE_CACHE_HUB           "" (no hub)
namespace              JUPYTER_COMPILE_CACHE_NAMESPACE     "default"
secret                 JUPYTER_COMPILE_CACHE_SECRET        "" (bundles unsigned)
hub_ttl                JUPYTER_COMPILE_CACHE_HUB_TTL       0 (pushed bundles live until gc or rm)
hub_connect_timeout    JUPYTER_COMPILE_CACHE_HUB_CONNECT_TIMEOUT  2.0 seconds
hub_timeout            JUPYTER_COMPILE_CACHE_HUB_TIMEOUT   10.0 seconds
hub_chunk_size         JUPYTER_COMPILE_CACHE_HUB_CHUNK_SIZE  "4M" (256K to 64M; bigger for GB bundles on a fast link)
max_size               JUPYTER_COMPILE_CACHE_MAX_SIZE      "20G" (local store; also `gc`'s default)
precompile             JUPYTER_COMPILE_CACHE_PRECOMPILE    True (Dynamo precompile in %%compile_cache cells)
prewarm                JUPYTER_COMPILE_CACHE_PREWARM       True (background: compiler, notebook bundles)
=====================  ==================================  =================================================
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from traitlets import All, Bool, Float, Int, TraitError, Unicode, default, observe, validate
from traitlets.config import Configurable

from ..storage.backends import check_url
from ..storage.chunks import MAX_CHUNK, MIN_CHUNK
from ..storage.namespace import check_namespace
from ..storage.store import STORE_DIR_ENV, default_store_dir
from ..units import parse_size

ENV = {
    "store_dir": STORE_DIR_ENV,
    "hub": "JUPYTER_COMPILE_CACHE_HUB",
    "namespace": "JUPYTER_COMPILE_CACHE_NAMESPACE",
    "secret": "JUPYTER_COMPILE_CACHE_SECRET",
    "hub_ttl": "JUPYTER_COMPILE_CACHE_HUB_TTL",
    "hub_connect_timeout": "JUPYTER_COMPILE_CACHE_HUB_CONNECT_TIMEOUT",
    "hub_timeout": "JUPYTER_COMPILE_CACHE_HUB_TIMEOUT",
    "hub_chunk_size": "JUPYTER_COMPILE_CACHE_HUB_CHUNK_SIZE",
    "max_size": "JUPYTER_COMPILE_CACHE_MAX_SIZE",
    "precompile": "JUPYTER_COMPILE_CACHE_PRECOMPILE",
    "prewarm": "JUPYTER_COMPILE_CACHE_PREWARM",
}
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def parse_bool(text: str) -> bool:
    """'1', 'true', 'yes', 'on' and their opposites, any case; anything else is a ValueError."""
    value = str(text).strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"not a yes/no value: {text!r} (use 1/0, true/false, yes/no, on/off)")


class SettingRefused(BaseException):
    """A value `%config` may not set. A BaseException on purpose: IPython's %config catches every Exception a
    setting raises, logs it through the root logger and reports the cell a success, so Run All would go on with
    the old value unsaid. This stops the cell (and Run All) with one line, the way a UsageError does."""

    def _render_traceback_(self) -> list[str]:  # IPython shows this instead of a traceback
        return [f"UsageError: {self}"]


@dataclass(frozen=True)
class EnvProblem:
    """An environment variable that could not be read: the error, and the value used instead (None: the setting is
    off)."""

    variable: str
    error: str
    using: str | None


class CompileCache(Configurable):
    """Settings of jupyter_compile_cache (see the module docstring for the environment variables)."""

    store_dir = Unicode(help="Local store of bundles [$JUPYTER_COMPILE_CACHE_DIR; default: the user cache dir]").tag(
        config=True
    )
    hub = Unicode(
        help="Shared hub: redis://[user:password@]host:port/db, rediss://... for TLS, s3://bucket/prefix, or "
        "file:///shared/folder; '' for none [$JUPYTER_COMPILE_CACHE_HUB]"
    ).tag(config=True)
    namespace = Unicode(help="Namespace on the hub (teams, projects) [$JUPYTER_COMPILE_CACHE_NAMESPACE]").tag(
        config=True
    )
    secret = Unicode(
        help="Team secret: bundles pushed are signed, bundles pulled must verify [$JUPYTER_COMPILE_CACHE_SECRET]"
    ).tag(config=True)
    hub_ttl = Int(
        help="Seconds a pushed bundle lives on the hub; 0: until gc or rm [$JUPYTER_COMPILE_CACHE_HUB_TTL]"
    ).tag(config=True)
    hub_connect_timeout = Float(
        help="Seconds to wait for the hub to accept a connection [$JUPYTER_COMPILE_CACHE_HUB_CONNECT_TIMEOUT]"
    ).tag(config=True)
    hub_timeout = Float(help="Seconds to wait for any one hub reply [$JUPYTER_COMPILE_CACHE_HUB_TIMEOUT]").tag(
        config=True
    )
    hub_chunk_size = Unicode(
        help="Size of the pieces bundles are pushed in (256K to 64M) [$JUPYTER_COMPILE_CACHE_HUB_CHUNK_SIZE]"
    ).tag(config=True)
    max_size = Unicode(
        help="Size cap of the local store (least recently used versions are evicted after each save; `gc` default) "
        "[$JUPYTER_COMPILE_CACHE_MAX_SIZE]"
    ).tag(config=True)
    precompile = Bool(
        help="Use Dynamo precompile in %%compile_cache cells (per cell: --no-precompile) "
        "[$JUPYTER_COMPILE_CACHE_PRECOMPILE]"
    ).tag(config=True)
    prewarm = Bool(
        help="At %load_ext, import torch's compiler stack and fetch the notebook's bundles in the background "
        "[$JUPYTER_COMPILE_CACHE_PREWARM]"
    ).tag(config=True)

    def __init__(self, **kwargs: Any) -> None:
        self.env_problems: list[EnvProblem] = []  # variables that could not be read; the session warns once
        self._set_here: set[str] | None = None  # settings given a value after start-up (not by %config)
        super().__init__(**kwargs)
        self._set_here = set()

    @observe(All)
    def _note_set(self, change: dict[str, Any]) -> None:
        if self._set_here is not None:
            self._set_here.add(change["name"])

    def update_config(self, config: Any) -> None:
        """`%config CompileCache.x = value`: a refused value leaves every setting as it was, and says so."""
        section = type(self).__name__
        asked = dict(config[section]) if section in config else {}
        before = {name: getattr(self, name) for name in asked if self.has_trait(name)}
        kept = dict(self.config[section]) if section in self.config else None  # the config IPython shares
        try:
            super().update_config(config)
        except TraitError as exc:
            if kept is None:
                self.config.pop(section, None)
            else:
                self.config[section] = type(self.config)(kept)
            for name, value in before.items():
                if getattr(self, name) != value:
                    self.set_trait(name, value)
            unchanged = ", ".join(f"{section}.{name} stays {value!r}" for name, value in before.items())
            raise SettingRefused(f"{exc}; {unchanged}" if unchanged else str(exc)) from None

    def _from_environment(self, name: str) -> Any:
        """NAME's default: its environment variable's value, checked, or the fallback (a bad value is said once)."""
        raw, fallback = os.environ.get(ENV[name], "").strip(), FALLBACKS[name]
        try:
            return CHECKS[name](raw) if raw else fallback
        except ValueError as exc:
            using = "on" if fallback is True else str(fallback) if fallback != "" else None
            self.env_problems.append(EnvProblem(ENV[name], str(exc), using))
            return fallback

    # traitlets registers a dynamic default per name, at the class's creation
    _default_store_dir = default("store_dir")(lambda self: default_store_dir())  # (reads its variable itself)
    _default_hub = default("hub")(lambda self: self._from_environment("hub"))
    _default_namespace = default("namespace")(lambda self: self._from_environment("namespace"))
    _default_secret = default("secret")(lambda self: os.environ.get(ENV["secret"], ""))
    _default_hub_ttl = default("hub_ttl")(lambda self: self._from_environment("hub_ttl"))
    _default_connect = default("hub_connect_timeout")(lambda self: self._from_environment("hub_connect_timeout"))
    _default_hub_timeout = default("hub_timeout")(lambda self: self._from_environment("hub_timeout"))
    _default_hub_chunk_size = default("hub_chunk_size")(lambda self: self._from_environment("hub_chunk_size"))
    _default_max_size = default("max_size")(lambda self: self._from_environment("max_size"))
    _default_precompile = default("precompile")(lambda self: self._from_environment("precompile"))
    _default_prewarm = default("prewarm")(lambda self: self._from_environment("prewarm"))

    # Every message names the setting: IPython's %config logs only the message of a refused value.
    @validate(*ENV)
    def _check(self, proposal: dict[str, Any]) -> Any:
        name = proposal["trait"].name
        try:
            return CHECKS[name](proposal["value"])
        except ValueError as exc:
            raise TraitError(f"CompileCache.{name}: {exc}") from None

    @property
    def max_bytes(self) -> int:
        return parse_size(self.max_size)

    @property
    def hub_chunk_bytes(self) -> int:
        return parse_size(self.hub_chunk_size)

    def origin(self, name: str) -> str:
        """Where NAME's value in force came from: "config" (`%config`, ipython_config.py), "set" (since start-up:
        `--store`, `%compile_cache hub URL`, the API), "$VARIABLE", or "default"."""
        section = self.config.get(type(self).__name__, {})
        if name in section:
            return "config"
        if self._set_here and name in self._set_here:
            return "set"
        variable = ENV[name]
        refused = any(problem.variable == variable for problem in self.env_problems)
        return f"${variable}" if os.environ.get(variable, "").strip() and not refused else "default"

    def resolved(self) -> dict[str, Any]:
        """Every setting's value in use (the secret masked), for `status` and tests."""
        values = {name: getattr(self, name) for name in ENV}
        values["secret"] = "***" if values["secret"] else ""
        return values


def _hub(value: str) -> str:
    value = value.strip()
    return "" if value in ("", "off") else check_url(value)


def _directory(value: str) -> str:
    if not value.strip() or "\x00" in value:
        raise ValueError(f"not a directory path: {value!r}")
    return value


def _size(value: str) -> str:
    parse_size(value)
    return value


def _chunk_size(value: str) -> str:
    if not MIN_CHUNK <= parse_size(value) <= MAX_CHUNK:
        raise ValueError(f"a chunk is 256K to 64M, not {value!r}")
    return value


def _seconds(kind: type, least: str) -> Callable[[Any], Any]:
    """A number of seconds of KIND (from the environment's text too): a ttl (int) may be 0, a timeout must not."""

    def check(value: Any) -> Any:
        try:
            seconds = kind(value)
        except ValueError:
            seconds = -1
        if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and kind is float):
            raise ValueError(f"must be {least}, not {value!r}")
        return seconds

    return check


def _bool(value: Any) -> bool:
    return value if isinstance(value, bool) else parse_bool(value)


# Each setting's check, for its environment variable's text and for a value set (%config, the API): the value to
# use, or a ValueError saying why not; and the value its variable falls back to when unset or refused.
CHECKS: dict[str, Callable[[Any], Any]] = {
    "store_dir": _directory,
    "hub": _hub,
    "namespace": check_namespace,
    "secret": str,
    "hub_ttl": _seconds(int, "0 (no expiry) or more seconds"),
    "hub_connect_timeout": _seconds(float, "a positive number of seconds"),
    "hub_timeout": _seconds(float, "a positive number of seconds"),
    "hub_chunk_size": _chunk_size,
    "max_size": _size,
    "precompile": _bool,
    "prewarm": _bool,
}
FALLBACKS: dict[str, Any] = {
    "hub": "",
    "namespace": "default",
    "hub_ttl": 0,
    "hub_connect_timeout": 2.0,
    "hub_timeout": 10.0,
    "hub_chunk_size": "4M",
    "max_size": "20G",
    "precompile": True,
    "prewarm": True,
}
