"""Serving batches: the instance loop, one batch's life, cancels, streams and reclaim."""
