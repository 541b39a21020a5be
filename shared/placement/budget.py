"""``--model-memory-budget``: how many bytes of loaded models a worker may hold.

A budget is written either as bytes (``2GiB``, ``512MiB``, ``1.5GB``, ``1500000000``) or as a
share of the memory the worker's models live in (``0.5``, ``50%``): the machine's memory for a
CPU worker, the GPU's for a GPU worker. A share is what a fleet of unlike hosts wants (one
setting, each worker its own figure); bytes are what a host shared with other work wants.

Parsing and resolving are separate (:func:`parse_budget`, :meth:`Budget.resolve`) so that a
setting is checked when the worker starts, before anything reads the hardware, and resolved
against whichever total applies. Sizes are computed with :class:`~decimal.Decimal` so that
``0.1GB`` is exactly 100,000,000 bytes, not one byte short through binary floating point.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path

import psutil

from shared.wire.errors import ConchError, ErrorCode

FLAG = "--model-memory-budget"
EXPECTED = (
    "expected bytes with a unit (2GiB, 512MiB, 1.5GB, 1500000000) "
    "or a fraction of the memory (0.5, 50%)"
)

# Binary units as IEC writes them (KiB) and as Kubernetes does (Ki); decimal units (KB, K).
# Matched case-insensitively: "2gib" and "2GiB" mean the same; no one means bits here.
_UNITS = {
    "b": 1,
    "kib": 2**10, "ki": 2**10, "mib": 2**20, "mi": 2**20,
    "gib": 2**30, "gi": 2**30, "tib": 2**40, "ti": 2**40,
    "kb": 10**3, "k": 10**3, "mb": 10**6, "m": 10**6,
    "gb": 10**9, "g": 10**9, "tb": 10**12, "t": 10**12,
}  # fmt: skip
_SIZE = re.compile(r"^\s*(?P<number>[0-9]*\.?[0-9]+)\s*(?P<unit>[a-zA-Z]*|%)\s*$")
# A unitless integer below this is refused rather than read as bytes: "1" is far more likely a
# fraction meant as "all of it" than a one-byte budget that no model could ever fit.
MIN_UNITLESS_BYTES = 1024

# cgroup v2 and v1 memory limits: in a container, psutil reports the host's memory, not the
# container's limit, and a budget of "0.5" must be half of what the worker may really use.
CGROUP_LIMIT_FILES = (
    Path("/sys/fs/cgroup/memory.max"),
    Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
)


@dataclass(frozen=True)
class Budget:
    """A parsed budget: exactly one of ``bytes`` (absolute) and ``fraction`` (of a total)."""

    bytes: int | None = None
    fraction: Decimal | None = None

    def resolve(self, total_bytes: int) -> int:
        """The budget in bytes, given the total a fraction is of (the machine's or the GPU's).

        Absolute budgets ignore the total: a budget larger than the memory is the operator's
        call (memory may be overcommitted, or the total misreported), not an error.
        """
        if self.bytes is not None:
            return self.bytes
        if total_bytes <= 0:
            raise ConchError(
                ErrorCode.INVALID_ARG,
                f"{FLAG}: cannot take a fraction of {total_bytes} bytes of memory; "
                "expected a positive total (give the budget in bytes instead)",
            )
        assert self.fraction is not None
        return int(Decimal(total_bytes) * self.fraction)

    def __str__(self) -> str:
        return f"{self.bytes} bytes" if self.bytes is not None else f"{self.fraction} of memory"


def _invalid(text: str, why: str) -> ConchError:
    return ConchError(ErrorCode.INVALID_ARG, f"{FLAG}: {text!r} {why}; {EXPECTED}")


def parse_budget(text: str) -> Budget:
    """Read one ``--model-memory-budget`` value; ConchError(INVALID_ARG) naming what is wrong.

    A number with a decimal point and no unit (``0.5``) or a percentage is a fraction, which
    must lie in (0, 1]; an integer with no unit is bytes; a unit makes it bytes.
    """
    match = _SIZE.match(text)
    if match is None:
        raise _invalid(text, "is not a size")
    number_text, unit = match.group("number"), match.group("unit").lower()
    try:
        number = Decimal(number_text)
    except InvalidOperation:  # pragma: no cover - the pattern admits only decimal numbers
        raise _invalid(text, "is not a number") from None
    if number <= 0:
        raise _invalid(text, "is not positive: a budget of nothing could hold no model")
    if unit == "%":
        if number > 100:
            raise _invalid(text, "is more than 100% of the memory")
        return Budget(fraction=number / 100)
    if unit == "":
        if "." in number_text:
            if number > 1:
                raise _invalid(text, "is a fraction above 1 (a size needs a unit or an integer)")
            return Budget(fraction=number)
        if number < MIN_UNITLESS_BYTES:
            raise _invalid(
                text, f"is under {MIN_UNITLESS_BYTES} bytes (for all of the memory write 1.0)"
            )
        return Budget(bytes=int(number))
    if unit not in _UNITS:
        raise _invalid(text, f"has an unknown unit {match.group('unit')!r}")
    size = int(number * _UNITS[unit])
    if size <= 0:
        raise _invalid(text, "is less than one byte")
    return Budget(bytes=size)


def cgroup_limit_bytes(files: tuple[Path, ...] = CGROUP_LIMIT_FILES) -> int | None:
    """The container's memory limit, or None where there is none (``max``, absent, huge).

    cgroup v1 writes "no limit" as a huge number (page-rounded 2**63-1), so any value of 2**60
    or more counts as none.
    """
    for path in files:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text == "max" or not text.isdigit():
            return None
        limit = int(text)
        return limit if 0 < limit < 2**60 else None
    return None


def machine_memory_bytes(files: tuple[Path, ...] = CGROUP_LIMIT_FILES) -> int:
    """The memory a CPU worker's models share: the host's, or its container's limit if lower."""
    total = int(psutil.virtual_memory().total)
    limit = cgroup_limit_bytes(files)
    return min(total, limit) if limit is not None else total


def resolve_budget(text: str, gpu_total_bytes: int | None = None) -> int:
    """A ``--model-memory-budget`` value in bytes for this worker.

    ``gpu_total_bytes``: the total memory of the GPU the worker's models live on (the caller
    reads it, e.g. from NVML); None: a CPU worker, whose fraction is of the machine's memory.
    """
    budget = parse_budget(text)
    if budget.bytes is not None:
        return budget.bytes
    total = gpu_total_bytes if gpu_total_bytes is not None else machine_memory_bytes()
    return budget.resolve(total)
