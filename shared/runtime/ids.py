"""Unique ids without a system call per id: a random per-process prefix and a counter.

``uuid4()`` reads the kernel's random source on every call, which is a measurable share of a
request's cost at thousands of requests per second; uniqueness only needs the prefix to be
random once per process.
"""

from __future__ import annotations

import itertools
import os


class IdSource:
    def __init__(self) -> None:
        self.renew()

    def renew(self) -> None:
        """A new prefix: a forked child must not repeat its parent's ids (``os.register_at_fork``
        calls this in the child, so ``next`` needs no ``getpid`` per id)."""
        self._prefix = os.urandom(8).hex()
        self._counter = itertools.count(1)

    def next(self) -> str:
        return f"{self._prefix}{next(self._counter):x}"


_source = IdSource()
os.register_at_fork(after_in_child=_source.renew)


def new_id() -> str:
    return _source.next()
