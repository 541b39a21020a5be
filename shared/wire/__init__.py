"""The wire contract: stream envelopes, tensors and datatypes, key names, error codes."""
