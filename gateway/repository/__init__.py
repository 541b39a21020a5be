"""Triton's model repository extension, fleet-wide: index, load and unload."""
