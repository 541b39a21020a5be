"""Turn a chaos run's figures (``$CONCH_CHAOS_REPORT``, JSON lines) into Markdown tables.

    python -m tests.chaos.report chaos-report.jsonl

The tables are the ones ``docs/reliability.md`` shows; the latest entry of each fault, input
class and soak wins.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def _latest(entries: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for entry in entries:
        if entry.get("kind") == kind:
            found[entry["name"]] = entry
    return found


def fault_table(entries: dict[str, dict[str, Any]]) -> list[str]:
    lines = [
        "| fault | requests | ok | cut | lost | executed twice | wrong | refused | other errors "
        "| orphaned entries | batches killed mid-run |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, e in entries.items():
        o = e["outcomes"]
        cut = f"{o['cut']}" + (f" ({e['cut_outside_fault']} outside)" if o["cut"] else "")
        lines.append(
            f"| {name} | {e['requests']} ({e['rate']:.0f}/s, {e['seconds']:.0f} s) | {o['ok']} "
            f"| {cut} | {o['lost']} | {e['executed_twice']} | {o['wrong']} | {o['refused']} "
            f"| {o['error']} | {sum(e['orphans'].values())} | {e['interrupted_executions']} |"
        )
    return lines


def fuzz_table(entries: dict[str, dict[str, Any]]) -> list[str]:
    lines = ["| input class | cases | answers | slowest answer |", "|---|---|---|---|"]
    for name, e in entries.items():
        answers = ", ".join(f"{k}: {v}" for k, v in sorted(e["statuses"].items()))
        lines.append(f"| {name} | {e['cases']} | {answers} | {e['slowest_s']:.2f} s |")
    return lines


def soak_lines(entry: dict[str, Any]) -> list[str]:
    o = entry["outcomes"]
    lines = [
        f"{entry['requests']} requests at {entry['rate']:.0f}/s in {entry['seconds']:.0f} s, "
        f"faults at (s): {', '.join(f'{t} {n}' for t, n in entry['faults'])}.",
        "",
        f"ok {o['ok']}, cut {o['cut']} ({entry['cut_outside_fault']} outside a fault), "
        f"lost {o['lost']}, executed twice {entry['executed_twice']}, wrong {o['wrong']}, "
        f"refused {o['refused']}, other errors {o['error']}, orphaned entries "
        f"{sum(entry['orphans'].values())}; Redis keys before {entry['keys_before']}, after "
        f"{entry['keys_after']}.",
        "",
        "| process | RSS after warm-up | RSS at the end | growth |",
        "|---|---|---|---|",
    ]
    for name, r in entry["rss"].items():
        lines.append(
            f"| {name} | {r['warm_mib']} MiB | {r['end_mib']} MiB | {r['growth'] * 100:+.1f} % |"
        )
    return lines


def render(path: Path) -> str:
    if not path.exists():
        return f"no figures: {path} does not exist (did the run start?)"
    entries = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    out: list[str] = []
    if faults := _latest(entries, "fault"):
        out += ["### Faults", "", *fault_table(faults), ""]
    if fuzz := _latest(entries, "fuzz"):
        out += ["### Fuzzing", "", *fuzz_table(fuzz), ""]
    if soak := _latest(entries, "soak"):
        out += ["### Soak", "", *soak_lines(soak["soak"]), ""]
    return "\n".join(out)


if __name__ == "__main__":
    print(render(Path(sys.argv[1] if len(sys.argv) > 1 else "chaos-report.jsonl")))
