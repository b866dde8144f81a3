"""Search engines behind one ask/tell interface (:class:`~nnlo.optimize.engines.base.Engine`).

:func:`make_engine` builds one by its ``--hyper-opt`` name; skopt is imported only when the Bayesian engine
actually proposes a point.
"""
from __future__ import annotations

from typing import Any

from nnlo.errors import ConfigError
from nnlo.optimize.engines.base import Engine
from nnlo.optimize.engines.bayesian import BayesianEngine
from nnlo.optimize.engines.genetic import GeneticEngine
from nnlo.optimize.engines.random import RandomEngine
from nnlo.optimize.space import Space

ENGINES = ("bayesian", "genetic", "random")


def make_engine(
    name: str,
    space: Space,
    seed: int = 0,
    *,
    estimator: str = "GP",
    n_initial_points: int = 10,
    population: int = 10,
) -> Engine:
    if name == "bayesian":
        return BayesianEngine(space, seed, estimator=estimator, n_initial_points=n_initial_points)
    if name == "genetic":
        return GeneticEngine(space, seed, population=population)
    if name == "random":
        return RandomEngine(space, seed)
    raise ConfigError(f"--hyper-opt {name!r} is unknown; use one of {', '.join(ENGINES)}")


def engine_options(engine: Engine) -> dict[str, Any]:
    """The options that shaped an engine (stored with the state, compared on restore)."""
    state = engine.state_dict()
    return {k: state[k] for k in ("engine", "estimator", "n_initial_points", "population") if k in state}
