"""The stateless KServe v2 gateway: validate, route, admit, enqueue, await the reply."""
