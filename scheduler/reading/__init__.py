"""Reading the request streams: the intake, per-slot reads, own and dead schedulers' entries."""
