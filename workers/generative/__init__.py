"""Generative serving: a tiny character-level GPT with a KV cache and the continuous
(iteration-level) batching engine that a decoupled Python model hands its requests to."""
