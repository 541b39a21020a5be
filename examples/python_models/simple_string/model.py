"""Triton's ``simple_string`` example model as a Python model.

INPUT0 and INPUT1 are BYTES tensors whose elements are the decimal text of integers; OUTPUT0 is
their element-wise sum and OUTPUT1 their difference, as decimal text again. Triton's client
examples (``simple_*_string_infer_client.py``, the BYTES shared-memory and explicit-contents
examples) use it.

It also reports custom metrics (``pb_utils.MetricFamily``: a counter of requests and a histogram
of elements per request, in the worker's /metrics) and logs each batch at verbose level
(``pb_utils.Logger``, shown when the fleet's log settings ask for verbose lines).
"""

import numpy as np
import triton_python_backend_utils as pb_utils


def as_integers(tensor):
    """The tensor's elements (bytes or str holding decimal text) as int64."""
    flat = [int(x.decode("utf-8") if isinstance(x, bytes) else x) for x in tensor.flat]
    return np.array(flat, dtype=np.int64).reshape(tensor.shape)


def as_text(values):
    """Integers back to BYTES elements of decimal text."""
    flat = np.array([str(int(v)).encode("utf-8") for v in values.flat], dtype=np.object_)
    return flat.reshape(values.shape)


class TritonPythonModel:
    def initialize(self, args):
        labels = {"model": args["model_name"], "version": args["model_version"]}
        self.requests = pb_utils.MetricFamily(
            name="simple_string_requests",
            description="Requests simple_string has answered",
            kind=pb_utils.MetricFamily.COUNTER,
        ).Metric(labels=labels)
        self.elements = pb_utils.MetricFamily(
            name="simple_string_elements",
            description="Elements per simple_string request",
            kind=pb_utils.MetricFamily.HISTOGRAM,
        ).Metric(labels=labels, buckets=[1, 16, 64, 256])

    def execute(self, requests):
        pb_utils.Logger.log_verbose(f"simple_string: a batch of {len(requests)} requests")
        responses = []
        for request in requests:
            a = as_integers(pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy())
            b = as_integers(pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy())
            self.requests.increment(1)
            self.elements.observe(a.size)
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("OUTPUT0", as_text(a + b)),
                        pb_utils.Tensor("OUTPUT1", as_text(a - b)),
                    ]
                )
            )
        return responses
