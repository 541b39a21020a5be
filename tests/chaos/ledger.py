"""The recording model's ledger: which request ids were executed, and how often.

Each model process of ``chaos_recorder`` appends ``S ids`` when a batch starts and ``D ids``
when its results are ready (``examples/python_models/chaos_recorder/model.py``). An execution
counts when its ``D`` line is there: its answer could leave the model. A started batch without
its ``D`` line was killed mid-execution (by the fault) and produced nothing.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Ledger:
    started: Counter[int]
    executed: Counter[int]

    @classmethod
    def read(cls, record_dir: Path) -> Ledger:
        started: Counter[int] = Counter()
        executed: Counter[int] = Counter()
        for path in sorted(record_dir.glob("exec-*.log")):
            for line in path.read_text().splitlines():
                kind, _, ids = line.partition(" ")
                if not ids:
                    continue
                numbers = [int(i) for i in ids.split(",")]
                (executed if kind == "D" else started).update(numbers)
        return cls(started, executed)

    def executions(self, number: int) -> int:
        return self.executed.get(number, 0)

    def executed_twice(self, numbers: set[int]) -> list[int]:
        return sorted(n for n in numbers if self.executed.get(n, 0) > 1)

    def interrupted(self, numbers: set[int]) -> int:
        """Starts without a matching finish: batches a fault killed mid-execution."""
        return sum(max(0, self.started[n] - self.executed[n]) for n in numbers)
