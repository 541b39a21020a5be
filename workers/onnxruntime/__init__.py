"""The ONNX Runtime backend (platform ``onnxruntime_onnx``)."""
