"""Commit subjects are one line of at most 72 characters; the body says why.

Checked on every commit after ``SINCE`` (the last commit of the earlier habit, when subjects ran
to paragraphs) where the checkout has its history; a shallow or exported copy skips.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SINCE = "3d5f194"
LIMIT = 72
# Three subjects of 73 and 74 characters were written on branches made before this check
# existed; rewriting them would mean rewriting merged history.
LANDED_BEFORE_THE_CHECK = {"0257779", "92bbeeb", "898f713"}
# Merged from a helper branch one character over; kept rather than rewriting merged history.
MERGED_OVER_BY_ONE = {"e44723c"}


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)


def long_subjects(lines: list[str], limit: int = LIMIT) -> list[str]:
    """``<hash> <subject>`` lines whose subject is longer than ``limit``."""
    found = []
    for line in lines:
        commit, _, subject = line.partition(" ")
        if len(subject) > limit and commit[:7] not in LANDED_BEFORE_THE_CHECK | MERGED_OVER_BY_ONE:
            found.append(f"{commit[:7]} ({len(subject)} characters): {subject[:80]}...")
    return found


def test_a_long_subject_is_found() -> None:
    assert long_subjects(["abcdef1 " + "x" * 72, "abcdef2 " + "y" * 73]) == [
        f"abcdef2 (73 characters): {'y' * 73}..."
    ]


def test_commit_subjects_fit_one_line() -> None:
    if shutil.which("git") is None or _git("cat-file", "-e", f"{SINCE}^{{commit}}").returncode:
        pytest.skip(f"no history back to {SINCE} in this checkout")
    log = _git("log", "--format=%h %s", f"{SINCE}..HEAD")
    assert log.returncode == 0, log.stderr
    assert long_subjects(log.stdout.splitlines()) == [], "subjects over 72 characters"
