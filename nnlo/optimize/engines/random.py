"""Random search: independent samples from the space's priors (the baseline every engine must beat)."""
from __future__ import annotations

import numpy as np

from nnlo.optimize.engines.base import Engine, Point


class RandomEngine(Engine):
    """Samples uniformly (log-uniformly where declared); never re-proposes an evaluated or pending point."""

    name = "random"

    def _propose(self, pending: list[Point], rng: np.random.Generator) -> Point:
        return self.fresh_sample(pending, rng)
