"""The accumulator sequence model as a Triton Python model: OUTPUT is the running sum of INPUT.

The sum is Triton's implicit state (``INPUT_STATE`` in, ``OUTPUT_STATE`` out, declared in the
config's ``sequence_batching.state``), so the model keeps nothing in memory and Conch can carry
a sequence on to another instance after a crash. It reads the sequence API of
``triton_python_backend_utils``: ``request.flags()`` tells a sequence's first step (the sum
restarts), ``request.correlation_id()`` names the sequence (returned as CORRID_SEEN, a string).
READY is 0 only for padding requests, which leave the state as it was. A request parameter
``delay_ms`` makes its step take that long (tests hold a step running with it).
"""

import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            delay_ms = json.loads(request.parameters() or "{}").get("delay_ms", 0)
            if delay_ms:
                time.sleep(float(delay_ms) / 1000)
            value = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            state = pb_utils.get_input_tensor_by_name(request, "INPUT_STATE").as_numpy()
            ready = pb_utils.get_input_tensor_by_name(request, "READY").as_numpy()
            if request.flags() & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START:
                state = np.zeros_like(state)
            total = (state + value).astype(np.int32)
            new_state = np.where(ready != 0, total, state).astype(np.int32)
            corrid = np.array([[str(request.correlation_id()).encode()]], dtype=object)
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("OUTPUT", total),
                        pb_utils.Tensor("OUTPUT_STATE", new_state),
                        pb_utils.Tensor("CORRID_SEEN", corrid),
                    ]
                )
            )
        return responses
