"""The house rules that keep Conch easy to change, checked by walking the source with ``ast``.

- No import cycle among the project's modules (imports under ``TYPE_CHECKING`` count too).
- Services (gateway, scheduler, workers, controlplane) import ``shared`` and never each other,
  nor the ``conch`` command package; ``shared`` imports no service and not ``conch``.
- A module outside tests stays under ~300 lines, or says why at its top (a line starting with
  ``Longer than 300 lines because``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("gateway", "scheduler", "workers", "controlplane", "shared", "conch")
SERVICES = ("gateway", "scheduler", "workers", "controlplane")
SIZE_LIMIT = 300
SIZE_REASON = "Longer than 300 lines because"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[_module_name(path)] = path
    return found


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The project module an import names: the longest known prefix (``a.b.c`` -> ``a.b``)."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def _imports(module: str, path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    named: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            named.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            named.add(base)
            named.update(f"{base}.{alias.name}" for alias in node.names)
    resolved = {_resolve(name) for name in named}
    return {target for target in resolved if target and target != module}


GRAPH = {module: _imports(module, path) for module, path in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _top(module: str) -> str:
    return module.partition(".")[0]


def test_the_walker_sees_every_package_and_their_imports() -> None:
    assert {_top(m) for m in MODULES} == set(PACKAGES)
    assert "shared.wire.keys" in GRAPH["gateway.core.dataplane"]


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles() -> None:
    assert _cycles(GRAPH) == []


@pytest.mark.parametrize("service", SERVICES)
def test_a_service_imports_only_itself_and_shared(service: str) -> None:
    crossing = sorted(
        f"{module} -> {target}"
        for module, targets in GRAPH.items()
        if _top(module) == service
        for target in targets
        if _top(target) not in (service, "shared")
    )
    assert crossing == []


def test_shared_holds_contracts_and_imports_no_service_nor_the_command() -> None:
    crossing = sorted(
        f"{module} -> {target}"
        for module, targets in GRAPH.items()
        if _top(module) == "shared"
        for target in targets
        if _top(target) != "shared"
    )
    assert crossing == []


def test_modules_stay_small_or_say_why() -> None:
    roots = [*PACKAGES, "bench", "scripts", "examples"]
    too_long = []
    for root in roots:
        for path in (ROOT / root).rglob("*.py"):
            text = path.read_text()
            lines = text.count("\n")
            head = "\n".join(text.splitlines()[:30])
            if lines > SIZE_LIMIT and SIZE_REASON not in head:
                too_long.append(f"{path.relative_to(ROOT)}: {lines} lines")
    assert too_long == []


# The modules each folder may keep at its top; everything else lives in a room (a sub-package)
# named for its concept (docs/architecture.md, "Rooms inside the services").
TOP_LEVEL = {
    "shared": set(),
    "gateway": {"settings", "errors", "server_identity"},
    "scheduler": {"service", "settings"},
    "workers": {
        "service", "settings", "backend", "backend_table", "heartbeat", "gpu_metrics",
        "loaded_metrics",
    },
}  # fmt: skip


@pytest.mark.parametrize("folder", sorted(TOP_LEVEL))
def test_a_folder_keeps_only_its_entry_points_at_its_top(folder: str) -> None:
    loose = sorted(
        path.stem
        for path in (ROOT / folder).glob("*.py")
        if path.stem not in {"__init__", "__main__"} | TOP_LEVEL[folder]
    )
    assert loose == [], f"put {loose} in a room of {folder}/ (docs/architecture.md)"


@pytest.mark.parametrize("room", ["shared.wire", "shared.runtime"])
def test_the_contract_and_the_plumbing_do_not_depend_on_the_fleet(room: str) -> None:
    crossing = sorted(
        f"{module} -> {target}"
        for module, targets in GRAPH.items()
        if module.startswith(f"{room}.")
        for target in targets
        if target.startswith("shared.fleet")
    )
    assert crossing == []


@pytest.mark.parametrize(
    "room", ["gateway.core", "gateway.routing", "gateway.extensions", "gateway.admin"]
)
def test_the_data_plane_does_not_know_the_protocols(room: str) -> None:
    """Protocol code is thin: REST, gRPC and the OpenAI API call into these rooms, never back."""
    protocols = ("gateway.rest", "gateway.grpc", "gateway.openai")
    crossing = sorted(
        f"{module} -> {target}"
        for module, targets in GRAPH.items()
        if module.startswith(f"{room}.")
        for target in targets
        if target.startswith(protocols)
    )
    assert crossing == []
