"""Tests of GPU code paths; each skips where its GPU piece is absent."""
