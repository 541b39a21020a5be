"""`conch bench`: the benchmark harness's cells against Conch (and the tuned peers) in one run."""

from pathlib import Path

# The harness (wrk's load.sh, the request bodies, the correctness check, the peers' runtimes),
# kept in the project so that `conch bench` runs from a plain clone or an installed wheel;
# `conch bench --harness DIR` (HARNESS=DIR for bench/alternate.sh) measures with another copy.
HARNESS = Path(__file__).resolve().parent / "harness"
