"""The protocol-neutral data plane: admission, validation, the enqueue and the reply."""
