"""Model repositories on disk: their layout, file references and paths."""
