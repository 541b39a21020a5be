"""A gateway service's processes: the supervisor, each process's state, heartbeat and readiness."""
