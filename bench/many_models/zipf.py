"""The request mix: model ranks drawn from a Zipf distribution, rank 1 the hottest.

P(rank k) = k^-s / H(n, s) for k = 1..n, a finite Zipf law (numpy's ``zipf`` is the unbounded
one, whose tail past n would have to be redrawn, skewing the head). A sampler draws ranks by
inverting the cumulative distribution, so the same seed gives the same sequence on every
machine, and the warm baseline's mix over the 50 hottest is the same law cut at 50.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

EXPONENT = 1.1  # the s


def pmf(n: int, s: float = EXPONENT) -> npt.NDArray[np.float64]:
    """The probability of each rank 1..n (index 0 is rank 1)."""
    if n < 1:
        raise ValueError(f"a Zipf distribution needs at least one rank, got n={n}")
    weights = np.power(np.arange(1, n + 1, dtype=np.float64), -s)
    total = float(weights.sum())
    return np.asarray(weights / total, dtype=np.float64)


class ZipfSampler:
    """Draws 0-based ranks (0 = the hottest model) in blocks, cheap per request."""

    def __init__(self, n: int, seed: int | list[int], s: float = EXPONENT, block: int = 4096):
        self._cdf = np.cumsum(pmf(n, s))
        self._cdf[-1] = 1.0  # no draw falls past the last rank through rounding
        self._rng = np.random.default_rng(seed)
        self._block = block
        self._ranks: list[int] = []

    def draw(self, count: int) -> npt.NDArray[np.int64]:
        """``count`` ranks at once."""
        return np.searchsorted(self._cdf, self._rng.random(count), side="right").astype(np.int64)

    def next(self) -> int:
        """One rank; refilled a block at a time."""
        if not self._ranks:
            self._ranks = self.draw(self._block).tolist()[::-1]
        return self._ranks.pop()
