"""The OpenVINO backend (``backend: "openvino"``), on CPU."""
