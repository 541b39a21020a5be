"""A decoupled Python model that streams another decoupled model's responses through BLS:
``exec(decoupled=True)`` on ``repeat_int32`` (or ``async_exec(decoupled=True)`` when the
request's parameter ``bls_async`` is true), each response it gets sent on to its own client.

    IN, DELAY  -> repeat_int32(IN, DELAY, WAIT=0): one response OUT = [IN[i]], IDX = [i] each

The called model's empty last response (its final flag sent alone) is not passed on; an error
response ends this request with that error. Parameter ``bls_plain`` makes a plain ``exec()``
call instead, which Triton (and Conch) refuse for a decoupled model. Cancelling this model's
request cancels its BLS call: ``repeat_int32`` logs that it saw ``is_cancelled()``.
"""

import asyncio
import json
import threading

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            # Read the request now: a thread carries on after execute returned.
            call = pb_utils.InferenceRequest(
                model_name="repeat_int32",
                requested_output_names=["OUT", "IDX"],
                inputs=[
                    pb_utils.get_input_tensor_by_name(request, "IN"),
                    pb_utils.get_input_tensor_by_name(request, "DELAY"),
                    pb_utils.Tensor("WAIT", np.array([0], dtype=np.uint32)),
                ],
            )
            parameters = json.loads(request.parameters())
            sender = request.get_response_sender()
            threading.Thread(target=self._relay, args=(call, parameters, sender)).start()
        return None

    def _relay(self, call, parameters, sender):
        if parameters.get("bls_plain"):
            answer = call.exec()
            error = answer.error() if answer.has_error() else pb_utils.TritonError("no error")
            sender.send(
                pb_utils.InferenceResponse(error=error),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
            )
            return
        if parameters.get("bls_async"):
            responses = asyncio.run(self._collect(call))
        else:
            responses = call.exec(decoupled=True)
        for response in responses:
            if response.has_error():
                sender.send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                return
            if not response.output_tensors():
                continue  # the final flag, sent alone
            sender.send(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.get_output_tensor_by_name(response, "OUT"),
                        pb_utils.get_output_tensor_by_name(response, "IDX"),
                    ]
                )
            )
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    async def _collect(self, call):
        return [response async for response in await call.async_exec(decoupled=True)]
