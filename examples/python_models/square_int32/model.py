"""Triton's decoupled ``square_int32`` example (python_backend ``examples/decoupled``).

One INT32 input ``IN`` = n: the model answers with n responses, each ``OUT = [n]``, sent from a
thread of its own after ``execute`` returned, then closes the stream with the final flag; n = 0
gives no response at all, only the (empty) final. ``finalize`` waits for the threads still
sending. A thread that sees its request cancelled stops early.
"""

import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.inflight = 0
        self.lock = threading.Lock()

    def execute(self, requests):
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy().reshape(-1)
            if value.size != 1 or value[0] < 0:
                request.get_response_sender().send(
                    pb_utils.InferenceResponse(
                        error=pb_utils.TritonError("IN must hold one non-negative integer")
                    ),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )
                continue
            with self.lock:
                self.inflight += 1
            threading.Thread(
                target=self.respond,
                args=(request.get_response_sender(), int(value[0])),
                daemon=True,
            ).start()
        return None

    def respond(self, sender, count):
        try:
            for _ in range(count):
                if sender.is_cancelled():
                    break
                out = pb_utils.Tensor("OUT", np.array([count], dtype=np.int32))
                sender.send(pb_utils.InferenceResponse(output_tensors=[out]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        finally:
            with self.lock:
                self.inflight -= 1

    def finalize(self):
        deadline = time.monotonic() + 10
        while self.inflight > 0 and time.monotonic() < deadline:
            time.sleep(0.05)
