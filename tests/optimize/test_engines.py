"""The engines: Bayesian beats random on Branin, every offered estimator works, pending points are avoided,
the genetic engine handles mixed spaces, failures cannot crash an engine, and state round-trips."""
from __future__ import annotations

import math
import statistics

import pytest

from nnlo.errors import ConfigError
from nnlo.optimize.engines import make_engine
from nnlo.optimize.space import Categorical, Integer, Real, Space

BRANIN = Space([Real(-5.0, 10.0, name="x1"), Real(0.0, 15.0, name="x2")])
BRANIN_MIN = 0.397887


def branin(x1: float, x2: float, **_: object) -> float:
    b, c, t = 5.1 / (4 * math.pi**2), 5 / math.pi, 1 / (8 * math.pi)
    return (x2 - b * x1**2 + c * x1 - 6) ** 2 + 10 * (1 - t) * math.cos(x1) + 10


def best_after(engine, n: int, f=branin) -> float:
    best = math.inf
    for _ in range(n):
        p = engine.ask([])
        v = f(**p)
        engine.tell(p, v)
        best = min(best, v)
    return best


@pytest.mark.slow
def test_bayesian_beats_random_on_branin_over_seeds():
    seeds, n = range(3), 20
    bayes = [best_after(make_engine("bayesian", BRANIN, s, n_initial_points=6), n) for s in seeds]
    rand = [best_after(make_engine("random", BRANIN, s), n) for s in seeds]
    assert statistics.mean(bayes) < statistics.mean(rand)
    assert sum(b < r for b, r in zip(bayes, rand)) >= 2
    assert min(bayes) < BRANIN_MIN + 0.5


@pytest.mark.parametrize("estimator", ["GP", "RF", "ET"])
def test_every_offered_estimator_proposes_and_learns(estimator):
    engine = make_engine("bayesian", BRANIN, 1, estimator=estimator, n_initial_points=4)
    best = best_after(engine, 9)
    assert math.isfinite(best)
    assert len(engine.observations) == 9


def test_broken_estimators_are_not_offered():
    for bad in ("GBRT", "dummy"):
        with pytest.raises(ConfigError, match="GP, RF, ET"):
            make_engine("bayesian", BRANIN, estimator=bad)
    with pytest.raises(ConfigError, match="bayesian, genetic, random"):
        make_engine("grid", BRANIN)


@pytest.mark.parametrize("name", ["bayesian", "genetic", "random"])
def test_pending_points_are_not_proposed_again(name):
    engine = make_engine(name, BRANIN, 3, n_initial_points=3, population=3)
    for _ in range(4):
        p = engine.ask([])
        engine.tell(p, branin(**p))
    pending = []
    for _ in range(4):  # four blocks asking before any result returns
        pending.append(engine.ask(pending))
    keys = {BRANIN.key(p) for p in pending} | {BRANIN.key(p) for p, _ in engine.observations}
    assert len(keys) == 8


@pytest.mark.parametrize("name", ["bayesian", "genetic", "random"])
def test_failed_trials_do_not_crash_engines(name):
    engine = make_engine(name, BRANIN, 0, n_initial_points=3, population=3)
    for i in range(10):
        p = engine.ask([])
        engine.tell(p, None if i % 3 == 0 else (math.nan if i == 4 else branin(**p)))
    assert BRANIN.contains(engine.ask([]))
    imputed = engine.imputed()
    worst = max(v for _, v in engine.finite)
    assert [v for (_, v), (_, o) in zip(imputed, engine.observations) if o is None] == [worst] * 5


def test_all_failures_before_any_success_still_propose():
    engine = make_engine("bayesian", BRANIN, 0, n_initial_points=2)
    for _ in range(5):
        engine.tell(engine.ask([]), None)
    assert BRANIN.contains(engine.ask([]))


MIXED = Space([Real(1e-4, 1e-1, "log-uniform", name="lr"), Integer(1, 5, name="layers"),
               Categorical(["relu", "tanh", "gelu"], name="act"), Categorical([True, False], name="bn")])


def mixed_objective(lr, layers, act, bn):
    return abs(math.log10(lr) + 2) + abs(layers - 3) + {"relu": 1.0, "tanh": 0.0, "gelu": 2.0}[act] + (0 if bn else 1)


def test_genetic_handles_integer_real_and_categorical():
    engine = make_engine("genetic", MIXED, 5, population=6)
    best = best_after(engine, 60, mixed_objective)
    points = [p for p, _ in engine.observations]
    assert all(MIXED.contains(p) for p in points)
    assert {p["act"] for p in points} == {"relu", "tanh", "gelu"}
    assert {type(p["layers"]) for p in points} == {int}
    assert {type(p["bn"]) for p in points} == {bool}
    population = engine.population()
    assert len(population) == 6
    assert all(isinstance(v, float) for _, v in population)  # real-valued fitness
    # elitism: the best individual ever seen is in the population
    assert population[0][1] == min(v for _, v in engine.finite) == best
    assert best < statistics.mean(v for _, v in engine.finite[:6])


def test_genetic_rejects_tiny_population():
    with pytest.raises(ConfigError, match="--ga-populations"):
        make_engine("genetic", MIXED, population=1)


@pytest.mark.parametrize("name", ["bayesian", "genetic", "random"])
def test_state_round_trip_continues_identically(name):
    a = make_engine(name, BRANIN, 7, n_initial_points=3, population=3)
    best_after(a, 6)
    b = make_engine(name, BRANIN, 7, n_initial_points=3, population=3)
    b.load_state_dict(__import__("json").loads(__import__("json").dumps(a.state_dict())))
    assert a.ask([]) == b.ask([])


@pytest.mark.parametrize("name", ["bayesian", "random"])
def test_mixed_spaces_in_the_other_engines(name):
    engine = make_engine(name, MIXED, 2, n_initial_points=4)
    best_after(engine, 8, mixed_objective)
    points = [p for p, _ in engine.observations]
    assert all(MIXED.contains(p) for p in points)  # plain Python types: bool stays bool, int stays int
    assert {type(p["bn"]) for p in points} == {bool} and {type(p["layers"]) for p in points} == {int}


def test_a_scikit_optimize_failure_falls_back_to_a_random_point(monkeypatch, caplog):
    engine = make_engine("bayesian", BRANIN, 0, n_initial_points=2)
    best_after(engine, 3)

    def broken(*args, **kwargs):
        raise ValueError("Input contains NaN")

    monkeypatch.setattr(engine, "_skopt_ask", broken)
    point = engine.ask([])
    assert BRANIN.contains(point) and "scikit-optimize failed" in caplog.text
