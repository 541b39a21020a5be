"""Which version answers a request: the pure rules and this process's copy of the weights."""
