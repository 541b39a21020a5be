"""Writes Conch's Grafana dashboards (deploy/grafana/dashboards/*.json) from scripts/dashboards/.

    python scripts/make_dashboards.py            # rewrite the JSON files
    python scripts/make_dashboards.py --check    # exit 1 if a file differs from what it makes

Every panel query is checked against a live mesh and Prometheus (tests/observability), and every
dashboard against Grafana's own dashboard JSON Schema (tests/observability/
grafana-dashboard.schema.json, made by scripts/grafana_schema/make_schema.sh).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dashboards import DASHBOARDS
from dashboards.grafana import render

OUT = Path(__file__).resolve().parent.parent / "deploy" / "grafana" / "dashboards"


def files() -> dict[Path, str]:
    return {
        OUT / f"{d.uid}.json": json.dumps(render(d), indent=2, sort_keys=False) + "\n"
        for d in DASHBOARDS
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if a file is out of date")
    args = parser.parse_args(argv)
    stale = []
    for path, text in files().items():
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(path.name)
            continue
        path.write_text(text)
        print(f"wrote {path}")
    if stale:
        print(f"out of date (run scripts/make_dashboards.py): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
