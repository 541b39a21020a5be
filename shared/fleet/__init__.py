"""The fleet's shared state in Redis: liveness, readiness, control, replies, fenced writes."""
