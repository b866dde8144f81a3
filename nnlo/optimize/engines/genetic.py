"""A steady-state genetic algorithm over Integer, Real and Categorical dimensions.

Why steady-state: a generational GA makes every block wait until the whole generation is evaluated. Here
the *population* is the ``population`` best individuals evaluated so far ((mu + lambda) replacement, which
is elitism: the best are never lost), and every ``ask`` breeds one child from it immediately:

* selection: tournament of ``tournament`` individuals drawn from the population, lowest value wins;
* crossover (probability ``crossover``): per gene, uniform choice of a parent for Categorical genes, a
  random blend of the parents (in the unit/log-unit coordinate of the dimension) for Real and Integer;
* mutation: each gene with probability ``mutation`` (default 1/number of genes, at least one gene per
  child): Gaussian step of ``sigma`` in unit coordinates for Real/Integer (clipped, rounded for Integer),
  another category for Categorical.

Fitness is a float (``-value``; upstream stored it in an integer array). Until ``population`` individuals
are evaluated the engine samples at random. Failed trials never enter the population.

Tree spaces: parents are completed with random values for their inactive genes, crossed on every gene,
mutated on the child's active genes, and the child is pruned to its active parameters; a child whose
choice switches branch thus gets that branch's genes from the other parent or fresh random ones.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from nnlo.errors import ConfigError
from nnlo.optimize.engines.base import Engine, Point
from nnlo.optimize.space import Categorical, Space


class GeneticEngine(Engine):
    name = "genetic"

    def __init__(
        self,
        space: Space,
        seed: int = 0,
        *,
        population: int = 10,
        tournament: int = 3,
        crossover: float = 0.9,
        mutation: float | None = None,
        sigma: float = 0.15,
    ):
        super().__init__(space, seed)
        if population < 2:
            raise ConfigError(f"--ga-populations must be at least 2 (individuals per population), got {population}")
        self.population_size = population
        self.tournament = max(1, tournament)
        self.crossover = crossover
        self.mutation = mutation if mutation is not None else 1.0 / len(space)
        self.sigma = sigma

    def population(self) -> list[tuple[Point, float]]:
        """The current population: the best evaluated individuals, best first (ties: oldest first)."""
        ranked = sorted(enumerate(self.finite), key=lambda iv: (iv[1][1], iv[0]))
        return [pv for _, pv in ranked[: self.population_size]]

    def _propose(self, pending: list[Point], rng: np.random.Generator) -> Point:
        pop = self.population()
        if len(pop) < min(self.population_size, 2) or len(self.finite) < self.population_size:
            return self.fresh_sample(pending, rng)
        seen = self.seen(pending)
        for _ in range(20):
            a, b = self._select(pop, rng), self._select(pop, rng)
            if self.space.is_tree:  # breed on every gene: inactive ones drawn at random, pruned again below
                a, b = self.space.complete(a, rng), self.space.complete(b, rng)
            child = self._cross(a, b, rng) if rng.uniform() < self.crossover else dict(a)
            child = self.space.point(self._mutate(child, rng))
            if self.space.key(child) not in seen:
                return child
        return self.fresh_sample(pending, rng)

    def _select(self, pop: list[tuple[Point, float]], rng: np.random.Generator) -> Point:
        k = min(self.tournament, len(pop))
        idx = rng.choice(len(pop), size=k, replace=False)
        best = min(idx, key=lambda i: (pop[i][1], i))
        return pop[best][0]

    def _cross(self, a: Point, b: Point, rng: np.random.Generator) -> Point:
        child: dict[str, Any] = {}
        for d in self.space:
            n = str(d.name)
            if isinstance(d, Categorical):
                child[n] = a[n] if rng.uniform() < 0.5 else b[n]
            else:
                ua, ub = d.to_unit(a[n]), d.to_unit(b[n])
                w = rng.uniform(-0.25, 1.25)  # blend with a little extrapolation (BLX-0.25)
                child[n] = d.from_unit(ua + w * (ub - ua))
        return child

    def _mutate(self, point: Point, rng: np.random.Generator) -> Point:
        child = dict(point)
        dims = self.space.active(child) if self.space.is_tree else list(self.space)  # mutate what counts
        hits = [rng.uniform() < self.mutation for _ in dims]
        if not any(hits):
            hits[int(rng.integers(len(dims)))] = True
        for d, hit in zip(dims, hits, strict=True):
            if not hit:
                continue
            n = str(d.name)
            if isinstance(d, Categorical):
                others = [c for c in d.categories if not (type(c) is type(child[n]) and c == child[n])]
                if others:
                    child[n] = others[int(rng.integers(len(others)))]
            else:
                u = d.to_unit(child[n]) + rng.normal(0.0, self.sigma)
                new = d.from_unit(u)
                if new == child[n] and d.kind == "integer":  # make small integer ranges still move
                    new = d.clip(child[n] + (1 if rng.uniform() < 0.5 else -1))
                child[n] = new
        return child

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["population"] = self.population_size
        return state
