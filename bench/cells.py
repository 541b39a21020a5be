"""Benchmark cells: model, concurrency and request format, written as ``mlp:64:binary``;
``sequence_accumulator:16:sequence`` is 16 concurrent sequences of a stateful model."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Cell:
    model: str
    concurrency: int
    binary: bool = False
    sequence: bool = False

    def __str__(self) -> str:
        kind = ":binary" if self.binary else ":sequence" if self.sequence else ""
        return f"{self.model}:{self.concurrency}{kind}"


def parse_cells(spec: str) -> list[Cell]:
    cells = []
    for item in filter(None, (part.strip() for part in spec.split(","))):
        parts = item.split(":")
        kinds = ([], ["binary"], ["sequence"])
        if len(parts) not in (2, 3) or not parts[1].isdigit() or parts[2:] not in kinds:
            raise SystemExit(f"bad cell '{item}': expected MODEL:CONCURRENCY[:binary|:sequence]")
        cells.append(
            Cell(parts[0], int(parts[1]), parts[2:] == ["binary"], parts[2:] == ["sequence"])
        )
    return cells
