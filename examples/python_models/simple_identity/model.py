"""Triton's ``simple_identity`` example model: OUTPUT0 is INPUT0, BYTES elements unchanged.

Elements are opaque bytes (embedded NUL characters, binary blobs): what goes in comes back.
"""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                output_tensors=[
                    pb_utils.Tensor(
                        "OUTPUT0", pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
                    )
                ]
            )
            for request in requests
        ]
