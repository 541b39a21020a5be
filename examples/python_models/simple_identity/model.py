"""Triton's ``simple_identity`` example model: OUTPUT0 is INPUT0, BYTES elements unchanged.

Elements are opaque bytes (embedded NUL characters, binary blobs): what goes in comes back. Its
config.pbtxt names only the backend and the batch size: ``auto_complete_config`` declares the
input and output, as Triton's Python backend lets a model do.
"""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        auto_complete_model_config.add_input(
            {"name": "INPUT0", "data_type": "TYPE_STRING", "dims": [-1]}
        )
        auto_complete_model_config.add_output(
            {"name": "OUTPUT0", "data_type": "TYPE_STRING", "dims": [-1]}
        )
        auto_complete_model_config.set_max_batch_size(8)
        return auto_complete_model_config

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
