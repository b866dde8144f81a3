"""The ask/tell interface every search engine implements.

Engines MINIMISE a float ``value`` (the coordinator turns a "max" figure of merit into its negative). They
are deterministic functions of their seed and of what they were told, which is what makes the search state
small and restorable: :meth:`Engine.state_dict` is JSON, and a restored engine that is told the same
observations proposes the same points.

Asynchrony: ``ask(pending)`` receives the points already handed out whose results are not back yet, so an
engine can avoid proposing them again (the Bayesian engine tells them with a constant lie, the others
reject duplicates). A failed trial is told with ``value=None``; each engine documents how it treats it,
but none may crash on it.

Noise: ``tell(point, value, variance)`` may carry the variance of ``value`` (with k-fold, the variance of
the fold mean, ``fom_std**2 / n_fold``); the Bayesian engine's Gaussian process uses it as per-observation
noise, the others ignore it. ``variances`` runs beside ``observations`` (``None``: not known).

Tree spaces: points hold only their active parameters (:class:`~nnlo.optimize.space.Space`); every engine
proposes such points (``Engine.ask`` checks it).
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import numpy as np

from nnlo.optimize.space import Space

Point = dict[str, Any]


class Engine(ABC):
    """Base of all engines: keeps the observations and a per-ask random generator."""

    name = "engine"

    def __init__(self, space: Space, seed: int = 0):
        self.space = space
        self.seed = int(seed)
        self.observations: list[tuple[Point, float | None]] = []
        self.variances: list[float | None] = []  # beside observations: the variance of each value, if known
        self.n_asked = 0

    # -- interface -----------------------------------------------------------------------------------
    def ask(self, pending: Sequence[Point] = ()) -> Point:
        """The next point to evaluate, avoiding ``pending`` (handed out, no result yet)."""
        rng = np.random.default_rng([self.seed, self.n_asked])
        self.n_asked += 1
        point = self._propose(list(pending), rng)
        assert self.space.contains(point), f"{self.name} engine proposed {point}, outside {self.space}"
        return point

    def tell(self, point: Point, value: float | None, variance: float | None = None) -> None:
        """Record a result; ``None`` (or a non-finite value) marks a failed trial. ``variance``: how noisy
        ``value`` is (the variance of the k-fold mean), if known."""
        if value is not None and not math.isfinite(value):
            value = None
        if value is None or variance is None or not math.isfinite(variance) or variance < 0:
            variance = None
        del self.variances[len(self.observations):]  # keep the two lists aligned (observations may be popped)
        self.variances.extend([None] * (len(self.observations) - len(self.variances)))
        self.observations.append((self.space.point(point), None if value is None else float(value)))
        self.variances.append(None if variance is None else float(variance))

    @abstractmethod
    def _propose(self, pending: list[Point], rng: np.random.Generator) -> Point: ...

    # -- state ---------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        state = {
            "engine": self.name,
            "seed": self.seed,
            "n_asked": self.n_asked,
            "observations": [[p, v] for p, v in self.observations],
        }
        noise = self.noise()
        if any(v is not None for v in noise):  # absent without k-fold: such states are as they always were
            state["variances"] = noise
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.seed = int(state["seed"])
        self.n_asked = int(state["n_asked"])
        self.observations = [(self.space.point(p), v) for p, v in state["observations"]]
        saved = state.get("variances") or []
        self.variances = [None if v is None else float(v) for v in saved][: len(self.observations)]

    def noise(self) -> list[float | None]:
        """The variance of each observation (``None`` where unknown), aligned with :attr:`observations`."""
        n = len(self.observations)
        return [self.variances[i] if i < len(self.variances) else None for i in range(n)]

    # -- helpers -------------------------------------------------------------------------------------
    @property
    def finite(self) -> list[tuple[Point, float]]:
        return [(p, v) for p, v in self.observations if v is not None]

    def imputed(self) -> list[tuple[Point, float]]:
        """Observations with failed trials replaced by the worst finite value seen so far.

        Failures thus look bad but finite to a model (so it steers away without a numerical blow-up);
        before any success they are left out, as there is no scale to impute from.
        """
        finite = [v for _, v in self.observations if v is not None]
        if not finite:
            return []
        worst = max(finite)
        return [(p, worst if v is None else v) for p, v in self.observations]

    def imputed_noise(self) -> list[float | None]:
        """The variances matching :meth:`imputed` (``None`` for failed trials and where unknown)."""
        if all(v is None for _, v in self.observations):
            return []
        return self.noise()

    def seen(self, pending: Sequence[Point]) -> set[str]:
        return {self.space.key(p) for p, _ in self.observations} | {self.space.key(p) for p in pending}

    def fresh_sample(self, pending: Sequence[Point], rng: np.random.Generator, tries: int = 50) -> Point:
        """A random point not yet evaluated nor pending (if the space allows; else any random point)."""
        seen = self.seen(pending)
        point = self.space.sample(rng)
        for _ in range(tries):
            if self.space.key(point) not in seen:
                break
            point = self.space.sample(rng)
        return point
