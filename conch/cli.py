"""The ``conch`` command: ``conch up`` runs the whole mesh; the other verbs run one service."""

from __future__ import annotations

import os
import sys

# Verbs that run another module of the project in place of this process.
_SERVICE_MODULES = {
    "gateway": "gateway",
    "scheduler": "scheduler",
    "worker": "workers",
    "controlplane": "controlplane",
    "bench": "bench",
}


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in _SERVICE_MODULES:
        module = _SERVICE_MODULES[argv[0]]
        os.execv(sys.executable, [sys.executable, "-m", module, *argv[1:]])
    if argv and argv[0] == "admin":
        from conch import admin

        raise SystemExit(admin.main(argv[1:]))
    from conch.arguments import parser as conch_parser

    parser = conch_parser()
    args = parser.parse_args(argv)
    if args.command == "up":
        from conch.up import up
        from conch.up_args import UsageError, resolve

        try:
            notes = resolve(args)
        except UsageError as exc:
            print(f"conch up: {exc}", file=sys.stderr, flush=True)
            raise SystemExit(2) from None
        for note in notes:
            print(f"conch up: note: {note}", file=sys.stderr, flush=True)

        raise SystemExit(up(args))
    parser.print_help()
    raise SystemExit(2)


if __name__ == "__main__":
    main()
