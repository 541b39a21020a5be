"""A closed-loop client for the cross-host tests, run in the client's namespace.

``python -m tests.hosts.client URL MODEL SECONDS CONCURRENCY OUT.json``: each request carries a
unique value and id; OUT lists every request's id, value, status and the value answered.
"""

from __future__ import annotations

import itertools
import json
import sys
import threading
import time

import numpy as np
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException


def main(url: str, model: str, seconds: float, concurrency: int, out: str) -> None:
    counter = itertools.count()
    results: list[dict[str, object]] = []
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds

    def loop() -> None:
        client = httpclient.InferenceServerClient(url.removeprefix("http://"), network_timeout=60)
        while time.monotonic() < stop_at:
            value = next(counter)
            tensor = httpclient.InferInput("INPUT0", [1, 1], "INT32")
            tensor.set_data_from_numpy(np.array([[value]], dtype=np.int32))
            row: dict[str, object] = {"id": f"r{value}", "value": value}
            try:
                answer = client.infer(model, [tensor], request_id=f"r{value}")
                row["status"] = 200
                row["answer"] = int(answer.as_numpy("OUTPUT0")[0][0])
            except InferenceServerException as exc:
                row["status"] = exc.status() or "client"
                row["error"] = str(exc)[:200]
            with lock:
                results.append(row)
        client.close()

    threads = [threading.Thread(target=loop) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    with open(out, "w") as sink:
        json.dump(results, sink)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
