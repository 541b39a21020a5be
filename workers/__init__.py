"""Worker services: one per backend, each pulling batches of the models it loaded."""
