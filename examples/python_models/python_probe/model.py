"""A Python model for testing the mesh's failure handling; it doubles INT64 input otherwise.

Behaviour by input value (any element of INPUT0):
  -1  raise an exception in execute        -> that request fails, the others in the batch do not
  -2  return an error InferenceResponse    -> that request gets INVALID_ARG
  -9  os._exit(17): kill the model process -> the batch fails, the instance restarts

Every response carries PID (the model process id), so clients can see which instance ran it.
A request parameter ``rendezvous`` (a directory) makes execute wait until ``parties`` (default 2)
executions are inside execute at the same time: proof that instances run concurrently; it
gives up after ``rendezvous_timeout_s`` (default 20) and answers with a negative PID.
A request parameter ``probe_sleep_ms`` makes execute take that long (a request in flight to act
on), and ``probe_add`` (an integer, as a number or a string: a forwarded header is a string) is
added to OUTPUT0 (proof that a parameter reached the model).
If CONCH_PROBE_FINALIZE_DIR is set, finalize() writes a file there (proof finalize ran).
"""

import json
import os
import time
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

RENDEZVOUS_TIMEOUT_S = 20.0


def rendezvous(directory, parties, timeout_s=RENDEZVOUS_TIMEOUT_S):
    """Announce this execution and wait for the others; True when all arrived in time."""
    Path(directory, f"{os.getpid()}-{time.monotonic_ns()}").touch()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if len(os.listdir(directory)) >= parties:
            return True
        time.sleep(0.005)
    return False


class TritonPythonModel:
    def initialize(self, args):
        self.instance_name = args["model_instance_name"]

    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            if (data == -9).any():
                os._exit(17)
            if (data == -1).any():
                raise ValueError("INPUT0 holds -1, which this model rejects by raising")
            if (data == -2).any():
                error = pb_utils.TritonError("INPUT0 holds -2", pb_utils.TritonError.INVALID_ARG)
                responses.append(pb_utils.InferenceResponse(output_tensors=[], error=error))
                continue
            parameters = json.loads(request.parameters())
            met = True
            if "rendezvous" in parameters:
                met = rendezvous(
                    parameters["rendezvous"],
                    int(parameters.get("parties", 2)),
                    float(parameters.get("rendezvous_timeout_s", RENDEZVOUS_TIMEOUT_S)),
                )
            time.sleep(int(parameters.get("probe_sleep_ms", 0)) / 1000)
            pid = np.full(data.shape, os.getpid() if met else -os.getpid(), dtype=np.int64)
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("OUTPUT0", data * 2 + int(parameters.get("probe_add", 0))),
                        pb_utils.Tensor("PID", pid),
                    ]
                )
            )
        return responses

    def finalize(self):
        directory = os.environ.get("CONCH_PROBE_FINALIZE_DIR")
        if directory:
            Path(directory, f"finalized-{self.instance_name}-{os.getpid()}").touch()
