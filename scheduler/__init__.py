"""The scheduler: queue policies and dynamic batching between request and batch streams."""
