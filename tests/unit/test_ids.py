"""Request ids: unique within a process, and a forked child never repeats its parent's."""

from __future__ import annotations

import os

from shared.runtime.ids import new_id


def test_ids_are_unique_and_a_forked_child_starts_a_prefix_of_its_own() -> None:
    ids = {new_id() for _ in range(1000)}
    assert len(ids) == 1000
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids, to the parent
        os.close(read)
        os.write(write, " ".join(new_id() for _ in range(3)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = pipe.read().split()
    os.waitpid(pid, 0)
    parent = [new_id() for _ in range(3)]
    assert len(child) == 3 and not set(child) & set(parent) and not set(child) & ids
    assert {i[:16] for i in child} != {i[:16] for i in parent}
