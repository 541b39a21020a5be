"""The TensorFlow backend (platform ``tensorflow_savedmodel``): SavedModel directories served
through a TensorFlow session per instance, the way Triton's tensorflow backend serves them."""
