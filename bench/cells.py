"""Benchmark cells: model, concurrency and request format, written as ``mlp:64:binary``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Cell:
    model: str
    concurrency: int
    binary: bool = False

    def __str__(self) -> str:
        return f"{self.model}:{self.concurrency}{':binary' if self.binary else ''}"


def parse_cells(spec: str) -> list[Cell]:
    cells = []
    for item in filter(None, (part.strip() for part in spec.split(","))):
        parts = item.split(":")
        if len(parts) not in (2, 3) or not parts[1].isdigit() or parts[2:] not in ([], ["binary"]):
            raise SystemExit(f"bad cell '{item}': expected MODEL:CONCURRENCY[:binary]")
        cells.append(Cell(parts[0], int(parts[1]), parts[2:] == ["binary"]))
    return cells
