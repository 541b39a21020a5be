"""``conch up --cache-config``: Triton's response cache options, read the way Triton reads them.

``--cache-config local,size=SIZE`` starts a private cache Redis bounded to SIZE bytes (suffixes
K, M, G allowed) that evicts the least recently used entries (Triton's ``local`` cache, shared
here by every gateway); ``--cache-config redis,host=H,port=P[,password=S][,db=N]`` uses an
existing Redis (Triton's ``redis`` cache), which should have ``maxmemory`` and
``maxmemory-policy allkeys-lru`` set. The flag may be given several times, as in Triton
(``--cache-config redis,host=H --cache-config redis,port=P``).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}


@dataclass(frozen=True)
class CacheConfig:
    kind: str  # "local" | "redis"
    size_bytes: int = 0
    url: str = ""


def parse(values: list[str]) -> CacheConfig | None:
    """The cache the flags ask for, None without any; ValueError naming what is wrong."""
    if not values:
        return None
    kind = ""
    options: dict[str, str] = {}
    for value in values:
        name, _, rest = value.partition(",")
        name = name.strip()
        if name not in ("local", "redis"):
            raise ValueError(
                f"--cache-config '{value}': cache '{name}' unknown; expected 'local' or 'redis'"
            )
        if kind and name != kind:
            raise ValueError("--cache-config: only one cache implementation may be configured")
        kind = name
        for item in filter(None, (part.strip() for part in rest.split(","))):
            key, sep, setting = item.partition("=")
            if not sep or not key:
                raise ValueError(f"--cache-config '{value}': expected <key>=<value>, got '{item}'")
            options[key.strip()] = setting.strip()
    if kind == "local":
        unknown = set(options) - {"size"}
        if unknown or "size" not in options:
            raise ValueError("--cache-config local needs size=<bytes> and nothing else")
        return CacheConfig("local", size_bytes=size(options["size"]))
    unknown = set(options) - {"host", "port", "password", "username", "db"}
    if unknown:
        raise ValueError(f"--cache-config redis: unknown key(s) {sorted(unknown)}")
    host, port = options.get("host", "127.0.0.1"), options.get("port", "6379")
    if not port.isdigit():
        raise ValueError(f"--cache-config redis: port '{port}' is not a number")
    user = options.get("username", "")
    secret = options.get("password", "")
    credentials = f"{quote(user, safe='')}:{quote(secret, safe='')}@" if secret else ""
    db = options.get("db", "0")
    return CacheConfig("redis", url=f"redis://{credentials}{host}:{port}/{db}")


def size(text: str) -> int:
    """Bytes from ``1048576``, ``512M``, ``2G``."""
    raw = text.strip().upper().removesuffix("B")
    unit = raw[-1:] if raw[-1:] in _UNITS else ""
    number = raw[: len(raw) - len(unit)]
    if not number.isdigit() or int(number) * _UNITS[unit] < 1024 * 1024:
        raise ValueError(f"cache size '{text}' must be a number of bytes of at least 1M")
    return int(number) * _UNITS[unit]
