"""The tests' own habits, checked by walking their source with ``ast``: one poller
(``tests/waiting.py``), one mesh launcher (``tests/mesh.py``), one TCP relay
(``tests/tcp_proxy.py``), so that a fix to any of them reaches every test.

- No hand-rolled wait: a ``while`` loop that sleeps, reads a clock (``time.monotonic()``,
  ``time.time()``, ``time.perf_counter()``, a loop's ``time()``) in its condition or in an
  ``if`` / ``assert`` of its body, and can end on something else than the clock (a ``break`` or
  ``return`` of its own, or a condition with a part that is neither a clock nor a stop flag).
  Loops that run for a time (a load, a delay until a due time) or until an ``Event`` says stop
  are not waits and pass.
- No class outside ``tests/mesh.py`` starts a service of the mesh (an argv with ``-m gateway``,
  ``-m scheduler`` or ``-m workers``).
- No module outside ``tests/tcp_proxy.py`` both accepts connections and dials out (a relay).

Each check is shown catching a small bad example, and the real module it points to.
"""

from __future__ import annotations

import ast
import itertools
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.waiting import retrying_sync

TESTS = Path(__file__).resolve().parents[1]
CLOCKS = {"monotonic", "time", "perf_counter"}
SERVICES = {"gateway", "scheduler", "workers"}
NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
LOOPS = (ast.While, ast.For, ast.AsyncFor)


def _walk(node: ast.AST, skip: tuple[type[ast.AST], ...] = NESTED) -> Iterator[ast.AST]:
    """``node`` and what is under it, not going into ``skip`` (nested functions and classes)."""
    yield node
    for child in ast.iter_child_nodes(node):
        if not isinstance(child, skip):
            yield from _walk(child, skip)


def _body(loop: ast.While, skip: tuple[type[ast.AST], ...] = NESTED) -> Iterator[ast.AST]:
    for statement in loop.body:
        if not isinstance(statement, skip):
            yield from _walk(statement, skip)


def _called(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call):
        if isinstance(node.func, ast.Attribute):
            return node.func.attr
        if isinstance(node.func, ast.Name):
            return node.func.id
    return None


def _reads_clock(node: ast.AST) -> bool:
    return any(
        _called(n) in CLOCKS and not n.args  # type: ignore[attr-defined]
        for n in _walk(node)
    )


def _stop_flag(node: ast.AST) -> bool:
    """``event.is_set()`` or ``not event.is_set()``: a loop told to stop, not a waited-for
    condition."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        node = node.operand
    return _called(node) == "is_set"


def _ends_on_a_condition(loop: ast.While) -> bool:
    exits = any(isinstance(n, ast.Return) for n in _body(loop)) or any(
        isinstance(n, ast.Break) for n in _body(loop, NESTED + LOOPS)
    )
    parts = loop.test.values if isinstance(loop.test, ast.BoolOp) else [loop.test]
    others = [
        p
        for p in parts
        if not isinstance(p, ast.Constant) and not _reads_clock(p) and not _stop_flag(p)
    ]
    return exits or bool(others)


def hand_rolled_waits(source: str) -> list[int]:
    """Lines of the ``while`` loops in ``source`` that wait for something by hand."""
    found = []
    for loop in ast.walk(ast.parse(source)):
        if not isinstance(loop, ast.While):
            continue
        sleeps = any(_called(n) == "sleep" for n in _body(loop))
        tests = [n.test for n in _body(loop) if isinstance(n, (ast.If, ast.Assert))]
        clock = _reads_clock(loop.test) or any(_reads_clock(t) for t in tests)
        if sleeps and clock and _ends_on_a_condition(loop):
            found.append(loop.lineno)
    return found


def service_launchers(source: str) -> list[str]:
    """Classes in ``source`` with an argv that runs ``-m gateway|scheduler|workers``."""
    found = []
    for cls in ast.walk(ast.parse(source)):
        if not isinstance(cls, ast.ClassDef):
            continue
        for node in ast.walk(cls):
            if isinstance(node, (ast.List, ast.Tuple)):
                words = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
                if any(a == "-m" and b in SERVICES for a, b in itertools.pairwise(words)):
                    found.append(cls.name)
                    break
    return found


def is_a_relay(source: str) -> bool:
    """Whether ``source`` accepts connections and also opens connections of its own."""
    calls = {_called(n) for n in ast.walk(ast.parse(source))}
    accepts = bool(calls & {"accept", "start_server", "create_server"})
    dials = bool(calls & {"create_connection", "open_connection", "connect"})
    return accepts and dials


def _modules(*but: str) -> list[tuple[str, str]]:
    return [
        (str(path.relative_to(TESTS.parent)), path.read_text())
        for path in sorted(TESTS.rglob("*.py"))
        if str(path.relative_to(TESTS.parent)) not in but
    ]


# --- the tree -------------------------------------------------------------------------------


def test_no_test_waits_by_hand() -> None:
    found = {
        name: lines
        for name, source in _modules("tests/waiting.py")
        if (lines := hand_rolled_waits(source))
    }
    assert found == {}, f"wait with tests/waiting.py (until, eventually, wait_until): {found}"


def test_only_tests_mesh_starts_the_mesh_services() -> None:
    found = {
        name: classes
        for name, source in _modules("tests/mesh.py")
        if (classes := service_launchers(source))
    }
    assert found == {}, f"start services with tests.mesh.Mesh: {found}"


def test_only_tests_tcp_proxy_relays_tcp() -> None:
    found = [name for name, source in _modules("tests/tcp_proxy.py") if is_a_relay(source)]
    assert found == [], f"relay with tests.tcp_proxy.TcpProxy: {found}"


# --- the checks catch what they are for -----------------------------------------------------

BAD_WAITS = {
    "deadline in the condition": """
def test_x():
    deadline = time.monotonic() + 10
    while not ready() and time.monotonic() < deadline:
        time.sleep(0.1)
""",
    "break on a condition": """
async def test_x():
    deadline = time.time() + 10
    while time.time() < deadline:
        if await ready():
            break
        await asyncio.sleep(0.1)
""",
    "while True with the clock in an if": """
def test_x():
    started = time.monotonic()
    while True:
        answer = probe()
        if answer or time.monotonic() - started > 5:
            break
        time.sleep(0.25)
""",
    "the clock in an assert": """
def test_x():
    deadline = time.monotonic() + 10
    while len(seen) < 4:
        assert time.monotonic() < deadline, seen
        seen.append(look())
        sleep(0.05)
""",
}

NOT_WAITS = {
    "a load for a while": """
def load():
    ends = time.monotonic() + 6
    while time.monotonic() < ends:
        submit()
        time.sleep(0.5)
""",
    "a worker told to stop": """
def run(self):
    deadline = time.monotonic() + 60
    while not self._stop.is_set() and time.monotonic() < deadline:
        self.results.append(call())
        time.sleep(0.003)
""",
    "a delay until a due time": """
def write():
    while (wait := due - time.monotonic()) > 0:
        time.sleep(wait)
""",
    "a retry loop that does not read a clock": """
def test_x():
    for _ in range(4):
        beat()
        time.sleep(0.1)
""",
}


@pytest.mark.parametrize("source", BAD_WAITS.values(), ids=BAD_WAITS.keys())
def test_a_hand_rolled_wait_is_caught(source: str) -> None:
    assert hand_rolled_waits(source) == [4]  # the line of its ``while``


@pytest.mark.parametrize("source", NOT_WAITS.values(), ids=NOT_WAITS.keys())
def test_a_loop_that_is_not_a_wait_passes(source: str) -> None:
    assert hand_rolled_waits(source) == []


def test_a_service_launcher_is_caught() -> None:
    bad = """
class MyMesh:
    def start(self):
        self.gateway = subprocess.Popen([sys.executable, "-m", "gateway"], env=self.env)
"""
    assert service_launchers(bad) == ["MyMesh"]
    assert service_launchers((TESTS / "mesh.py").read_text()) == ["Mesh"]
    assert service_launchers('ARGV = [sys.executable, "-m", "bench"]\n') == []


def test_a_tcp_relay_is_caught() -> None:
    bad = """
async def relay(port, upstream):
    async def one(reader, writer):
        up_reader, up_writer = await asyncio.open_connection(*upstream)
        ...
    return await asyncio.start_server(one, "127.0.0.1", port)
"""
    assert is_a_relay(bad)
    assert is_a_relay((TESTS / "tcp_proxy.py").read_text())
    assert not is_a_relay("sock = socket.create_connection((host, port))\n")


# --- tests/waiting.py's retrying_sync ------------------------------------------------------


def test_retrying_sync_returns_once_the_call_stops_raising() -> None:
    tries: list[int] = []

    def call() -> str:
        tries.append(1)
        if len(tries) < 3:
            raise ConnectionError("not yet")
        return "up"

    assert retrying_sync(call, 5, every=0.001, errors=ConnectionError) == "up"
    assert len(tries) == 3


def test_retrying_sync_raises_the_last_error_after_the_bound() -> None:
    started = time.monotonic()

    def call() -> None:
        raise ConnectionError(f"down at {time.monotonic() - started:.3f}")

    with pytest.raises(ConnectionError, match="down at"):
        retrying_sync(call, 0.05, every=0.01, errors=ConnectionError)
    assert time.monotonic() - started >= 0.05
    with pytest.raises(KeyError):  # not one of ``errors``: at once
        retrying_sync(lambda: {}["x"], 5, errors=ConnectionError)
