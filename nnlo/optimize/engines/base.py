"""The ask/tell interface every search engine implements.

Engines MINIMISE a float ``value`` (the coordinator turns a "max" figure of merit into its negative). They
are deterministic functions of their seed and of what they were told, which is what makes the search state
small and restorable: :meth:`Engine.state_dict` is JSON, and a restored engine that is told the same
observations proposes the same points.

Asynchrony: ``ask(pending)`` receives the points already handed out whose results are not back yet, so an
engine can avoid proposing them again (the Bayesian engine tells them with a constant lie, the others
reject duplicates). A failed trial is told with ``value=None``; each engine documents how it treats it,
but none may crash on it.
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
        self.n_asked = 0

    # -- interface -----------------------------------------------------------------------------------
    def ask(self, pending: Sequence[Point] = ()) -> Point:
        """The next point to evaluate, avoiding ``pending`` (handed out, no result yet)."""
        rng = np.random.default_rng([self.seed, self.n_asked])
        self.n_asked += 1
        point = self._propose(list(pending), rng)
        assert self.space.contains(point), f"{self.name} engine proposed {point}, outside {self.space}"
        return point

    def tell(self, point: Point, value: float | None) -> None:
        """Record a result; ``None`` (or a non-finite value) marks a failed trial."""
        if value is not None and not math.isfinite(value):
            value = None
        self.observations.append((self.space.point(point), None if value is None else float(value)))

    @abstractmethod
    def _propose(self, pending: list[Point], rng: np.random.Generator) -> Point: ...

    # -- state ---------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "engine": self.name,
            "seed": self.seed,
            "n_asked": self.n_asked,
            "observations": [[p, v] for p, v in self.observations],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.seed = int(state["seed"])
        self.n_asked = int(state["n_asked"])
        self.observations = [(self.space.point(p), v) for p, v in state["observations"]]

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
