"""``bench.idle_threads`` finds the threads that woke, per process of a tree."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

from bench import idle_threads


def test_a_ticking_thread_is_found_among_the_trees_threads() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(0.02):  # about 50 wake-ups a second
            pass

    ticker = threading.Thread(target=tick, name="ticker")
    ticker.start()
    tid = ticker.native_id
    try:
        assert child.pid in idle_threads.tree(os.getpid())
        text = idle_threads.report(os.getpid(), 0.5)
    finally:
        stop.set()
        ticker.join()
        child.kill()
        child.wait()
    ticker_line = next(line for line in text.splitlines() if line.split()[0] == str(tid))
    assert float(ticker_line.split()[2].removesuffix("/s")) > 5  # it woke, on its own line
    assert text.splitlines()[-1].startswith("total ")
