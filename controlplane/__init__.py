"""Conch's xDS control plane: Envoy at the edge learns the live gateways from Redis through it."""
