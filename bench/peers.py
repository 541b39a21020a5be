"""The peers measured beside Conch, each cell against the peer's best configuration for it.

The harness (``bench/harness``) tuned two peers on this machine kind (its RESULTS-peer.md, kept
with the shared harness it was copied from; docs/performance.md quotes it):
MLServer is fastest with inference in its HTTP process, one ONNX Runtime thread, httptools, metrics
off and adaptive batching *off* (batching costs its full 2 ms window at c=1 and does not raise
throughput at c=64); Ray Serve with HAProxy, two replicas and ``@serve.batch`` at high concurrency,
and with batching off at c=1. A cell is compared with the configuration that serves it best, so a
target met is met against the strongest peer there is, not a convenient one.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.cells import Cell
from bench.tree_cpu import tree_cpu_seconds

KNOWN = ("mlserver", "ray")


@dataclass(frozen=True)
class PeerConfig:
    label: str
    argv: list[str]
    env: dict[str, str]


def parse_peers(spec: str) -> list[str]:
    peers = [p.strip() for p in spec.split(",") if p.strip()]
    unknown = [p for p in peers if p not in KNOWN]
    if unknown:
        raise SystemExit(f"unknown peer {unknown[0]!r}: expected one of {', '.join(KNOWN)}")
    return peers


def serves(cell: Cell) -> bool:
    """Peers answer JSON requests to the harness's own models only."""
    return not (cell.binary or cell.sequence or cell.chain) and cell.model in ("mlp", "add_sub")


def config(peer: str, cell: Cell, harness: Path, port: int, root: Path) -> PeerConfig:
    """The peer's best configuration for this cell (RESULTS-peer.md).

    The runtimes' scripts are run with ``bash`` rather than by their execute bit, which a wheel
    install of the harness does not always keep.
    """
    if peer == "mlserver":
        return PeerConfig(
            "mlserver-tuned",
            ["bash", str(harness / "mlserver_runtime" / "serve.sh"), "off", str(port), "0"],
            {
                "MLSERVER_VENV": str(root / "mlserver-tuned-venv"),
                "INTRA_OP_THREADS": "1",
                "SETTINGS_JSON": '{"metrics_endpoint": null}',
            },
        )
    batching = [] if cell.concurrency > 1 else ["--batching", "off"]
    return PeerConfig(
        "rayserve-tuned" + ("-nobatch" if batching else ""),
        ["bash", str(harness / "rayserve_runtime" / "serve.sh"), str(port), "tuned", *batching],
        {"RAYSERVE_VENV": str(root / "rayserve-venv"), "MODELS": "mlp add_sub"},
    )


def missing_install(peer: str, root: Path, harness: Path) -> str | None:
    venv = root / ("mlserver-tuned-venv" if peer == "mlserver" else "rayserve-venv")
    if (venv / "bin" / "python").exists():
        return None
    script = "setup.sh" if peer == "mlserver" else "rayserve_runtime/install.sh"
    return f"peer {peer}: {venv} is missing; run `bash {harness / script}` first"


def grouped(
    peer: str, cells: list[Cell], harness: Path, port: int, root: Path
) -> Iterator[tuple[PeerConfig, list[Cell]]]:
    """The cells a peer serves, grouped by configuration (one server start per group)."""
    groups: dict[str, tuple[PeerConfig, list[Cell]]] = {}
    for cell in filter(serves, cells):
        chosen = config(peer, cell, harness, port, root)
        groups.setdefault(chosen.label, (chosen, []))[1].append(cell)
    yield from groups.values()


class TreeCpu:
    """CPU of a server: its leader and every descendant, found anew at each snapshot (Ray starts
    its actors after the server answers, in process groups of their own, all below the leader)."""

    def __init__(self, pid: int):
        self.pid = pid

    def snapshot(self) -> float:
        return tree_cpu_seconds(self.pid)["total"]

    def cores_since(self, before: float, wall_s: float) -> dict[str, float]:
        return {"server": round((self.snapshot() - before) / wall_s, 3)}


def env_for(peer_config: PeerConfig, base: dict[str, str]) -> dict[str, str]:
    return {**base, **peer_config.env, "PATH": os.environ.get("PATH", "")}
