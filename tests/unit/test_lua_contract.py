"""Every Lua script's keys come from KEYS, and its header documents every KEYS and ARGV it uses.

A key built inside a script (``P .. 'held:' .. inst``, a literal name, a value taken from ARGV)
is one the caller never declared: Redis Cluster cannot route the call by it, and the contract a
reader finds in the file's header would be incomplete. The check is static (the server does not
refuse an undeclared key of the call's slot, even for a ``#!lua`` script): each key argument of
a Redis command the script calls must be ``KEYS[...]``, or a name every assignment of which (or, for
a function parameter, every call's argument) is itself such a key, with no ``..`` anywhere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from shared import lua
from shared.wire import keys

# Commands whose arguments are all keys, and commands with no key (PUBLISH names a channel).
ALL_KEYS = {"DEL", "EXISTS", "UNLINK", "MGET", "TOUCH"}
NO_KEYS = {"PUBLISH", "TIME", "SPUBLISH"}

_ASSIGN = re.compile(r"^\s*(?:local\s+)?([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)\s*=(?!=)\s*(.+)$")
_FUNCTION = re.compile(r"local\s+function\s+(\w+)\s*\(([^)]*)\)")
_HEADER_ENTRY = re.compile(r"^--\s*(KEYS|ARGV)\[(\d+)(\.\.(\d*))?\]")


def _split_top(text: str) -> list[str]:
    """Split at the commas outside brackets and strings."""
    parts, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return [p for p in parts if p]


def _call_args(code: str, at: int) -> str:
    """The text between the parenthesis at ``at`` and its match."""
    depth, quote = 0, ""
    for i in range(at, len(code)):
        ch = code[i]
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return code[at + 1 : i]
    raise ValueError("unbalanced parentheses")


def _code(source: str) -> str:
    """The source without comments (and the shebang), continuation lines joined."""
    lines = [re.sub(r"--.*$", "", line) for line in source.splitlines()]
    lines = [line for line in lines if not line.startswith("#!")]
    return re.sub(r",\s*\n\s*", ", ", "\n".join(lines))


def _is_key(expr: str, safe: set[str]) -> bool:
    expr = expr.strip()
    if ".." in expr or not expr or expr[0] in "'\"":
        return False
    if expr.startswith("KEYS[") and expr.endswith("]"):
        return True
    return expr in safe


def _safe_names(code: str) -> set[str]:
    """The names that only ever hold a key (assignments and function parameters), to a fixed
    point: a parameter is a key when every call passes one."""
    assigned: dict[str, list[str]] = {}
    for line in code.splitlines():
        found = _ASSIGN.match(line)
        if found is None or line.lstrip().startswith(("if ", "for ", "local function")):
            continue
        names = [n.strip() for n in found.group(1).split(",")]
        values = _split_top(found.group(2))
        for i, name in enumerate(names):
            assigned.setdefault(name, []).append(values[i] if i < len(values) else "")
    for function in _FUNCTION.finditer(code):
        name, params = function.group(1), [p.strip() for p in function.group(2).split(",")]
        for call in re.finditer(rf"(?<![\w.]){name}\s*\(", code):
            if code[: call.start()].endswith("function "):
                continue
            args = _split_top(_call_args(code, call.end() - 1))
            for i, param in enumerate(params):
                assigned.setdefault(param, []).append(args[i] if i < len(args) else "")
    safe: set[str] = set()
    while True:
        grown = {n for n, values in assigned.items() if all(_is_key(v, safe) for v in values)}
        if grown <= safe:
            return safe
        safe |= grown


def built_keys(source: str) -> list[str]:
    """The key arguments of the commands a script calls that are not derived from KEYS."""
    code = _code(source)
    safe = _safe_names(code)
    bad = []
    for call in re.finditer(r"redis\.p?call\s*\(", code):
        args = _split_top(_call_args(code, call.end() - 1))
        command = args[0].strip("'\"").upper()
        if command in NO_KEYS:
            continue
        for arg in args[1:] if command in ALL_KEYS else args[1:2]:
            if not _is_key(arg, safe):
                bad.append(f"{command} {arg}")
    return bad


@dataclass
class Header:
    entries: dict[str, list[tuple[int, int | None, str]]]  # KEYS/ARGV -> (first, last, text)
    reply: bool


def header(text: str) -> Header:
    """The documented KEYS and ARGV of a file's leading comment block."""
    entries: dict[str, list[tuple[int, int | None, str]]] = {"KEYS": [], "ARGV": []}
    reply = False
    current: list[str] | None = None
    for line in text.splitlines()[1:]:
        if not line.startswith("--") or line.startswith("--#include"):
            break
        found = _HEADER_ENTRY.match(line)
        if found:
            first = int(found.group(2))
            last = None if found.group(3) and not found.group(4) else int(found.group(4) or first)
            current = [line]
            entries[found.group(1)].append((first, last, line))
        elif current is not None and line.startswith("--   "):
            entries_of = entries["KEYS"] + entries["ARGV"]
            first, last, text_ = entries_of[-1]
            kind = "KEYS" if entries["KEYS"] and entries["KEYS"][-1] is entries_of[-1] else "ARGV"
            entries[kind][-1] = (first, last, text_ + " " + line)
        else:
            current = None
        reply = reply or line.startswith("-- Reply:")
    return Header(entries, reply)


def undocumented(text: str, source: str) -> list[str]:
    """KEYS/ARGV the script uses that its header does not list; KEYS entries that name no
    ``shared.wire.keys`` function (or one that does not exist); a missing reply."""
    found = header(text)
    code = _code(source)
    missing = [] if found.reply else ["Reply"]
    for kind in ("KEYS", "ARGV"):
        entries = found.entries[kind]

        def covered(i: int, entries: list[tuple[int, int | None, str]] = entries) -> bool:
            return any(first <= i and (last is None or i <= last) for first, last, _ in entries)

        for index in sorted({int(i) for i in re.findall(rf"\b{kind}\[(\d+)\]", code)}):
            if not covered(index):
                missing.append(f"{kind}[{index}]")
        dynamic = re.search(rf"#{kind}\b(?!\[)|\b{kind}\[(?!\d+\])|unpack\({kind}\b", code)
        if dynamic and not any(last is None for _, last, _ in entries):
            missing.append(f"{kind}[n..] (used with a computed index)")
    for _, _, text_ in found.entries["KEYS"]:
        names = re.findall(r"\bkeys\.(\w+)\(", text_)
        if not names or any(not callable(getattr(keys, name, None)) for name in names):
            missing.append(f"a shared.wire.keys function for: {text_}")
    return missing


@pytest.mark.parametrize("name", lua.names())
def test_every_key_comes_from_keys(name: str) -> None:
    found = built_keys(lua.SCRIPTS[name].source)
    assert not found, f"{name} builds keys inside the script: {found}"


@pytest.mark.parametrize("name", lua.names())
def test_the_header_documents_every_key_and_argument(name: str) -> None:
    text = lua.raw(name)
    assert text.startswith("#!lua\n"), "scripts open with the #!lua shebang"
    assert not undocumented(text, lua.SCRIPTS[name].source)


def test_every_script_is_in_the_registry() -> None:
    assert sorted(lua.SCRIPTS) == lua.names()


EXAMPLES = Path(__file__).parent / "lua_examples"
BAD = (EXAMPLES / "bad.lua").read_text()


def test_a_bad_script_fails_both_checks() -> None:
    assert built_keys(BAD) == [
        "GET key",  # touch(prefix): a parameter one call fills from ARGV
        "SET KEYS[1] .. ':other'",
        "SET copy",
        "GET 'conch:literal'",
        "HGET prefix",
        "DEL prefix .. 'x'",
    ]
    assert undocumented(BAD, lua.expand(BAD)) == [
        "KEYS[n..] (used with a computed index)",
        "ARGV[2]",
    ]
    no_key_function = BAD.replace("keys.stats(model, version)", "the statistics hash")
    assert "a shared.wire.keys function" in " ".join(undocumented(no_key_function, BAD))


def test_a_good_script_passes() -> None:
    good = (EXAMPLES / "good.lua").read_text()
    assert built_keys(good) == []
    assert undocumented(good, lua.expand(good)) == []
