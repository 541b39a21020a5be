"""The registry of the mesh's Lua scripts: the Redis contract between services, one file each.

Every script the services run lives in ``shared/lua/<name>.lua`` and opens with a comment block
that states its contract: each ``KEYS[i]`` (with the ``shared.wire.keys`` function naming it), each
``ARGV[i]``, the reply, and which other scripts and services write what it reads. Callers take
a script's source and SHA from here (``ENQUEUE.source``, ``ENQUEUE.sha``) and keep their own call
mechanism (``register_script``, ``CoalescedScript``, EVALSHA, or EVAL in a pipeline).

Loading happens once, at import: the files ship as package data (pyproject's
``[tool.setuptools.package-data]``), so a call never reads a file and the hot path is what it
was. The source sent to Redis is the file without its header comment block (a pipeline's EVAL
sends the source with every call; the contract is for readers, not for Redis); the SHA is that
source's.

Fragments: a file whose name starts with ``_`` is not a script but a piece shared by several
(the sequence scripts' placement library, the fenced multi-ack). A script includes one with a
line ``--#include _name.lua``, replaced at load by the fragment (its own header dropped). An
including script defines what the fragment expects first (``COUNTER`` for ``_ack_many.lua``).

Every script starts with a ``#!lua`` shebang: Redis 7+ and Valkey then refuse, on a cluster, any
key a script touches in another slot than the call's, even one the same node happens to serve
(scripts without a shebang are allowed that for compatibility, and break after a reshard).
It does not refuse an undeclared key of the same slot; ``tests/unit/test_lua_contract.py``
checks statically that every key a script touches comes from KEYS.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources

_INCLUDE = re.compile(r"^--#include\s+(\S+)\s*$")


@dataclass(frozen=True)
class Script:
    """One script: its name (the file's stem), the source sent to Redis and its SHA1."""

    name: str
    source: str
    sha: str


def _read(filename: str) -> str:
    return resources.files(__name__).joinpath(filename).read_text(encoding="utf-8")


def _body(text: str) -> list[str]:
    """The file's lines without its leading header (the shebang is kept)."""
    lines = text.splitlines()
    shebang = lines[:1] if lines and lines[0].startswith("#!") else []
    rest = lines[len(shebang) :]
    while rest and (rest[0].startswith("--") and not _INCLUDE.match(rest[0])):
        rest = rest[1:]
    return shebang + rest


def expand(text: str, seen: tuple[str, ...] = ()) -> str:
    """A script's source as sent to Redis: header dropped, includes resolved."""
    out: list[str] = []
    for line in _body(text):
        found = _INCLUDE.match(line)
        if found is None:
            out.append(line)
            continue
        fragment = found.group(1)
        if not fragment.startswith("_") or fragment in seen:
            raise ValueError(f"bad include {fragment!r} (fragments start with '_', no cycles)")
        out.append(expand(_read(fragment), (*seen, fragment)).rstrip("\n"))
    return "\n".join(out) + "\n"


def raw(name: str) -> str:
    """The file as written, header included (for the contract tests)."""
    return _read(f"{name}.lua")


def _load(name: str) -> Script:
    source = expand(raw(name))
    return Script(name, source, hashlib.sha1(source.encode()).hexdigest())


def names() -> list[str]:
    """Every script's name (fragments excluded), sorted."""
    return sorted(
        entry.name[: -len(".lua")]
        for entry in resources.files(__name__).iterdir()
        if entry.name.endswith(".lua") and not entry.name.startswith("_")
    )


# Admission and the request path.
ENQUEUE = _load("enqueue")
DISPATCH = _load("dispatch")
FENCED_ACK = _load("fenced_ack")
FENCED_ACK_MANY = _load("fenced_ack_many")
CANCEL_ACK = _load("cancel_ack")
DEAD_LETTER = _load("dead_letter")
ADD_STATS = _load("add_stats")
MARK_READY = _load("mark_ready")
# Policy, rate limits, tracing.
PUT_TENANT = _load("put_tenant")
DELETE_TENANT = _load("delete_tenant")
TOKEN_BUCKET = _load("token_bucket")
RATE_RESOURCES = _load("rate_resources")
TRACE_TAKE_ONE = _load("trace_take_one")
# Ensembles.
ENSEMBLE_START = _load("ensemble_start")
ENSEMBLE_STEP = _load("ensemble_step")
ENSEMBLE_FINISH = _load("ensemble_finish")
# Sequences.
SEQUENCE_ADMIT = _load("sequence_admit")
SEQUENCE_COMMIT = _load("sequence_commit")
SEQUENCE_RELEASE_IDLE = _load("sequence_release_idle")
SEQUENCE_ADOPT = _load("sequence_adopt")
SEQUENCE_CANCEL = _load("sequence_cancel")
SEQUENCE_PULL = _load("sequence_pull")
# On_demand model control.
PLACER_LEASE = _load("placer_lease")

SCRIPTS: dict[str, Script] = {
    s.name: s
    for s in (
        ENQUEUE,
        DISPATCH,
        FENCED_ACK,
        FENCED_ACK_MANY,
        CANCEL_ACK,
        DEAD_LETTER,
        ADD_STATS,
        MARK_READY,
        PUT_TENANT,
        DELETE_TENANT,
        TOKEN_BUCKET,
        RATE_RESOURCES,
        TRACE_TAKE_ONE,
        ENSEMBLE_START,
        ENSEMBLE_STEP,
        ENSEMBLE_FINISH,
        SEQUENCE_ADMIT,
        SEQUENCE_COMMIT,
        SEQUENCE_RELEASE_IDLE,
        SEQUENCE_ADOPT,
        SEQUENCE_CANCEL,
        SEQUENCE_PULL,
        PLACER_LEASE,
    )
}
