"""TensorRT worker backend: serialized engines (model.plan)."""
