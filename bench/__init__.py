"""`conch bench`: the shared harness's cells against Conch (and the tuned peer) in one run."""
