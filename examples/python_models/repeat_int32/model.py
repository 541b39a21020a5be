"""Triton's ``repeat_int32`` example as a decoupled Python model: one request, many responses.

For each element ``IN[i]`` it waits ``DELAY[i]`` milliseconds and sends one response with
``OUT = [IN[i]]`` and ``IDX = [i]``; after the last one it waits ``WAIT[0]`` milliseconds and
closes the response stream with the final flag. Triton's ``simple_grpc_custom_repeat.py`` streams
it over gRPC ``ModelStreamInfer``.

A cancelled request (the client disconnected or cancelled) stops before its next response; the
model logs ``repeat_int32 cancelled <request id> after <n> responses`` (its own record of it).
"""

import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy().reshape(-1)
            delay = pb_utils.get_input_tensor_by_name(request, "DELAY")
            delays = delay.as_numpy().reshape(-1) if delay is not None else np.zeros(len(values))
            wait = pb_utils.get_input_tensor_by_name(request, "WAIT")
            wait_ms = int(wait.as_numpy().reshape(-1)[0]) if wait is not None else 0
            for index, value in enumerate(values):
                time.sleep(int(delays[index]) / 1000 if index < len(delays) else 0)
                if sender.is_cancelled():
                    pb_utils.Logger.log_info(
                        f"repeat_int32 cancelled {request.request_id()} after {index} responses"
                    )
                    break
                sender.send(
                    pb_utils.InferenceResponse(
                        output_tensors=[
                            pb_utils.Tensor("OUT", np.array([value], dtype=np.int32)),
                            pb_utils.Tensor("IDX", np.array([index], dtype=np.uint32)),
                        ]
                    )
                )
            else:
                time.sleep(wait_ms / 1000)
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
