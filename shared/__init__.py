"""Contracts every Conch service imports: configuration, tensors, envelopes, Redis names, errors."""
