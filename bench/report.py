"""A Markdown table of benchmark rows (peer and Conch side by side)."""

from __future__ import annotations

from typing import Any


def markdown_table(rows: list[dict[str, Any]]) -> str:
    header = (
        "| server | cell | req/s | p50 ms | p90 ms | p99 ms | errors | avg batch | "
        "CPU (cores) by process |"
    )
    lines = [header, "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for row in rows:
        cell = f"{row['model']} c={row['concurrency']} {row.get('format', 'json')}"
        cpu = row.get("cpu_cores") or {}
        cpu_text = ", ".join(f"{k} {v:.2f}" for k, v in sorted(cpu.items())) or (
            f"machine {row.get('machine_cpu', 0):.2f}"
        )
        lines.append(
            f"| {row['server']} | {cell} | {row['rps']:,.0f} | {row['p50_ms']:.2f} | "
            f"{row['p90_ms']:.2f} | {row['p99_ms']:.2f} | {row['errors']} | "
            f"{row.get('avg_batch') or '-'} | {cpu_text} |"
        )
    return "\n".join(lines)
