"""Bayesian optimisation with scikit-optimize: the ONLY module of nnlo that imports skopt.

scikit-optimize 0.10 is unmaintained; with numpy 2.x and scikit-learn 1.6+ its ``GBRT`` and ``dummy``
estimators are broken, so only ``GP`` (Gaussian process, default), ``RF`` (random forest) and ``ET``
(extra trees) are offered - each is covered by a test.

Asynchrony with a constant liar: for every ``ask`` a fresh ``skopt.Optimizer`` is told the observations
plus the pending points with the lie ``min(observed)`` (skopt's ``cl_min``), so parallel blocks get
different points. Rebuilding per ask also makes the engine's state just its observations (JSON), not a
pickled skopt object that might not load in another version. Failed trials are told as the worst value
seen so far (see :meth:`Engine.imputed`). The first ``n_initial_points`` proposals are random.

Tree spaces (embedding): the model sees every parameter of every branch, an inactive one fixed at its
``default`` (low bound or first category, :meth:`Space.as_list`); its proposal is pruned back to the
parameters its choices make active. One surrogate over the whole tree shares what the branches have in
common (the root parameters) and needs no per-branch budget.

Fold noise (GP only): an observation told with a variance (k-fold: ``fom_std**2 / n_fold``) enters the
Gaussian process as its own noise level, the per-sample ``alpha`` of scikit-learn's regressor (in the
normalised units the regressor fits in, as ``normalize_y`` is on), floored at :data:`NOISE_FLOOR` times the
median reported variance (two folds that agree by chance do not make a result exact). The learned white
noise of skopt's kernel stays, on top. Without variances the regressor is exactly skopt's default.

Cost (GP): the fit is cubic and the acquisition quadratic in the observations (~12 s per ask at 500). Above
:data:`FIT_LIMIT` observations the GP is fitted on a bounded subset: the best quarter, the most recent
quarter, and the rest chosen space-filling (greedy max-min distance in unit coordinates) among the others;
pending points (lies) are always included; the acquisition is optimised from 2,000 random candidates and
2 L-BFGS restarts per acquisition function (skopt: 10,000 and 5), and the kernel hyperparameters with one
optimisation instead of three (:data:`BOUNDED_ACQUISITION`, :data:`BOUNDED_GP_RESTARTS`). The cost per ask
is then bounded whatever the number of observations. Below the limit nothing changes.
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
#: the Gaussian process is fitted on at most this many observations (a bounded, space-filling subset)
FIT_LIMIT = 100
#: above FIT_LIMIT, the acquisition is optimised from fewer candidates and restarts (skopt: 10,000 and 5)
BOUNDED_ACQUISITION = {"n_points": 2000, "n_restarts_optimizer": 2}
#: above FIT_LIMIT, restarts of the kernel hyperparameter optimisation (skopt: 2)
BOUNDED_GP_RESTARTS = 0
#: a told variance is raised to at least this fraction of the median told variance
NOISE_FLOOR = 0.1
log = logging.getLogger("nnlo.optimize.bayesian")


def _skopt_dimensions(space: Space) -> list[Any]:
    from skopt import space as sk  # lazy: scikit-optimize, only for --engine bayesian

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
        self.fit_limit: int | None = FIT_LIMIT  # None: fit on every observation (the benchmark's "old GP")

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
        from skopt import Optimizer  # lazy: scikit-optimize, only for --engine bayesian
        from threadpoolctl import threadpool_limits  # lazy: with scikit-optimize

        lie = min(v for _, v in told)
        noise: list[float | None] = self.imputed_noise() or [None] * len(told)
        bounded = self.estimator == "GP" and self.fit_limit is not None and len(told) > self.fit_limit
        if bounded:
            keep = fit_subset(self.space, [p for p, _ in told], [v for _, v in told], self.fit_limit)  # type: ignore[arg-type]
            told, noise = [told[i] for i in keep], [noise[i] for i in keep]
        xs = [self.space.as_list(p) for p, _ in told] + [self.space.as_list(p) for p in pending]
        ys = [v for _, v in told] + [lie] * len(pending)
        opt = Optimizer(
            self._dims,
            base_estimator=self.estimator,
            n_initial_points=self.n_initial_points,
            random_state=int(rng.integers(2**31 - 1)),
            acq_optimizer_kwargs=dict(BOUNDED_ACQUISITION) if bounded else None,
        )
        if bounded:  # one hyperparameter optimisation per fit, not three
            opt.base_estimator_.set_params(n_restarts_optimizer=BOUNDED_GP_RESTARTS)
        if self.estimator == "GP" and any(v is not None for v in noise):
            opt.base_estimator_.set_params(alpha=gp_alpha(ys, noise + [None] * len(pending)))
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


def gp_alpha(ys: list[float], variances: list[float | None]) -> np.ndarray:
    """Per-observation noise for scikit-learn's GP (``alpha``), from each value's variance.

    The regressor normalises y (``normalize_y=True``) and adds ``alpha`` to the diagonal of the normalised
    kernel matrix, so variances are divided by ``std(y)**2``. Unknown variances (lies, failures, no folds)
    get the floor; scikit-learn's own default 1e-10 is the least any observation gets.
    """
    known = [v for v in variances if v is not None and v > 0]
    floor = NOISE_FLOOR * float(np.median(known)) if known else 0.0
    std = float(np.std(ys))
    scale = std * std if std > 0 else 1.0
    raw = np.array([floor if v is None else max(v, floor) for v in variances], dtype=float)
    return np.maximum(raw / scale, 1e-10)


def fit_subset(space: Space, points: list[Point], values: list[float], limit: int) -> list[int]:
    """Indices (sorted) of at most ``limit`` observations to fit a GP on: the best quarter, the most recent
    quarter, then greedy max-min distance (in unit coordinates of the embedding) among the rest."""
    n = len(points)
    if n <= limit:
        return list(range(n))
    chosen: set[int] = set(sorted(range(n), key=lambda i: (values[i], i))[: limit // 4])
    chosen.update([i for i in range(n - 1, -1, -1) if i not in chosen][: limit // 4])
    unit = np.array([_unit(space, p) for p in points])
    picked = sorted(chosen)
    dist = np.min(np.linalg.norm(unit[:, None, :] - unit[None, picked, :], axis=2), axis=1)
    dist[picked] = -1.0
    while len(picked) < limit:
        i = int(np.argmax(dist))
        picked.append(i)
        dist = np.minimum(dist, np.linalg.norm(unit - unit[i], axis=1))
        dist[picked] = -1.0
    return sorted(picked)


def _unit(space: Space, point: Point) -> list[float]:
    out: list[float] = []
    for d, v in zip(space, space.as_list(point), strict=True):
        if isinstance(d, Categorical):
            out.append(float([repr(c) for c in d.categories].index(repr(v))) / max(1, len(d.categories) - 1))
        else:
            out.append(float(d.to_unit(v)))
    return out


def plot_partial_dependence(space: Space, points: list[list[Any]], values: list[float], **kwargs: Any) -> Any:
    """scikit-optimize's partial-dependence plot of a Gaussian-process surrogate fitted to finished trials.

    ``points`` are parameter lists in ``space`` order, ``values`` the figures of merit to minimise. Returns
    what :func:`skopt.plots.plot_objective` returns (one Axes or an array of them). Lives here so that this
    module stays the only one that imports skopt.
    """
    from skopt import Optimizer  # lazy: scikit-optimize, only for --engine bayesian
    from skopt.plots import plot_objective  # lazy: scikit-optimize, only for --engine bayesian

    optimizer = Optimizer(_skopt_dimensions(space), base_estimator="GP", n_initial_points=1, random_state=0)
    result = optimizer.tell(points, values)
    return plot_objective(result, **kwargs)
