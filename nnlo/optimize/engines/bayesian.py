"""Bayesian optimisation with scikit-optimize: the ONLY module of nnlo that imports skopt.

scikit-optimize 0.10 is unmaintained; with numpy 2.x and scikit-learn 1.6+ its ``GBRT`` and ``dummy``
estimators are broken, so only ``GP`` (Gaussian process, default), ``RF`` (random forest) and ``ET``
(extra trees) are offered - each is covered by a test.

Asynchrony with a constant liar: for every ``ask`` a fresh ``skopt.Optimizer`` is told the observations
plus the pending points with the lie ``min(observed)`` (skopt's ``cl_min``), so parallel blocks get
different points. Rebuilding per ask also makes the engine's state just its observations (JSON), not a
pickled skopt object that might not load in another version. Failed trials are told as the worst value
seen so far (see :meth:`Engine.imputed`). The first ``n_initial_points`` proposals are random.
"""
from __future__ import annotations

import logging
import warnings
from typing import Any

import numpy as np

from nnlo.errors import ConfigError
from nnlo.optimize.engines.base import Engine, Point
from nnlo.optimize.space import Categorical, Integer, Real, Space

ESTIMATORS = ("GP", "RF", "ET")
log = logging.getLogger("nnlo.optimize.bayesian")


def _skopt_dimensions(space: Space) -> list[Any]:
    from skopt import space as sk

    out: list[Any] = []
    for d in space:
        if isinstance(d, Categorical):
            out.append(sk.Categorical(list(d.categories), name=d.name))
        elif isinstance(d, Integer):
            out.append(sk.Integer(d.low, d.high, prior=d.prior, name=d.name))
        elif isinstance(d, Real):
            out.append(sk.Real(d.low, d.high, prior=d.prior, name=d.name))
    return out


class BayesianEngine(Engine):
    name = "bayesian"

    def __init__(self, space: Space, seed: int = 0, *, estimator: str = "GP", n_initial_points: int = 10):
        super().__init__(space, seed)
        est = estimator.upper()
        if est not in ESTIMATORS:
            raise ConfigError(
                f"--estimator {estimator!r} is not offered; use one of {', '.join(ESTIMATORS)} "
                "(GBRT and dummy are broken in scikit-optimize 0.10 with current scikit-learn)"
            )
        self.estimator = est
        self.n_initial_points = max(1, int(n_initial_points))
        self._dims = _skopt_dimensions(space)

    def _propose(self, pending: list[Point], rng: np.random.Generator) -> Point:
        told = self.imputed()
        if len(told) < self.n_initial_points:
            return self.fresh_sample(pending, rng)
        try:
            x = self._skopt_ask(told, pending, rng)
        except Exception as e:  # noqa: BLE001 - an unmaintained library must not end a search
            log.warning("scikit-optimize failed to propose a point (%s: %s); proposing a random one",
                        type(e).__name__, e)
            return self.fresh_sample(pending, rng)
        point = self.space.point(x)
        if self.space.key(point) in self.seen(pending):
            return self.fresh_sample(pending, rng)
        return point

    def _skopt_ask(self, told: list[tuple[Point, float]], pending: list[Point], rng: np.random.Generator) -> list:
        from skopt import Optimizer
        from threadpoolctl import threadpool_limits

        lie = min(v for _, v in told)
        xs = [self.space.as_list(p) for p, _ in told] + [self.space.as_list(p) for p in pending]
        ys = [v for _, v in told] + [lie] * len(pending)
        opt = Optimizer(
            self._dims,
            base_estimator=self.estimator,
            n_initial_points=self.n_initial_points,
            random_state=int(rng.integers(2**31 - 1)),
        )
        # One BLAS thread: the fits are small, and a threaded BLAS on a busy node (the coordinator shares
        # it with blocks) is ~10x slower than one thread. Warnings such as "The objective has been
        # evaluated at this point before" are harmless with lies and retries.
        with threadpool_limits(limits=1), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            opt.tell(xs, ys)
            return opt.ask()

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state.update(estimator=self.estimator, n_initial_points=self.n_initial_points)
        return state


def plot_partial_dependence(space: Space, points: list[list[Any]], values: list[float], **kwargs: Any) -> Any:
    """scikit-optimize's partial-dependence plot of a Gaussian-process surrogate fitted to finished trials.

    ``points`` are parameter lists in ``space`` order, ``values`` the figures of merit to minimise. Returns
    what :func:`skopt.plots.plot_objective` returns (one Axes or an array of them). Lives here so that this
    module stays the only one that imports skopt.
    """
    from skopt import Optimizer
    from skopt.plots import plot_objective

    optimizer = Optimizer(_skopt_dimensions(space), base_estimator="GP", n_initial_points=1, random_state=0)
    result = optimizer.tell(points, values)
    return plot_objective(result, **kwargs)
