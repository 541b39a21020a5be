"""Triton-compatible Python backend: model.py instances in their own processes."""
