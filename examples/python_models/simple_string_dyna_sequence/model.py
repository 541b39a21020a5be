"""Triton's ``simple_string_dyna_sequence`` (its qa "dyna_sequence" backend) as a Python model.

An accumulator per sequence, kept in this instance's memory and keyed by the sequence's string
id (``request.correlation_id()``): START sets it to the sum of INPUT, later steps add INPUT, and
END also adds the CORRID control input read as an integer (the client examples use ids like
"1002"). When READY, OUTPUT carries the accumulator in every element. NVIDIA's client examples
run with ``-d`` expect exactly this. The state lives in the model process, as in Triton's
backend: a sequence on an instance that dies starts over (compare ``sequence_accumulator_py``,
whose implicit state Conch keeps in Redis).
"""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.accumulators = {}

    def execute(self, requests):
        responses = []
        for request in requests:

            def control(name, request=request):
                return int(pb_utils.get_input_tensor_by_name(request, name).as_numpy().flat[0])

            values = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            key = request.correlation_id()
            accumulator = self.accumulators.get(key, 0)
            if control("READY"):
                if control("START"):
                    accumulator = int(values.sum())
                else:
                    accumulator += int(values.sum())
                if control("END"):
                    corrid = pb_utils.get_input_tensor_by_name(request, "CORRID").as_numpy()
                    accumulator += int(corrid.flat[0].decode())
                    self.accumulators.pop(key, None)
                else:
                    self.accumulators[key] = accumulator
            output = np.full(values.shape, accumulator, dtype=np.int32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", output)]))
        return responses
