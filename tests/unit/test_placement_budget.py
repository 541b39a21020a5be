"""--model-memory-budget: sizes with units, fractions, and the errors that name the flag."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import psutil
import pytest

from shared.placement import budget
from shared.placement.budget import Budget, parse_budget, resolve_budget
from shared.wire.errors import ConchError, ErrorCode


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2GiB", 2 * 2**30),
        ("512MiB", 512 * 2**20),
        ("1.5GB", 1_500_000_000),
        ("0.1GB", 100_000_000),  # exact: decimal arithmetic, not binary floating point
        ("1500000000", 1_500_000_000),
        ("2gib", 2 * 2**30),
        ("2 GiB", 2 * 2**30),
        (" 64Mi ", 64 * 2**20),
        ("3G", 3_000_000_000),
        ("10k", 10_000),
        ("4096B", 4096),
        ("1024", 1024),
        ("1.5GiB", 3 * 2**29),
        ("1TiB", 2**40),
    ],
)
def test_sizes_are_bytes(text: str, expected: int) -> None:
    assert parse_budget(text) == Budget(bytes=expected)
    assert resolve_budget(text) == expected
    assert resolve_budget(text, gpu_total_bytes=10) == expected  # a size ignores the total


@pytest.mark.parametrize(
    ("text", "fraction"),
    [
        ("0.5", Decimal("0.5")),
        (".25", Decimal("0.25")),
        ("1.0", Decimal("1")),
        ("50%", Decimal("0.5")),
        ("100%", Decimal("1")),
        ("12.5%", Decimal("0.125")),
    ],
)
def test_fractions(text: str, fraction: Decimal) -> None:
    assert parse_budget(text) == Budget(fraction=fraction)


def test_a_fraction_resolves_against_the_gpu_when_given() -> None:
    assert resolve_budget("0.5", gpu_total_bytes=80 * 10**9) == 40 * 10**9
    assert resolve_budget("25%", gpu_total_bytes=1001) == 250  # floored, never above


def test_a_fraction_resolves_against_the_machine_otherwise() -> None:
    total = budget.machine_memory_bytes()
    assert 0 < total <= psutil.virtual_memory().total
    assert resolve_budget("0.5") == total // 2


def test_resolve_refuses_a_total_of_nothing() -> None:
    with pytest.raises(ConchError) as raised:
        Budget(fraction=Decimal("0.5")).resolve(0)
    assert raised.value.code is ErrorCode.INVALID_ARG
    assert "--model-memory-budget" in raised.value.message


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "is not a size"),
        ("lots", "is not a size"),
        ("2 GiBs", "unknown unit 'GiBs'"),
        ("2XB", "unknown unit 'XB'"),
        ("-1GiB", "is not a size"),
        ("1e9", "is not a size"),
        ("0", "is not positive"),
        ("0.0", "is not positive"),
        ("0%", "is not positive"),
        ("150%", "more than 100%"),
        ("1.5", "fraction above 1"),
        ("1", "under 1024 bytes"),
        ("512", "under 1024 bytes"),
        ("0.1B", "less than one byte"),
        ("5 %%", "is not a size"),
    ],
)
def test_errors_name_the_flag_the_value_and_what_is_expected(text: str, says: str) -> None:
    with pytest.raises(ConchError) as raised:
        parse_budget(text)
    error = raised.value
    assert error.code is ErrorCode.INVALID_ARG
    assert error.message.startswith(f"--model-memory-budget: {text!r} ")
    assert says in error.message
    assert "expected bytes with a unit (2GiB" in error.message
    assert "fraction of the memory (0.5, 50%)" in error.message


def test_a_container_limit_below_the_host_memory_wins(tmp_path: Path) -> None:
    limit = tmp_path / "memory.max"
    limit.write_text("1073741824\n")
    assert budget.cgroup_limit_bytes((limit,)) == 2**30
    assert budget.machine_memory_bytes((limit,)) == min(2**30, psutil.virtual_memory().total)


@pytest.mark.parametrize("text", ["max\n", "9223372036854771712\n", "garbage", "0"])
def test_no_container_limit_means_the_host_memory(tmp_path: Path, text: str) -> None:
    limit = tmp_path / "memory.max"
    limit.write_text(text)
    assert budget.cgroup_limit_bytes((limit,)) is None
    assert budget.machine_memory_bytes((limit,)) == psutil.virtual_memory().total


def test_the_first_limit_file_that_exists_is_read(tmp_path: Path) -> None:
    v1 = tmp_path / "limit_in_bytes"
    v1.write_text("5000000\n")
    assert budget.cgroup_limit_bytes((tmp_path / "absent", v1)) == 5_000_000
    assert budget.cgroup_limit_bytes((tmp_path / "absent",)) is None


def test_budgets_print_for_logs() -> None:
    assert str(parse_budget("2KiB")) == "2048 bytes"
    assert str(parse_budget("50%")) == "0.5 of memory"
