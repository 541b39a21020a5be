"""Triton's start-up options on ``conch up``'s parser, in Triton's syntax.

Every option takes ``--opt=VALUE`` and ``--opt VALUE``; a boolean also takes ``--opt`` alone, and
its value as Triton's ``ParseOption<bool>`` reads it (true/on/1, false/off/0, any case). The
options Conch refuses (``conch.triton_options``) are recognised by name, with or without a value,
and recorded in ``triton_refused`` for ``conch.up_args`` to refuse with the reason; argparse's
own error stays for names that are neither Conch's nor Triton's.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from conch import triton_options

TRUE = ("true", "on", "1")
FALSE = ("false", "off", "0")


def boolean(text: str) -> bool:
    """Triton's spelling of a boolean value (``--strict-readiness false``)."""
    lowered = text.strip().lower()
    if lowered in TRUE:
        return True
    if lowered in FALSE:
        return False
    raise argparse.ArgumentTypeError(f"expected true|false|1|0|on|off, got {text!r}")


def verbosity(text: str) -> int:
    """``--log-verbose``: a level (0: off), or true/false as 1/0 (Triton's reading)."""
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return int(lowered == "true")
    try:
        return int(lowered)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def add_boolean(
    group: argparse._ActionsContainer,
    *names: str,
    default: bool | None,
    help: str,
    negative: bool = False,
) -> None:
    """A boolean in Triton's forms; ``negative`` also keeps a ``--no-NAME`` spelling."""
    group.add_argument(
        *names, nargs="?", const=True, default=default, type=boolean, metavar="BOOL", help=help
    )
    if negative:
        dest = names[0].lstrip("-").replace("-", "_")
        group.add_argument(
            "--no-" + names[0].lstrip("-"),
            dest=dest,
            action="store_false",
            help=argparse.SUPPRESS,
        )


class _Recorded(argparse.Action):
    """A Triton option Conch refuses, or accepts with one value only: recorded as given."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        name = (option_string or self.dest).lstrip("-")
        found: list[tuple[str, str | None]] = list(getattr(namespace, "triton_refused", None) or [])
        value = values if isinstance(values, str) or values is None else str(values)
        found.append((name, _canonical(name, value)))
        namespace.triton_refused = found


def _canonical(name: str, value: str | None) -> str | None:
    """The value in the table's spelling: a boolean as true/false, a number without padding."""
    option = triton_options.BY_NAME[name]
    if value is None:
        return "true" if option.only in ("true", "false") else None  # a bare boolean is true
    if option.only in ("true", "false"):
        lowered = value.strip().lower()
        return "true" if lowered in TRUE else "false" if lowered in FALSE else value
    if option.only.isdigit():
        try:
            return str(int(value))
        except ValueError:
            return value
    return value


def add_refused(parser: argparse.ArgumentParser, registered: set[str]) -> None:
    """Every Triton option the table does not mark implemented, recognised by name."""
    parser.set_defaults(triton_refused=[])
    for option in triton_options.OPTIONS:
        if option.status == triton_options.IMPLEMENTED or f"--{option.name}" in registered:
            continue
        parser.add_argument(
            f"--{option.name}",
            nargs="?",
            action=_Recorded,
            dest=f"triton_{option.name.replace('-', '_')}",
            default=argparse.SUPPRESS,
            help=argparse.SUPPRESS,
        )


def add_model_control(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("models", "Triton's model repository options")
    group.add_argument(
        "--model-repository",
        "--model-store",
        action="append",
        required=True,
        metavar="PATH|s3://...",
        help="a model repository: a directory or s3://bucket/prefix; repeatable (a model "
        "name found in two is served from neither, as in Triton)",
    )
    group.add_argument(
        "--model-control-mode",
        type=str.lower,
        choices=["none", "poll", "explicit", "on_demand"],
        default="none",
        help="none: load everything at start; poll: follow the repositories; explicit: load "
        "--load-model at start, then what the repository API asks (for every worker); "
        "on_demand (Conch's): index everything, load a model on one worker at its first "
        "request, evict the least recently used (docs/many-models.md)",
    )
    group.add_argument(
        "--repository-poll-secs",
        type=int,
        default=15,
        help="seconds between polls of the repositories (poll mode)",
    )
    group.add_argument(
        "--load-model",
        action="append",
        default=[],
        metavar="NAME",
        help="a model to load at start in explicit mode; repeatable; '*' (alone) loads all",
    )
    add_on_demand(group)
    group.add_argument(
        "--model-config-name",
        default="",
        help="the configuration file to read in each model's configs/ directory "
        "(configs/NAME.pbtxt), else config.pbtxt",
    )
    group.add_argument(
        "--backend-directory",
        default="",
        metavar="DIR",
        help='where Python-based backends are: a model with backend: "NAME" is served by the '
        "python worker with DIR/NAME/model.py; several DIRs separated by ':' or ',', searched in "
        "order (default: /opt/tritonserver/backends, then Conch's examples/backends)",
    )
    add_boolean(
        group,
        "--exit-on-error",
        default=True,
        help="true: a model that fails to load at start stops conch up; false: it serves the "
        "models that loaded",
    )
    group.add_argument(
        "--disable-auto-complete-config",
        action="store_true",
        help="configurations must be complete (the same as --strict-model-config=true)",
    )
    add_boolean(
        group,
        "--strict-model-config",
        default=False,
        negative=True,
        help="Triton's deprecated --strict-model-config: true turns auto-complete off",
    )
    group.add_argument(
        "--rate-limit",
        type=str.lower,
        choices=["off", "execution_count"],
        default="off",
        help="execution_count: instances run a batch only while they hold their rate_limiter "
        "resources, counted across the fleet (docs/rate-limiter.md)",
    )
    group.add_argument(
        "--rate-limit-resource",
        action="append",
        default=[],
        metavar="NAME:COUNT[:DEVICE]",
        help="the copies of a rate limiter resource (on one GPU with DEVICE); repeatable",
    )
    group.add_argument(
        "--exit-timeout-secs",
        type=int,
        default=30,
        help="seconds each gateway and worker may drain in-flight requests on stop",
    )
    group.add_argument(
        "--response-cache-byte-size",
        type=int,
        default=None,
        help="Triton's deprecated spelling of --cache-config local,size=N",
    )


def add_on_demand(group: argparse._ArgumentGroup) -> None:
    """on_demand mode's settings (docs/many-models.md)."""
    group.add_argument(
        "--model-memory-budget",
        default="",
        metavar="BYTES|FRACTION",
        help="on_demand: the memory each worker's models may take, in bytes (2GiB, 512MiB) or "
        "as a fraction of the machine's (0.5; a GPU worker's: of the GPU's); default 0.5",
    )
    group.add_argument(
        "--model-idle-unload-seconds",
        type=float,
        default=300.0,
        help="on_demand: a copy that executed nothing for this long is unloaded (0: never)",
    )
    group.add_argument(
        "--model-min-copies",
        type=int,
        default=1,
        help="on_demand: copies an idle model keeps (0: an idle model is unloaded entirely)",
    )


def add_tls(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("tls", "TLS on the gateway's HTTP and gRPC ports")
    for proto in ("http", "grpc"):
        upper = proto.upper() if proto == "http" else "gRPC"
        add_boolean(group, f"--{proto}-use-ssl", default=False, help=f"{upper} over TLS")
        add_boolean(
            group,
            f"--{proto}-use-ssl-mutual",
            default=False,
            help=f"{upper} over TLS with client certificates (implies --{proto}-use-ssl)",
        )
        group.add_argument(f"--{proto}-server-cert", default="", help="PEM certificate file")
        group.add_argument(f"--{proto}-server-key", default="", help="PEM key file")
        group.add_argument(
            f"--{proto}-root-cert", default="", help="PEM file of the CA of client certificates"
        )
    group.add_argument(
        "--envoy-server-cert", default="", help="TLS at the Envoy edge (--with-envoy): PEM file"
    )
    group.add_argument("--envoy-server-key", default="", help="its PEM key file")
    group.add_argument("--envoy-root-cert", default="", help="CA of the edge's client certificates")
    add_boolean(
        group,
        "--envoy-use-ssl-mutual",
        default=False,
        help="the edge requires client certificates signed by --envoy-root-cert",
    )


def add_edge(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("edge", "who may call what, and how answers travel")
    group.add_argument(
        "--http-restricted-api",
        action="append",
        default=[],
        metavar="CATEGORY[,CATEGORY...]:HEADER=VALUE",
        help="HTTP API categories answered only with that header; repeatable",
    )
    group.add_argument(
        "--grpc-restricted-protocol",
        action="append",
        default=[],
        metavar="CATEGORY[,CATEGORY...]:HEADER=VALUE",
        help="gRPC protocol categories answered only with that metadata; repeatable",
    )
    group.add_argument(
        "--grpc-infer-response-compression-level",
        type=str.lower,
        choices=["none", "low", "medium", "high"],
        default="none",
        help="compression of gRPC inference responses",
    )


def add_addresses_and_logs(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("triton", "Triton's spelling of Conch's own options")
    group.add_argument("--http-address", default=None, help="the gateway's bind address")
    group.add_argument(
        "--grpc-address", default=None, help="the same address (one gateway binds both)"
    )
    add_boolean(group, "--allow-grpc", default=True, help="false: no gRPC port")
    group.add_argument(
        "--log-verbose", type=verbosity, default=None, help="above 0: log level DEBUG"
    )
    for level in ("info", "warning", "error"):
        add_boolean(
            group, f"--log-{level}", default=None, help=f"false: no {level} lines (a threshold)"
        )
