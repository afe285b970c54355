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
max_size               JUPYTER_COMPILE_CACHE_MAX_SIZE      "20G" (local store; also `gc`'s default)
precompile             JUPYTER_COMPILE_CACHE_PRECOMPILE    True (Dynamo precompile in %%compile_cache cells)
prewarm                JUPYTER_COMPILE_CACHE_PREWARM       True (import the compiler stack in the background)
=====================  ==================================  =================================================
"""

from __future__ import annotations

import os
from typing import Any

from traitlets import Bool, Float, Int, TraitError, Unicode, default, validate
from traitlets.config import Configurable

ENV = {
    "store_dir": "JUPYTER_COMPILE_CACHE_DIR",
    "hub": "JUPYTER_COMPILE_CACHE_HUB",
    "namespace": "JUPYTER_COMPILE_CACHE_NAMESPACE",
    "secret": "JUPYTER_COMPILE_CACHE_SECRET",
    "hub_ttl": "JUPYTER_COMPILE_CACHE_HUB_TTL",
    "hub_connect_timeout": "JUPYTER_COMPILE_CACHE_HUB_CONNECT_TIMEOUT",
    "hub_timeout": "JUPYTER_COMPILE_CACHE_HUB_TIMEOUT",
    "max_size": "JUPYTER_COMPILE_CACHE_MAX_SIZE",
    "precompile": "JUPYTER_COMPILE_CACHE_PRECOMPILE",
    "prewarm": "JUPYTER_COMPILE_CACHE_PREWARM",
}
HUB_SCHEMES = ("redis://", "rediss://", "unix://")
_FALSE = ("0", "false", "no", "off")


def default_store_dir() -> str:
    env = os.environ.get(ENV["store_dir"])
    if env:
        return os.path.abspath(os.path.expanduser(env))
    import platformdirs

    return platformdirs.user_cache_dir("jupyter_compile_cache", appauthor=False)


def parse_size(text: str) -> int:
    """'500M', '2G', '1.5GiB', '1000' -> bytes."""
    units = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    s = text.strip().lower().removesuffix("ib").removesuffix("b")
    num = s.rstrip("kmgt")
    unit = s[len(num) :]
    try:
        value = float(num)
    except ValueError:
        raise ValueError(f"not a size: {text!r} (use e.g. 500M, 2G)") from None
    if value < 0 or unit not in units:
        raise ValueError(f"not a size: {text!r} (use e.g. 500M, 2G)")
    return int(value * units[unit])


class CompileCache(Configurable):
    """Settings of jupyter_compile_cache (see the module docstring for the environment variables)."""

    store_dir = Unicode(help="Local store of bundles [$JUPYTER_COMPILE_CACHE_DIR; default: the user cache dir]").tag(
        config=True
    )
    hub = Unicode(
        help="Shared Redis hub, redis://[user:password@]host:port/db, rediss://... for TLS; '' for none "
        "[$JUPYTER_COMPILE_CACHE_HUB]"
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
    hub_connect_timeout = Float(help="Seconds to wait for the hub to accept a connection").tag(config=True)
    hub_timeout = Float(help="Seconds to wait for any one hub reply").tag(config=True)
    max_size = Unicode(
        help="Size cap of the local store (least recently used versions are evicted after each save; `gc` default)"
    ).tag(config=True)
    precompile = Bool(help="Use Dynamo precompile in %%compile_cache cells (per cell: --no-precompile)").tag(
        config=True
    )
    prewarm = Bool(help="Import torch's compiler stack in the background when the extension loads").tag(config=True)

    def __init__(self, **kwargs: Any) -> None:
        self.env_problems: list[str] = []  # variables that could not be read; the session warns about them once
        super().__init__(**kwargs)

    @default("store_dir")
    def _default_store_dir(self) -> str:
        return default_store_dir()

    @default("hub")
    def _default_hub(self) -> str:
        value = os.environ.get(ENV["hub"], "").strip()
        if value and value != "off" and not value.startswith(HUB_SCHEMES):
            self.env_problems.append(f"{ENV['hub']}: not a Redis URL: {value!r}; no hub")
            return ""
        return "" if value == "off" else value

    @default("namespace")
    def _default_namespace(self) -> str:
        return os.environ.get(ENV["namespace"]) or "default"

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
        value = os.environ.get(ENV["max_size"], "").strip()
        if not value:
            return "20G"
        try:
            parse_size(value)
            return value
        except ValueError as exc:
            self.env_problems.append(f"{ENV['max_size']}: {exc}; using 20G")
            return "20G"

    @default("precompile")
    def _default_precompile(self) -> bool:
        return os.environ.get(ENV["precompile"], "1").strip().lower() not in _FALSE

    @default("prewarm")
    def _default_prewarm(self) -> bool:
        return os.environ.get(ENV["prewarm"], "1").strip().lower() not in _FALSE

    @validate("hub")
    def _check_hub(self, proposal: dict[str, Any]) -> str:
        value = proposal["value"].strip()
        if value in ("", "off"):
            return ""
        if not value.startswith(HUB_SCHEMES):
            raise TraitError(f"not a Redis URL: {value!r} (redis://host:port/db, rediss://... or unix://...)")
        return value

    @validate("max_size")
    def _check_max_size(self, proposal: dict[str, Any]) -> str:
        try:
            parse_size(proposal["value"])
        except ValueError as exc:
            raise TraitError(str(exc)) from None
        return proposal["value"]

    @validate("hub_ttl", "hub_connect_timeout", "hub_timeout")
    def _check_not_negative(self, proposal: dict[str, Any]) -> Any:
        if proposal["value"] < 0:
            raise TraitError(f"{proposal['trait'].name} must not be negative")
        return proposal["value"]

    @property
    def max_bytes(self) -> int:
        return parse_size(self.max_size)

    def _env_number(self, name: str, fallback: float, kind: type) -> float:
        raw = os.environ.get(ENV[name], "").strip()
        try:
            value = kind(raw) if raw else fallback
        except ValueError:
            value = -1
        if value < 0:
            self.env_problems.append(f"{ENV[name]}: not a number of seconds: {raw!r}; using {fallback}")
            return fallback
        return value

    def resolved(self) -> dict[str, Any]:
        """Every setting's value in use (the secret masked), for `status` and tests."""
        values = {name: getattr(self, name) for name in ENV}
        values["secret"] = "***" if values["secret"] else ""
        return values
