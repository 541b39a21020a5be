"""KServe v2 over HTTP: the Litestar application, the inference path and its codecs."""
