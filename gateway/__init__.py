"""The stateless KServe v2 gateway: admit, route, validate, enqueue, await the reply."""
