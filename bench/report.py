"""Markdown tables of benchmark rows: every row side by side, then Conch against each peer."""

from __future__ import annotations

from typing import Any


def _cell(row: dict[str, Any]) -> str:
    return f"{row['model']} c={row['concurrency']} {row.get('format', 'json')}"


def markdown_table(rows: list[dict[str, Any]]) -> str:
    header = (
        "| server | cell | req/s | p50 ms | p90 ms | p99 ms | errors | avg batch | "
        "CPU µs/req | CPU (cores) by process |"
    )
    lines = [header, "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for row in rows:
        cpu = row.get("cpu_cores") or {}
        cpu_text = ", ".join(f"{k} {v:.2f}" for k, v in sorted(cpu.items())) or (
            f"machine {row.get('machine_cpu', 0):.2f}"
        )
        per_request = row.get("cpu_us_per_req")
        lines.append(
            f"| {row['server']} | {_cell(row)} | {row['rps']:,.0f} | {row['p50_ms']:.2f} | "
            f"{row['p90_ms']:.2f} | {row['p99_ms']:.2f} | {row['errors']} | "
            f"{row.get('avg_batch') or '-'} | {f'{per_request:,.0f}' if per_request else '-'} | "
            f"{cpu_text} |"
        )
    return "\n".join(lines)


def same_run_ratios(rows: list[dict[str, Any]]) -> str:
    """Conch / peer per cell that both served (binary cells against the peer's JSON cell): req/s
    (higher is better), p50, p99 and CPU per request (lower is better)."""
    peers: dict[tuple[str, str, int], dict[str, Any]] = {}
    for row in rows:
        if row["server"] != "conch":
            family = row["server"].removesuffix("-nobatch")
            peers[(family, row["model"], row["concurrency"])] = row
    lines = []
    for row in rows:
        if row["server"] != "conch":
            continue
        for (family, model, concurrency), peer in peers.items():
            if (model, concurrency) != (row["model"], row["concurrency"]):
                continue
            lines.append(
                f"| {_cell(row)} | {family} | {_ratio(row['rps'], peer['rps'])} | "
                f"{_ratio(row['p50_ms'], peer['p50_ms'])} | "
                f"{_ratio(row['p99_ms'], peer['p99_ms'])} | "
                f"{_ratio(row.get('cpu_us_per_req'), peer.get('cpu_us_per_req'))} |"
            )
    if not lines:
        return ""
    head = (
        "| Conch cell | vs peer | req/s ratio | p50 ratio | p99 ratio | CPU/req ratio |\n"
        "|---|---|---:|---:|---:|---:|"
    )
    return head + "\n" + "\n".join(lines)


def _ratio(ours: float | None, theirs: float | None) -> str:
    return f"{ours / theirs:.2f}" if ours and theirs else "-"
