"""Triton's rate limiter across the fleet: instances hold their ``rate_limiter`` resources in
Redis while they execute (``--rate-limit=execution_count``, ``CONCH_WORKER_RATE_LIMIT``)."""
