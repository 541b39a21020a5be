"""The ensemble runner: an ensemble's steps submitted and advanced from their state in Redis."""
