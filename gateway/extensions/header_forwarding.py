"""Triton's ``--http-header-forward-pattern`` / ``--grpc-header-forward-pattern``: request
headers whose name matches a regular expression reach the model as string request parameters
(a Python model reads them with ``request.parameters()``).

As in Triton, the pattern matches anywhere in the name and is case-insensitive unless it starts
with ``(?-i)``. Headers never override parameters the request itself carries.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from shared.wire.errors import invalid

_CASE_SENSITIVE = "(?-i)"


def compile_pattern(pattern: str) -> re.Pattern[str] | None:
    if not pattern:
        return None
    flags: re.RegexFlag | int = re.IGNORECASE
    if pattern.startswith(_CASE_SENSITIVE):
        pattern, flags = pattern[len(_CASE_SENSITIVE) :], 0
    try:
        return re.compile(pattern, flags)
    except re.error as exc:
        raise invalid(
            f"header forward pattern '{pattern}' is not a regular expression: {exc}"
        ) from None


def forward(
    pattern: re.Pattern[str] | None,
    headers: Iterable[tuple[str, str]],
    parameters: dict[str, Any],
) -> None:
    """Add the matching headers to the request's parameters (in place)."""
    if pattern is None:
        return
    for name, value in headers:
        if name not in parameters and pattern.search(name):
            parameters[name] = value
