"""A Python model that records every execution, for the chaos suite (``tests/chaos/``).

Each request carries a unique INT64 ``ID``; the model answers ``OUTPUT0 = 3 * ID + 1`` (so a
client can tell its own answer from someone else's) and ``PID`` (the model process).

Record: with ``CONCH_CHAOS_RECORD_DIR`` set, each model process appends to its own file
``exec-<worker label>-<pid>.log`` in that directory one line when a batch starts (``S id,id,..``)
and one when its results are ready to return (``D id,id,..``), written straight to the file (no
buffer) so that a process killed a moment later leaves its lines behind. A ``D`` line is an
execution whose answer could leave the model; an ``S`` line without its ``D`` is a batch killed
mid-execution. ``CONCH_CHAOS_LABEL`` names the worker (default: ``worker``).

Hold: while the file ``hold-<worker label>`` exists in the record directory, a batch that starts
writes ``holding-<label>-<pid>`` and waits (at most 60 s) before computing: the suite uses it to
SIGKILL or SIGSTOP a worker at a moment it knows to be mid-batch. ``CONCH_CHAOS_EXEC_MS`` adds a
fixed time per batch (default 2 ms), so that work is in flight when a fault strikes. A held
batch whose client cancelled a request (``request.is_cancelled()``) stops holding and logs
``chaos_recorder cancelled <id>,...`` (its own record that it saw the cancellation).
"""

import os
import time
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

HOLD_LIMIT_S = 60.0


class TritonPythonModel:
    def initialize(self, args):
        directory = os.environ.get("CONCH_CHAOS_RECORD_DIR")
        self.label = os.environ.get("CONCH_CHAOS_LABEL", "worker")
        self.exec_s = float(os.environ.get("CONCH_CHAOS_EXEC_MS", "2")) / 1000
        self.directory = Path(directory) if directory else None
        self.fd = None
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
            path = self.directory / f"exec-{self.label}-{os.getpid()}.log"
            self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def _record(self, kind, ids):
        if self.fd is not None:
            os.write(self.fd, f"{kind} {','.join(str(i) for i in ids)}\n".encode())

    def _hold(self, requests, ids):
        if self.directory is None:
            return
        hold = self.directory / f"hold-{self.label}"
        if not hold.exists():
            return
        (self.directory / f"holding-{self.label}-{os.getpid()}").touch()
        deadline = time.monotonic() + HOLD_LIMIT_S
        while hold.exists() and time.monotonic() < deadline:
            if any(request.is_cancelled() for request in requests):
                pb_utils.Logger.log_info(
                    f"chaos_recorder cancelled {','.join(str(i) for i in ids)}"
                )
                return
            time.sleep(0.005)

    def execute(self, requests):
        ids: list[int] = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "ID").as_numpy()
            ids.extend(int(v) for v in data.reshape(-1))
        self._record("S", ids)
        self._hold(requests, ids)
        if self.exec_s > 0:
            time.sleep(self.exec_s)
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "ID").as_numpy()
            pid = np.full(data.shape, os.getpid(), dtype=np.int64)
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("OUTPUT0", data * 3 + 1),
                        pb_utils.Tensor("PID", pid),
                    ]
                )
            )
        self._record("D", ids)
        return responses

    def finalize(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
