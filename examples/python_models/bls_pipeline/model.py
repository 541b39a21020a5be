"""A Python model that calls two other models of the mesh through BLS (Triton's
business-logic scripting): ``add_sub`` with ``exec()``, then the ``add_sub_chain`` ensemble with
``await async_exec()``.

    OUTPUT0 = INPUT0 + INPUT1                      (add_sub's OUTPUT0)
    OUTPUT1 = add_sub_chain(sum, diff).OUTPUT0     (= 2 * sum + 2 * diff = 4 * INPUT0)
    READY   = [is_model_ready("add_sub"), is_model_ready("no_such_model")]

Request parameters for the tests: ``bls_target`` names another model for the first call (an
unknown one comes back as the response's error), ``bls_bad_shape`` sends add_sub a wrong shape
(its error comes back), ``bls_decoupled`` makes the first call decoupled (its one response).
Calls carry the calling request's priority, tenant and remaining deadline.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        return [await self._one(request) for request in requests]

    async def _one(self, request):
        a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
        b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
        parameters = json.loads(request.parameters())
        if parameters.get("bls_bad_shape"):
            a, b = a.reshape(-1, 8), b.reshape(-1, 8)
        first = pb_utils.InferenceRequest(
            model_name=parameters.get("bls_target", "add_sub"),
            requested_output_names=["OUTPUT0", "OUTPUT1"],
            inputs=[pb_utils.Tensor("INPUT0", a), pb_utils.Tensor("INPUT1", b)],
        )
        if parameters.get("bls_decoupled"):
            answer = next(iter(first.exec(decoupled=True)))
        else:
            answer = first.exec()
        if answer.has_error():
            return pb_utils.InferenceResponse(error=answer.error())
        total = pb_utils.get_output_tensor_by_name(answer, "OUTPUT0").as_numpy()
        diff = pb_utils.get_output_tensor_by_name(answer, "OUTPUT1").as_numpy()
        second = pb_utils.InferenceRequest(
            model_name="add_sub_chain",
            requested_output_names=["OUTPUT0"],
            inputs=[pb_utils.Tensor("INPUT0", total), pb_utils.Tensor("INPUT1", diff)],
        )
        chained = await second.async_exec()
        if chained.has_error():
            return pb_utils.InferenceResponse(error=chained.error())
        ready = np.array(
            [
                [
                    int(pb_utils.is_model_ready("add_sub")),
                    int(pb_utils.is_model_ready("no_such_model")),
                ]
            ]
            * total.shape[0],
            dtype=np.int32,
        )
        return pb_utils.InferenceResponse(
            output_tensors=[
                pb_utils.Tensor("OUTPUT0", total),
                pb_utils.Tensor(
                    "OUTPUT1", pb_utils.get_output_tensor_by_name(chained, "OUTPUT0").as_numpy()
                ),
                pb_utils.Tensor("READY", ready),
            ]
        )
