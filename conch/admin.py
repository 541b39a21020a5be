"""``conch admin ...``: the admin API from the command line.

    conch admin weights set simple 1=90 2=10
    conch admin weights get simple
    conch admin tenants put acme --generate-keys 1 --rps 50 --burst 10 --priority 2 --models simple
    conch admin models load simple --config override.json

The gateway's address is ``--url`` or ``CONCH_ADMIN_URL`` (default http://localhost:8000), the
admin token ``--token`` or ``CONCH_ADMIN_TOKEN``. Answers are printed as JSON; an error prints
the gateway's message and exits with status 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from conch.admin_client import AdminClient, AdminError

DEFAULT_URL = "http://localhost:8000"


def parse_weights(pairs: Sequence[str]) -> dict[str, int]:
    """``["1=90", "2=10"]`` -> ``{"1": 90, "2": 10}``."""
    weights: dict[str, int] = {}
    for pair in pairs:
        version, sep, weight = pair.partition("=")
        if not sep or not version.strip() or not weight.strip().lstrip("-").isdigit():
            raise ValueError(f"expected VERSION=WEIGHT (e.g. 1=90), got '{pair}'")
        weights[version.strip()] = int(weight)
    return weights


def parse_model_limits(items: Sequence[str]) -> dict[str, dict[str, float]]:
    """``["simple=10:5"]`` -> ``{"simple": {"requests_per_second": 10, "burst": 5}}``."""
    limits: dict[str, dict[str, float]] = {}
    for item in items:
        model, sep, spec = item.partition("=")
        rate, colon, burst = spec.partition(":")
        try:
            if not sep or not colon:
                raise ValueError
            limits[model] = {"requests_per_second": float(rate), "burst": int(burst)}
        except ValueError:
            raise ValueError(f"expected MODEL=RPS:BURST (e.g. simple=10:5), got '{item}'") from None
    return limits


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="conch admin", description="Conch admin API client")
    parser.add_argument("--url", default=os.environ.get("CONCH_ADMIN_URL", DEFAULT_URL))
    parser.add_argument("--token", default=os.environ.get("CONCH_ADMIN_TOKEN", ""))
    groups = parser.add_subparsers(dest="group", required=True)

    weights = groups.add_parser("weights", help="version weights of a model")
    wsub = weights.add_subparsers(dest="verb", required=True)
    wsub.add_parser("get").add_argument("model")
    wset = wsub.add_parser("set", help="e.g. weights set simple 1=90 2=10")
    wset.add_argument("model")
    wset.add_argument("pairs", nargs="+", metavar="VERSION=WEIGHT")
    wsub.add_parser("clear", help="route to the newest version again").add_argument("model")

    shadow = groups.add_parser("shadow", help="shadow traffic to a candidate version")
    ssub = shadow.add_subparsers(dest="verb", required=True)
    ssub.add_parser("get").add_argument("model")
    sset = ssub.add_parser("set", help="e.g. shadow set simple 2 10  (10 %% to version 2)")
    sset.add_argument("model")
    sset.add_argument("version", type=int)
    sset.add_argument("percent", type=float)
    ssub.add_parser("clear").add_argument("model")

    tenants = groups.add_parser("tenants", help="tenants, API keys, limits, priorities")
    tsub = tenants.add_subparsers(dest="verb", required=True)
    tsub.add_parser("list")
    tsub.add_parser("get").add_argument("name")
    tsub.add_parser("delete").add_argument("name")
    tput = tsub.add_parser("put", help="create or replace a tenant")
    tput.add_argument("name")
    tput.add_argument("--key", action="append", default=None, help="an API key (repeatable)")
    tput.add_argument(
        "--add-key", action="append", default=None, help="add a key, keeping the current ones"
    )
    tput.add_argument("--revoke-keys", action="store_true", help="revoke every current key")
    tput.add_argument("--generate-keys", type=int, default=0, metavar="N")
    tput.add_argument("--rps", type=float, help="requests per second (with --burst)")
    tput.add_argument("--burst", type=int)
    tput.add_argument("--model-limit", action="append", default=[], metavar="MODEL=RPS:BURST")
    tput.add_argument("--priority", type=int, default=0)
    tput.add_argument(
        "--timeout-ms", type=int, default=0, help="deadline of the tenant's requests (0: none)"
    )
    tput.add_argument("--models", default="*", help="comma-separated names or globs")

    models = groups.add_parser("models", help="fleet-wide model control (repository API)")
    msub = models.add_subparsers(dest="verb", required=True)
    msub.add_parser("index")
    mload = msub.add_parser("load")
    mload.add_argument("model")
    mload.add_argument("--config", help="a JSON file with the configuration override")
    munload = msub.add_parser("unload")
    munload.add_argument("model")
    munload.add_argument("--versions", help="comma-separated versions (default: all)")
    munload.add_argument("--dependents", action="store_true", help="unload dependents too")
    return parser


def run(args: argparse.Namespace, client: AdminClient) -> Any:
    group, verb = args.group, args.verb
    if group in ("weights", "shadow"):
        path = f"/v2/admin/models/{quote(args.model, safe='')}/{group}"
        if verb == "get":
            return client.call("GET", path)
        if verb == "clear":
            return client.call("DELETE", path)
        if group == "weights":
            return client.call("PUT", path, {"weights": parse_weights(args.pairs)})
        return client.call("PUT", path, {"version": args.version, "percent": args.percent})
    if group == "tenants":
        if verb == "list":
            return client.call("GET", "/v2/admin/tenants")
        path = f"/v2/admin/tenants/{quote(args.name, safe='')}"
        if verb == "get":
            return client.call("GET", path)
        if verb == "delete":
            return client.call("DELETE", path)
        return client.call("PUT", path, _tenant_body(args, client, path))
    if verb == "index":
        return client.call("POST", "/v2/repository/index", {})
    path = f"/v2/repository/models/{quote(args.model, safe='')}/{verb}"
    parameters: dict[str, Any] = {}
    if verb == "load" and args.config:
        with open(args.config, encoding="utf-8") as handle:
            parameters["config"] = handle.read()
    if verb == "unload":
        parameters["unload_dependents"] = args.dependents
        if args.versions:
            parameters["versions"] = [int(v) for v in args.versions.split(",") if v.strip()]
    client.call("POST", path, {"parameters": parameters})
    return {"model": args.model, verb: "ok"}


def _tenant_body(args: argparse.Namespace, client: AdminClient, path: str) -> dict[str, Any]:
    body: dict[str, Any] = {
        "priority": args.priority,
        "timeout_ms": args.timeout_ms,
        "models": [m.strip() for m in args.models.split(",") if m.strip()],
        "generate_keys": args.generate_keys,
        "model_rate_limits": parse_model_limits(args.model_limit),
    }
    if (args.rps is None) != (args.burst is None):
        raise ValueError("--rps and --burst go together")
    if args.rps is not None:
        body["rate_limit"] = {"requests_per_second": args.rps, "burst": args.burst}
    if args.revoke_keys:
        body["api_keys"] = list(args.key or [])
    elif args.key is not None:
        body["api_keys"] = list(args.key)
    if args.add_key:
        try:
            current = client.call("GET", path)["api_keys"]
        except AdminError as exc:
            if exc.status != 404:
                raise
            current = []
        body["api_keys"] = [*body.get("api_keys", current), *args.add_key]
    return body


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    client = AdminClient(args.url, args.token)
    try:
        result = run(args, client)
    except ValueError as exc:
        print(f"conch admin: {exc}", file=sys.stderr)
        return 2
    except AdminError as exc:
        status = f"HTTP {exc.status}: " if exc.status else ""
        print(f"conch admin: {status}{exc.message}", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
