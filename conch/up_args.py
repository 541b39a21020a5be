"""``conch up``'s options once parsed: Triton's rules between them, and their Conch meanings.

:func:`resolve` refuses what Conch does not do (by name, with the reason), applies Triton's rules
(``--load-model=*`` alone, ``--disable-auto-complete-config`` over ``--strict-model-config``,
``--grpc-use-ssl-mutual`` implying ``--grpc-use-ssl``, ``--response-cache-byte-size`` against
``--cache-config``) and turns Triton's spellings into Conch's settings in place (one bind address,
one log level). A :class:`UsageError` is printed as one line and ``conch up`` exits 2.
"""

from __future__ import annotations

import argparse
import os

from conch import triton_options

DEFAULT_HOST = "127.0.0.1"


class UsageError(Exception):
    """A start-up line ``conch up`` refuses; the message says what and why."""


def resolve(args: argparse.Namespace) -> list[str]:
    """Check and normalise ``args`` (in place); the notes to print. Raises :class:`UsageError`."""
    notes: list[str] = []
    for name, value in getattr(args, "triton_refused", []):
        why = triton_options.refusal(name, value)
        if why is not None:
            raise UsageError(why)
    args.model_repository = list(dict.fromkeys(args.model_repository))  # Triton keeps a set
    _models(args, notes)
    _addresses(args)
    args.log_level = _log_level(args)
    if args.log_format in ("default", "ISO8601"):
        args.log_format = "text"
    args.strict_model_config = bool(args.strict_model_config or args.disable_auto_complete_config)
    if args.response_cache_byte_size is not None:
        if args.cache_config:
            raise UsageError(
                "--response-cache-byte-size and --cache-config are both given; give one "
                "(--cache-config local,size=N is the same as --response-cache-byte-size N)"
            )
        args.cache_config = [f"local,size={args.response_cache_byte_size}"]
    _tls(args)
    for flag, specs in (
        ("--http-restricted-api", args.http_restricted_api),
        ("--grpc-restricted-protocol", args.grpc_restricted_protocol),
    ):
        for spec in specs:
            _check_restriction(flag, spec)
    return notes


def _models(args: argparse.Namespace, notes: list[str]) -> None:
    names = list(dict.fromkeys(args.load_model))
    if "*" in names and len(names) > 1:
        raise UsageError(
            "--load-model=* must be the only --load-model (it loads every model); "
            f"also given: {', '.join(n for n in names if n != '*')}"
        )
    args.load_model = names
    if names and args.model_control_mode not in ("explicit", "on_demand"):
        notes.append(
            f"--load-model has an effect only with --model-control-mode=explicit or on_demand; "
            f"in {args.model_control_mode} mode every model of the repositories is loaded"
        )
    if args.model_min_copies < 0 or args.model_idle_unload_seconds < 0:
        raise UsageError(
            "--model-min-copies and --model-idle-unload-seconds must be 0 or more, not "
            f"{args.model_min_copies} and {args.model_idle_unload_seconds}"
        )
    if args.repository_poll_secs < 0:
        raise UsageError(
            f"--repository-poll-secs must be 0 or more, not {args.repository_poll_secs}"
        )
    if args.exit_timeout_secs < 0:
        args.exit_timeout_secs = 0  # Triton's max(0, value)


def _addresses(args: argparse.Namespace) -> None:
    """One gateway binds HTTP and gRPC: Triton's two addresses must agree to become --host."""
    given = [
        (flag, value)
        for flag, value in (
            ("--host", args.host),
            ("--http-address", args.http_address),
            ("--grpc-address", args.grpc_address),
        )
        if value is not None
    ]
    for flag, value in given[1:]:
        if value != given[0][1]:
            raise UsageError(
                f"{given[0][0]} {given[0][1]} and {flag} {value} differ: one gateway binds "
                "HTTP and gRPC on one address; give them the same address"
            )
    args.host = given[0][1] if given else DEFAULT_HOST
    if not args.allow_grpc:
        args.grpc_port = 0


def _log_level(args: argparse.Namespace) -> str:
    """Triton's severities (each on or off, plus a verbose level) as Conch's one threshold."""
    triton = (args.log_verbose, args.log_info, args.log_warning, args.log_error)
    if all(value is None for value in triton):
        return str(args.log_level or "INFO").upper()
    if args.log_level is not None:
        raise UsageError(
            "--log-level and Triton's --log-verbose/--log-info/--log-warning/--log-error set "
            "the same thing; give one of them"
        )
    enabled = [
        ("DEBUG", "--log-verbose", bool(args.log_verbose)),
        ("INFO", "--log-info", args.log_info is not False),
        ("WARNING", "--log-warning", args.log_warning is not False),
        ("ERROR", "--log-error", args.log_error is not False),
    ]
    lowest = next((i for i, (_, _, on) in enumerate(enabled) if on), None)
    if lowest is None:
        return "CRITICAL"
    for level, flag, on in enabled[lowest + 1 :]:
        if not on:
            raise UsageError(
                f"{flag}=false while {enabled[lowest][1]} is on: Conch's log level is a "
                f"threshold ({enabled[lowest][0]} includes {level}); turn off the lower "
                "severities too, or leave it on"
            )
    return enabled[lowest][0]


def _tls(args: argparse.Namespace) -> None:
    for proto in ("http", "grpc"):
        if getattr(args, f"{proto}_use_ssl_mutual"):
            setattr(args, f"{proto}_use_ssl", True)  # Triton: mutual implies TLS
        if not getattr(args, f"{proto}_use_ssl"):
            continue
        needed = ["server-cert", "server-key"]
        if getattr(args, f"{proto}_use_ssl_mutual"):
            needed.append("root-cert")
        for part in needed:
            _need_file(f"--{proto}-use-ssl", f"--{proto}-{part}", args)
    if args.with_envoy and (args.http_use_ssl or args.grpc_use_ssl):
        raise UsageError(
            "--http-use-ssl and --grpc-use-ssl put TLS on the gateways, which Envoy reaches in "
            "the clear: with --with-envoy, give Envoy the certificate instead "
            "(--envoy-server-cert, --envoy-server-key, --envoy-root-cert, --envoy-use-ssl-mutual)"
        )
    edge = (args.envoy_server_cert, args.envoy_server_key, args.envoy_root_cert)
    if any(edge) or args.envoy_use_ssl_mutual:
        if not args.with_envoy:
            raise UsageError(
                "--envoy-server-cert and the other --envoy-* TLS flags need --with-envoy"
            )
        needed = ["server-cert", "server-key"]
        if args.envoy_use_ssl_mutual:
            needed.append("root-cert")
        for part in needed:
            _need_file("TLS at the Envoy edge", f"--envoy-{part}", args)


def _need_file(what: str, flag: str, args: argparse.Namespace) -> None:
    path = getattr(args, flag[2:].replace("-", "_"))
    if not path:
        raise UsageError(f"{what} needs {flag} (a PEM file)")
    if not os.access(path, os.R_OK):
        raise UsageError(f"{flag} {path}: no readable file there")


def _check_restriction(flag: str, spec: str) -> None:
    """Triton's form, CATEGORY[,CATEGORY...]:HEADER=VALUE (the gateway checks the categories)."""
    categories, colon, setting = spec.partition(":")
    header, equals, value = setting.partition("=")
    if not (colon and equals and categories.strip() and header.strip() and value):
        raise UsageError(
            f"{flag} {spec!r}: expected CATEGORY[,CATEGORY...]:HEADER=VALUE "
            "(for example inference,model-repository:admin-key=secret)"
        )
