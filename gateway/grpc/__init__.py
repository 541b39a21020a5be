"""KServe v2 over gRPC: the service, its codec, streams and the extensions' methods."""
