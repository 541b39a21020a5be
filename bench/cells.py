"""Benchmark cells: model, concurrency and request format, written as ``mlp:64:binary``;
``sequence_accumulator:16:sequence`` is 16 concurrent sequences of a stateful model;
``add_sub:64:chain3`` is 64 clients each calling the model 3 times in a row (beside the
``add_sub_chain`` ensemble: ``bench.ensembles``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Cell:
    model: str
    concurrency: int
    binary: bool = False
    sequence: bool = False
    # Calls a client makes one after another per measured request (0: one plain request).
    chain: int = 0

    def __str__(self) -> str:
        kind = ":binary" if self.binary else ":sequence" if self.sequence else ""
        kind = f":chain{self.chain}" if self.chain else kind
        return f"{self.model}:{self.concurrency}{kind}"


def parse_cells(spec: str) -> list[Cell]:
    cells = []
    for item in filter(None, (part.strip() for part in spec.split(","))):
        parts = item.split(":")
        kinds: tuple[list[str], ...] = ([], ["binary"], ["sequence"])
        chain = parts[2][5:] if len(parts) == 3 and parts[2].startswith("chain") else ""
        if (
            len(parts) not in (2, 3)
            or not parts[1].isdigit()
            or (parts[2:] not in kinds and not chain.isdigit())
        ):
            raise SystemExit(
                f"bad cell '{item}': expected MODEL:CONCURRENCY[:binary|:sequence|:chainN]"
            )
        cells.append(
            Cell(
                parts[0],
                int(parts[1]),
                parts[2:] == ["binary"],
                parts[2:] == ["sequence"],
                int(chain or 0),
            )
        )
    return cells
