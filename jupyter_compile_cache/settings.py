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

import math
import os
import re
import sys
from typing import Any
from urllib.parse import parse_qs, urlsplit

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
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
# Namespaces become part of Redis keys (inside a cluster hash tag): no braces, spaces or empty path components.
NAMESPACE_RE = re.compile(r"^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$")


def default_store_dir() -> str:
    env = os.environ.get(ENV["store_dir"])
    if env:
        return os.path.abspath(os.path.expanduser(env))
    import platformdirs

    return platformdirs.user_cache_dir("jupyter_compile_cache", appauthor=False)


def parse_size(text: str) -> int:
    """'500M', '2G', '1.5GiB', '1000' -> bytes; anything else (empty, negative, 'inf', '1e400') is a ValueError."""
    units = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    s = str(text).strip().lower()
    s = s.removesuffix("ib") if s.endswith("ib") else s.removesuffix("b")
    num = s.rstrip("kmgt")
    unit = s[len(num) :]
    try:
        value = float(num) if re.fullmatch(r"[0-9]+(\.[0-9]*)?|\.[0-9]+", num) else -1.0
    except ValueError:
        value = -1.0
    if value < 0 or unit not in units or not math.isfinite(value * units.get(unit, 1)):
        raise ValueError(f"not a size: {text!r} (use e.g. 500M, 2G)")
    return int(value * units[unit])


def parse_age(text: str) -> float:
    """'30d', '12h', '90m', '45s', '2w', '3600' -> seconds; anything else (empty, negative, 'inf') is a ValueError."""
    units = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([smhdw]?)\s*", str(text).lower())
    if match is None:
        raise ValueError(f"not an age: {text!r} (use e.g. 30d, 12h, 90m)")
    return float(match.group(1)) * units[match.group(2)]


def parse_bool(text: str) -> bool:
    """'1', 'true', 'yes', 'on' and their opposites, any case; anything else is a ValueError."""
    value = str(text).strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"not a yes/no value: {text!r} (use 1/0, true/false, yes/no, on/off)")


def check_namespace(namespace: str) -> str:
    """A hub namespace: letters, digits, '.', '_', '-', parts joined by '/', at most 128 characters."""
    if not isinstance(namespace, str) or len(namespace) > 128 or not NAMESPACE_RE.match(namespace):
        raise ValueError(
            f"invalid namespace {namespace!r}: use letters, digits, '.', '_', '-', parts joined by '/' "
            "(at most 128 characters)"
        )
    return namespace


def redact(url: str | None) -> str:
    """The URL with any password replaced, for messages, status and the panel. Works on text that is no valid
    URL too (a typo must not print the password): whatever stands between the scheme and the last '@' is taken
    for user[:password], erring on the side of hiding."""
    if not url:
        return ""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    userinfo, at, host = rest.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    return f"{scheme}{sep}{userinfo.split(':', 1)[0]}:***@{host}"


def check_hub_url(url: str) -> str:
    """A Redis URL redis-py can open: redis://[user:password@]host[:port][/db], rediss://..., unix:///path."""
    value = str(url).strip()
    shown = redact(value)
    usage = "(redis://host:port/db, rediss://... for TLS, or unix:///path/to/socket)"
    if not value.startswith(HUB_SCHEMES) or any(c.isspace() for c in value):
        raise ValueError(f"not a Redis URL: {shown!r} {usage}")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018  (raises ValueError for a port that is not a number in range)
    except ValueError as exc:
        raise ValueError(f"not a Redis URL: {shown!r}: {exc} {usage}") from None
    if parts.scheme == "unix":
        if not parts.path:
            raise ValueError(f"not a Redis URL: {shown!r}: no socket path {usage}")
    elif not parts.hostname:
        raise ValueError(f"not a Redis URL: {shown!r}: no host {usage}")
    db = (parts.path.strip("/") if parts.scheme != "unix" else "") or parse_qs(parts.query).get("db", ["0"])[0]
    if not db.isdigit():
        raise ValueError(f"not a Redis URL: {shown!r}: the database {db!r} is not a number {usage}")
    # redis-py's own rules for the rest (query options), when it is loaded already: importing it here would add
    # 0.25 s to `%load_ext` (the variable is read at start-up); a URL it refuses is a HubError at first use anyway.
    connection = sys.modules.get("redis.connection")
    if connection is None:
        return value
    try:
        connection.parse_url(value)
    except ValueError as exc:
        raise ValueError(f"not a Redis URL: {shown!r}: {exc} {usage}") from None
    return value


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
        if value in ("", "off"):
            return ""
        try:
            return check_hub_url(value)
        except ValueError as exc:
            self.env_problems.append(f"{ENV['hub']}: {exc}; no hub")
            return ""

    @default("namespace")
    def _default_namespace(self) -> str:
        value = os.environ.get(ENV["namespace"], "").strip()
        try:
            return check_namespace(value) if value else "default"
        except ValueError as exc:
            self.env_problems.append(f"{ENV['namespace']}: {exc}; using 'default'")
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
            return check_hub_url(value)
        except ValueError as exc:
            raise TraitError(f"CompileCache.hub: {exc}") from None

    @validate("namespace")
    def _check_namespace(self, proposal: dict[str, Any]) -> str:
        try:
            return check_namespace(proposal["value"])
        except ValueError as exc:
            raise TraitError(f"CompileCache.namespace: {exc}") from None

    @validate("max_size")
    def _check_max_size(self, proposal: dict[str, Any]) -> str:
        try:
            parse_size(proposal["value"])
        except ValueError as exc:
            raise TraitError(f"CompileCache.max_size: {exc}") from None
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

    def _env_number(self, name: str, fallback: float, kind: type) -> float:
        raw = os.environ.get(ENV[name], "").strip()
        try:
            value = kind(raw) if raw else fallback
        except ValueError:
            value = -1
        # a ttl may be 0 (no expiry); a timeout must be positive
        if not math.isfinite(value) or value < 0 or (value == 0 and kind is float):
            self.env_problems.append(f"{ENV[name]}: not a number of seconds: {raw!r}; using {fallback}")
            return fallback
        return value

    def _env_bool(self, name: str) -> bool:
        raw = os.environ.get(ENV[name], "").strip()
        try:
            return parse_bool(raw) if raw else True
        except ValueError as exc:
            self.env_problems.append(f"{ENV[name]}: {exc}; using on")
            return True

    def resolved(self) -> dict[str, Any]:
        """Every setting's value in use (the secret masked), for `status` and tests."""
        values = {name: getattr(self, name) for name in ENV}
        values["secret"] = "***" if values["secret"] else ""
        return values
