"""One queue per model version: Triton's queue policies, the pure batcher, fenced dispatch."""
