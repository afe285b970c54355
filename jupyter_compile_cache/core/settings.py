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


def _seconds(raw: str, kind: type) -> float:
    """RAW as a number of seconds of KIND: a ttl (int) may be 0 (no expiry), a timeout (float) must be positive."""
    try:
        value = kind(raw)
    except ValueError:
        value = -1
    if not math.isfinite(value) or value < 0 or (value == 0 and kind is float):
        raise ValueError(f"not a number of seconds: {raw!r}")
    return value


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

    @default("store_dir")
    def _default_store_dir(self) -> str:
        return default_store_dir()

    @default("hub")
    def _default_hub(self) -> str:
        value = os.environ.get(ENV["hub"], "").strip()
        if value in ("", "off"):
            return ""
        try:
            return check_url(value)
        except ValueError as exc:
            self.env_problems.append(EnvProblem(ENV["hub"], str(exc), None))
            return ""

    @default("namespace")
    def _default_namespace(self) -> str:
        value = os.environ.get(ENV["namespace"], "").strip()
        try:
            return check_namespace(value) if value else "default"
        except ValueError as exc:
            self.env_problems.append(EnvProblem(ENV["namespace"], str(exc), "'default'"))
            return "default"

    @default("secret")
    def _default_secret(self) -> str:
        return os.environ.get(ENV["secret"], "")

    @default("hub_ttl")
    def _default_hub_ttl(self) -> int:
        return int(self._env_number("hub_ttl", 0, int))

    @default("hub_connect_timeout")
    def _default_hub_connect_timeout(self) -> float:
        return self._env_number("hub_connect_timeout", 2.0, float)

    @default("hub_timeout")
    def _default_hub_timeout(self) -> float:
        return self._env_number("hub_timeout", 10.0, float)

    @default("max_size")
    def _default_max_size(self) -> str:
        return self._env_size("max_size", "20G")

    @default("hub_chunk_size")
    def _default_hub_chunk_size(self) -> str:
        return self._env_size("hub_chunk_size", "4M")

    def _env_size(self, name: str, fallback: str) -> str:
        value = os.environ.get(ENV[name], "").strip()
        if not value:
            return fallback
        try:
            _SIZE_CHECKS[name](value)
            return value
        except ValueError as exc:
            self.env_problems.append(EnvProblem(ENV[name], str(exc), fallback))
            return fallback

    @default("precompile")
    def _default_precompile(self) -> bool:
        return self._env_bool("precompile")

    @default("prewarm")
    def _default_prewarm(self) -> bool:
        return self._env_bool("prewarm")

    # Every message names the setting: IPython's %config logs only the message of a refused value.
    @validate("hub")
    def _check_hub(self, proposal: dict[str, Any]) -> str:
        value = proposal["value"].strip()
        if value in ("", "off"):
            return ""
        try:
            return check_url(value)
        except ValueError as exc:
            raise TraitError(f"CompileCache.hub: {exc}") from None

    @validate("namespace")
    def _check_namespace(self, proposal: dict[str, Any]) -> str:
        try:
            return check_namespace(proposal["value"])
        except ValueError as exc:
            raise TraitError(f"CompileCache.namespace: {exc}") from None

    @validate("max_size", "hub_chunk_size")
    def _check_size(self, proposal: dict[str, Any]) -> str:
        name = proposal["trait"].name
        try:
            _SIZE_CHECKS[name](proposal["value"])
        except ValueError as exc:
            raise TraitError(f"CompileCache.{name}: {exc}") from None
        return proposal["value"]

    @validate("store_dir")
    def _check_store_dir(self, proposal: dict[str, Any]) -> str:
        value = proposal["value"]
        if not value.strip() or "\x00" in value:
            raise TraitError(f"CompileCache.store_dir: not a directory path: {value!r}")
        return value

    @validate("hub_ttl")
    def _check_ttl(self, proposal: dict[str, Any]) -> int:
        if proposal["value"] < 0:
            raise TraitError(f"CompileCache.hub_ttl: must be 0 (no expiry) or more seconds, not {proposal['value']}")
        return proposal["value"]

    @validate("hub_connect_timeout", "hub_timeout")
    def _check_timeout(self, proposal: dict[str, Any]) -> float:
        value = proposal["value"]
        if not (math.isfinite(value) and value > 0):
            raise TraitError(
                f"CompileCache.{proposal['trait'].name}: must be a positive number of seconds, not {value}"
            )
        return value

    @property
    def max_bytes(self) -> int:
        return parse_size(self.max_size)

    @property
    def hub_chunk_bytes(self) -> int:
        return parse_size(self.hub_chunk_size)

    def _env_number(self, name: str, fallback: float, kind: type) -> float:
        raw = os.environ.get(ENV[name], "").strip()
        try:
            return _seconds(raw, kind) if raw else fallback
        except ValueError as exc:
            self.env_problems.append(EnvProblem(ENV[name], str(exc), str(fallback)))
            return fallback

    def _env_bool(self, name: str) -> bool:
        raw = os.environ.get(ENV[name], "").strip()
        try:
            return parse_bool(raw) if raw else True
        except ValueError as exc:
            self.env_problems.append(EnvProblem(ENV[name], str(exc), "on"))
            return True

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


def _check_chunk_size(text: str) -> int:
    size = parse_size(text)
    if not MIN_CHUNK <= size <= MAX_CHUNK:
        raise ValueError(f"a chunk is 256K to 64M, not {text!r}")
    return size


_SIZE_CHECKS = {"max_size": parse_size, "hub_chunk_size": _check_chunk_size}
