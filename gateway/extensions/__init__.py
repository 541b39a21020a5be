"""Triton's protocol extensions around an inference: shared memory, statistics, trace, cache."""
