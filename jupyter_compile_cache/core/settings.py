"""Every setting of the extension, in one traitlets `Configurable`.

Set them in ``ipython_config.py`` (``c.CompileCache.hub = "redis://cache:6379/0"``) or in a notebook
(``%config CompileCache.max_size = "5G"``; ``%config CompileCache`` lists them). Each one also reads an environment
variable, which is how scripts, the CLI and a team's kernel specs set them; an explicit `%config` or config-file
value wins over the variable. Variables are read once, when the session starts (`%load_ext` or the first API call).

`SETTINGS` declares each one once: its variable, its check, its default and what it does. The traits, the
variables read, the checks and docs/reference.md's table (`settings_table()`) all come from it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from traitlets import All, Bool, Float, Int, TraitError, TraitType, Undefined, Unicode, observe, validate
from traitlets.config import Configurable

from ..storage.backends import check_url
from ..storage.chunks import MAX_CHUNK, MIN_CHUNK
from ..storage.namespace import check_namespace
from ..storage.store import STORE_DIR_ENV, user_store_dir
from ..units import parse_size

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


def _hub(value: str) -> str:
    value = value.strip()
    return "" if value in ("", "off") else check_url(value)


def _directory(value: str) -> str:
    if not value.strip() or "\x00" in value:
        raise ValueError(f"not a directory path: {value!r}")
    return os.path.expanduser(value.strip())


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


@dataclass(frozen=True)
class SettingDeclaration:
    """One setting, declared once. `check` takes the variable's text or a value set (`%config`, the API) and
    returns the value to use, or raises a ValueError saying why not; `default` is the value when the variable is
    unset or refused (a callable: worked out then); `shown_default` and `does` are its row in the docs' table."""

    name: str
    variable: str
    trait: type[TraitType]
    check: Callable[[Any], Any]
    default: Any
    shown_default: str
    does: str


_PREFIX = "JUPYTER_COMPILE_CACHE_"
_TIMEOUT = _seconds(float, "a positive number of seconds")
SETTINGS: tuple[SettingDeclaration, ...] = (
    SettingDeclaration("store_dir", STORE_DIR_ENV, Unicode, _directory, user_store_dir,
            "the user cache dir (`~/.cache/jupyter_compile_cache`; never `/tmp`)", "the local store"),
    SettingDeclaration("hub", _PREFIX + "HUB", Unicode, _hub, "", "none",
            "the shared hub: `redis://`, `rediss://` (TLS), `redis+cluster://`, `unix://`, `s3://bucket/prefix` (S3 or "
            "an S3-compatible store), `gs://bucket/prefix`, `az://container/prefix`, `https://host/path` (read-only, "
            "what `hub publish` wrote), or a shared folder `file:///path`; `%compile_cache hub URL|off` sets it"),
    SettingDeclaration("namespace", _PREFIX + "NAMESPACE", Unicode, check_namespace, "default", "`default`",
            "the namespace on the hub"),
    SettingDeclaration("secret", _PREFIX + "SECRET", Unicode, str, "", "none",
            "team secret: pushed bundles are signed, pulled ones must verify"),
    SettingDeclaration("hub_ttl", _PREFIX + "HUB_TTL", Int, _seconds(int, "0 (no expiry) or more seconds"), 0,
            "0 (until `gc` or `rm`)", "seconds a pushed bundle lives on the hub"),
    SettingDeclaration("hub_connect_timeout", _PREFIX + "HUB_CONNECT_TIMEOUT", Float, _TIMEOUT, 2.0, "2 s",
            "how long to wait for the hub to accept"),
    SettingDeclaration("hub_timeout", _PREFIX + "HUB_TIMEOUT", Float, _TIMEOUT, 10.0, "10 s",
            "how long to wait for any one hub reply"),
    SettingDeclaration("hub_chunk_size", _PREFIX + "HUB_CHUNK_SIZE", Unicode, _chunk_size, "4M", "4M",
            "the pieces bundles are pushed in (256K-64M)"),
    SettingDeclaration("max_size", _PREFIX + "MAX_SIZE", Unicode, _size, "20G", "`20G`",
            "local store cap: least recently used versions are evicted after a save; `gc`'s default"),
    SettingDeclaration("precompile", _PREFIX + "PRECOMPILE", Bool, _bool, True, "on",
            "Dynamo precompile in `%%compile_cache` cells (`--no-precompile` per cell)"),
    SettingDeclaration("prewarm", _PREFIX + "PREWARM", Bool, _bool, True, "on",
            "at `%load_ext`, import torch's compiler stack and fetch the notebook's bundles from the hub in the "
            "background"),
)  # fmt: skip
BY_NAME = {setting.name: setting for setting in SETTINGS}


def settings_table() -> str:
    """docs/reference.md's table of the settings (a test keeps the page in step)."""
    cells = [(f"`{s.name}`", f"`{s.variable}`", s.shown_default, s.does.replace("|", "\\|")) for s in SETTINGS]
    rows = ["| " + " | ".join(row) + " |" for row in cells]
    return "\n".join(["| setting | environment variable | default | what it does |", "|---|---|---|---|", *rows])


def _trait(name: str) -> Any:
    """NAME's trait: its help from the declaration, its default read from its variable when first asked."""
    setting = BY_NAME[name]
    trait = setting.trait(help=f"{setting.does} [${setting.variable}]").tag(config=True)
    trait.default_value = Undefined  # not a static default: traitlets then asks `default` below, once per instance
    trait.default = lambda obj=None: obj._from_environment(setting)
    trait.default_value_repr = lambda: setting.shown_default  # `%config CompileCache`'s "Default:"
    return trait


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
    """Settings of jupyter_compile_cache (`SETTINGS` says what each does and which variable it reads)."""

    store_dir = _trait("store_dir")
    hub = _trait("hub")
    namespace = _trait("namespace")
    secret = _trait("secret")
    hub_ttl = _trait("hub_ttl")
    hub_connect_timeout = _trait("hub_connect_timeout")
    hub_timeout = _trait("hub_timeout")
    hub_chunk_size = _trait("hub_chunk_size")
    max_size = _trait("max_size")
    precompile = _trait("precompile")
    prewarm = _trait("prewarm")

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

    def _from_environment(self, setting: SettingDeclaration) -> Any:
        """SETTING's default: its variable's value, checked, or its default (a bad value is said once)."""
        raw = os.environ.get(setting.variable, "")
        fallback = setting.default() if callable(setting.default) else setting.default
        try:
            return setting.check(raw if setting.check is str else raw.strip()) if raw.strip() else fallback
        except ValueError as exc:
            using = "on" if fallback is True else str(fallback) if fallback != "" else None
            self.env_problems.append(EnvProblem(setting.variable, str(exc), using))
            return fallback

    # Every message names the setting: IPython's %config logs only the message of a refused value.
    @validate(*BY_NAME)
    def _check(self, proposal: dict[str, Any]) -> Any:
        setting = BY_NAME[proposal["trait"].name]
        try:
            return setting.check(proposal["value"])
        except ValueError as exc:
            raise TraitError(f"CompileCache.{setting.name}: {exc}") from None

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
        variable = BY_NAME[name].variable
        refused = any(problem.variable == variable for problem in self.env_problems)
        return f"${variable}" if os.environ.get(variable, "").strip() and not refused else "default"

    def resolved(self) -> dict[str, Any]:
        """Every setting's value in use (the secret masked), for `status` and tests."""
        values = {setting.name: getattr(self, setting.name) for setting in SETTINGS}
        values["secret"] = "***" if values["secret"] else ""
        return values
