"""Do all keys of every script, MULTI and multi-key command of a real run hash to one slot?

The run's commands are recorded by MONITOR (``tests.redis_monitor``) on a single Redis; the keys
of each command are found by the server itself (``COMMAND GETKEYS``, positions cached per command
shape), so nothing here lists which argument of which command is a key. Checked per call:

- a script: the keys it declares (EVAL/EVALSHA) and every key the commands it ran touched (the
  ``lua`` lines MONITOR prints for one script run are contiguous: scripts run alone);
- a MULTI: the keys of every command between MULTI and EXEC of that connection;
- any other command naming several keys (XREADGROUP over several streams, DEL of several keys).

A violation names the call and its keys with their slots: on Redis Cluster that call would fail
with CROSSSLOT.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import redis
from redis.crc import key_slot

from tests.waiting import until_sync

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Call:
    kind: str  # "script", "multi" or "command"
    first: list[str]
    keys: set[str] = field(default_factory=set)

    def slots(self) -> dict[int, list[str]]:
        found: dict[int, list[str]] = {}
        for key in sorted(self.keys):
            found.setdefault(key_slot(key.encode("latin-1")), []).append(key)
        return found


class KeyFinder:
    """Keys of one command, by the server's COMMAND GETKEYS; positions cached per shape."""

    def __init__(self, client: redis.Redis):
        self.client = client
        self._positions: dict[tuple[str, ...], list[int]] = {}

    def keys(self, args: list[str]) -> list[str]:
        name = args[0].upper()
        if name in ("EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FCALL"):
            count = int(args[2]) if len(args) > 2 and args[2].isdigit() else 0
            return args[3 : 3 + count]
        if name in ("XREAD", "XREADGROUP"):
            upper = [a.upper() for a in args]
            if "STREAMS" not in upper:
                return []
            rest = args[upper.index("STREAMS") + 1 :]
            return rest[: len(rest) // 2]
        shape = (name, args[1].upper() if len(args) > 1 else "", str(len(args)))
        if shape not in self._positions:
            try:
                found = self.client.command_getkeys(*args)
            except redis.ResponseError:
                found = []
            texts = [k if isinstance(k, str) else k.decode("latin-1") for k in found]
            positions, start = [], 1
            for key in texts:
                index = args.index(key, start)
                positions.append(index)
                start = index + 1
            self._positions[shape] = positions
        return [args[i] for i in self._positions[shape] if i < len(args)]


_NO_CHECK = {"MONITOR", "COMMAND", "CLIENT", "HELLO", "PING", "INFO", "SELECT", "FLUSHALL"}


def calls(records: Iterable[tuple[str, list[str]]], finder: KeyFinder) -> Iterator[Call]:
    """Every script run, MULTI and command of the recording, with its keys."""
    script: Call | None = None
    open_multi: dict[str, Call] = {}
    for client, args in records:
        if not args:
            continue
        name = args[0].upper()
        if client == "lua":
            script = script or Call("script", ["<script>"])
            script.keys.update(finder.keys(args))
            continue
        if script is not None:
            yield script
            script = None
        if name in _NO_CHECK:
            continue
        if name == "MULTI":
            open_multi[client] = Call("multi", [])
            continue
        if name in ("EXEC", "DISCARD"):
            call = open_multi.pop(client, None)
            if call is not None:
                yield call
            continue
        keys = finder.keys(args)
        if client in open_multi:
            open_multi[client].keys.update(keys)
            open_multi[client].first = open_multi[client].first or args[:2]
            continue
        yield Call("script" if name.startswith("EVAL") else "command", args[:2], set(keys))
    if script is not None:
        yield script


def violations(records: Iterable[tuple[str, list[str]]], finder: KeyFinder) -> list[str]:
    found: list[str] = []
    seen: set[str] = set()
    for call in calls(records, finder):
        slots = call.slots()
        if len(slots) <= 1:
            continue
        text = f"{call.kind} {call.first}: " + "; ".join(
            f"slot {slot}: {keys}" for slot, keys in sorted(slots.items())
        )
        if text not in seen:
            seen.add(text)
            found.append(text)
    return found


def read(path: Path) -> Iterator[tuple[str, list[str]]]:
    with open(path) as lines:
        for line in lines:
            client, args = json.loads(line)
            yield client, args


class Recorder:
    """MONITOR on a Redis at (host, port) into ``path`` while the ``with`` block runs."""

    def __init__(self, host: str, port: int, path: Path):
        self.host, self.port, self.path = host, port, path
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Recorder:
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.redis_monitor",
                self.host,
                str(self.port),
                str(self.path),
            ],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        client = redis.Redis(self.host, self.port)
        try:  # the recorder is attached once the server lists a client in MONITOR mode
            until_sync(
                lambda: any("monitor" in str(c.get("cmd", "")) for c in client.client_list()),
                200 * 0.05,
                every=0.05,
            )
        finally:
            client.close()
        return self

    def __exit__(self, *_: object) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=10)

    def violations(self) -> list[str]:
        client = redis.Redis(self.host, self.port)
        try:
            return violations(read(self.path), KeyFinder(client))
        finally:
            client.close()
