"""The engines' bookkeeping, exactly and fast (the search-quality tests are test_engines.py): names and
options, what tell records (failures, variances), state, imputation, fresh samples, the genetic engine's
population and breeding, and the Bayesian engine's options, noise and fit subset."""
from __future__ import annotations

import math

import numpy as np
import pytest

from nnlo.errors import ConfigError
from nnlo.optimize.engines import ENGINES, engine_options, make_engine
from nnlo.optimize.engines.bayesian import BayesianEngine, fit_subset, gp_alpha
from nnlo.optimize.engines.genetic import GeneticEngine
from nnlo.optimize.engines.random import RandomEngine
from nnlo.optimize.space import Categorical, Integer, Real, Space

SPACE = Space([Real(0.0, 1.0, name="x"), Integer(1, 3, name="n"), Categorical(["a", "b"], name="c")])


def test_engines_by_name_and_their_options():
    assert ENGINES == ("bayesian", "genetic", "random")
    with pytest.raises(ConfigError, match=r"^--hyper-opt 'grid' is unknown; use one of bayesian, genetic, random$"):
        make_engine("grid", SPACE)
    assert engine_options(make_engine("random", SPACE, 3)) == {"engine": "random"}
    assert engine_options(make_engine("genetic", SPACE, population=4)) == {"engine": "genetic", "population": 4}
    assert engine_options(make_engine("bayesian", SPACE)) == {"engine": "bayesian", "estimator": "GP",
                                                              "n_initial_points": 10}
    bay = make_engine("bayesian", SPACE, 7, estimator="rf", n_initial_points=0)
    assert isinstance(bay, BayesianEngine) and (bay.estimator, bay.n_initial_points, bay.seed) == ("RF", 1, 7)
    assert bay.fit_limit == 100
    with pytest.raises(ConfigError, match=r"^--estimator 'GBRT' is not offered; use one of GP, RF, ET \(GBRT and "
                                          r"dummy are broken in scikit-optimize 0.10 with current scikit-learn\)$"):
        make_engine("bayesian", SPACE, estimator="GBRT")
    gen = make_engine("genetic", SPACE)
    assert isinstance(gen, GeneticEngine) and gen.population_size == 10
    assert (gen.tournament, gen.crossover, gen.mutation, gen.sigma) == (3, 0.9, 1 / 3, 0.15)
    assert GeneticEngine(SPACE, tournament=0).tournament == 1 and GeneticEngine(SPACE, mutation=0.5).mutation == 0.5
    with pytest.raises(ConfigError, match=r"^--ga-populations must be at least 2 \(individuals per population\), "
                                          r"got 1$"):
        GeneticEngine(SPACE, population=1)
    assert GeneticEngine(SPACE, population=2).population_size == 2


def test_tell_records_values_failures_and_variances():
    e = RandomEngine(SPACE)
    p = {"x": np.float64(0.5), "n": np.int64(2), "c": "a"}
    e.tell(p, 1)
    e.tell(p, float("inf"), 0.1)  # a non-finite value is a failure, and its variance is dropped
    e.tell(p, float("nan"))
    e.tell(p, 2.0, -1.0)  # a negative variance is no variance
    e.tell(p, 3.0, float("nan"))
    e.tell(p, 4.0, 0.0)
    e.tell(p, 5.0, 0.25)
    assert [v for _, v in e.observations] == [1.0, None, None, 2.0, 3.0, 4.0, 5.0]
    assert type(e.observations[0][1]) is float and type(e.observations[0][0]["x"]) is float
    assert e.noise() == [None, None, None, None, None, 0.0, 0.25]
    assert e.finite == [(e.observations[0][0], 1.0), *[(e.observations[0][0], v) for v in (2.0, 3.0, 4.0, 5.0)]]
    e.observations.pop()  # a caller may drop the last observation: the variances follow
    e.tell(p, 6.0)
    assert e.noise() == [None, None, None, None, None, 0.0, None]
    assert [v for _, v in e.imputed()] == [1.0, 6.0, 6.0, 2.0, 3.0, 4.0, 6.0]  # failures at the worst value
    assert e.imputed_noise() == e.noise()


def test_imputation_before_any_success_and_state_round_trip():
    e = RandomEngine(SPACE, seed=4)
    assert e.imputed() == [] and e.imputed_noise() == []
    e.tell({"x": 0.1, "n": 1, "c": "a"}, None)
    assert e.imputed() == [] and e.imputed_noise() == []
    state = e.state_dict()
    assert state == {"engine": "random", "seed": 4, "n_asked": 0, "observations": [[{"x": 0.1, "n": 1, "c": "a"},
                                                                                    None]]}
    e.ask()
    e.tell({"x": 0.2, "n": 2, "c": "b"}, 1.5, 0.5)
    state = e.state_dict()
    assert state["variances"] == [None, 0.5] and state["n_asked"] == 1
    other = RandomEngine(SPACE)
    other.load_state_dict(state)
    assert (other.seed, other.n_asked, other.observations, other.noise()) == (4, 1, e.observations, [None, 0.5])
    assert other.ask() == e.ask()  # the same seed and history propose the same point
    other.load_state_dict({"seed": 1, "n_asked": 0, "observations": [[{"x": 0.3, "n": 3, "c": "a"}, 2.0]],
                           "variances": [0.1, 0.2, 0.3]})
    assert other.noise() == [0.1] and other.variances == [0.1]


def test_fresh_samples_avoid_what_was_seen_or_handed_out():
    tiny = Space([Integer(1, 3, name="n")])
    e = RandomEngine(tiny)
    e.tell({"n": 1}, 1.0)
    assert e.seen([{"n": 2}]) == {tiny.key({"n": 1}), tiny.key({"n": 2})}
    assert {e.ask([{"n": 2}])["n"] for _ in range(20)} == {3}
    e.tell({"n": 3}, 1.0)
    assert e.ask([{"n": 2}])["n"] in (1, 2, 3)  # nothing fresh is left: any point
    assert e.n_asked == 21


def test_the_genetic_population_is_the_best_evaluated_oldest_first():
    g = GeneticEngine(SPACE, population=3)
    for x, v in ((0.1, 5.0), (0.2, 1.0), (0.3, None), (0.4, 1.0), (0.5, 0.5), (0.6, 9.0)):
        g.tell({"x": x, "n": 1, "c": "a"}, v)
    assert [(p["x"], v) for p, v in g.population()] == [(0.5, 0.5), (0.2, 1.0), (0.4, 1.0)]
    assert g.state_dict()["population"] == 3


def test_the_genetic_engine_samples_until_its_population_is_evaluated_then_breeds():
    g = GeneticEngine(SPACE, seed=1, population=4)
    for i in range(3):
        g.tell({"x": 0.25 * i, "n": 1 + i % 3, "c": "a"}, float(i))
    fresh = GeneticEngine(SPACE, seed=1, population=4)
    fresh.load_state_dict(g.state_dict())
    assert g.ask() == RandomEngine(SPACE, seed=1).ask()  # 3 of 4: still random, the same stream as random search
    g.tell({"x": 1.0, "n": 3, "c": "b"}, 3.0)
    child = g.ask()
    assert SPACE.contains(child) and child != RandomEngine(SPACE, seed=1).ask()


def test_mutation_always_moves_a_gene():
    rng = np.random.default_rng(0)
    g = GeneticEngine(Space([Integer(1, 3, name="n"), Categorical(["a", "b"], name="c")]), mutation=0.0, sigma=0.0)
    moved = set()
    for _ in range(40):
        child = g._mutate({"n": 2, "c": "a"}, rng)
        # exactly one gene (mutation 0 still mutates one), and an integer moves by one even with sigma 0
        assert child in ({"n": 1, "c": "a"}, {"n": 3, "c": "a"}, {"n": 2, "c": "b"}), child
        moved.add(tuple(child.items()))
    assert len(moved) == 3
    one = GeneticEngine(Space([Categorical(["only"], name="c"), Real(0.0, 1.0, name="x")]), mutation=1.0, sigma=0.0)
    assert one._mutate({"c": "only", "x": 0.5}, rng) == {"c": "only", "x": 0.5}


def test_gp_noise_per_observation():
    assert gp_alpha([1.0, 3.0], [None, None]).tolist() == [1e-10, 1e-10]  # no variance known: the least
    # std(y) = 1: variances as they are, floored at 0.1 x their median (0.2)
    assert gp_alpha([1.0, 3.0, 2.0 - math.sqrt(0.5) * 0 + 0, 2.0], [0.4, 0.01, None, 0.2]) .tolist() == \
        pytest.approx(np.maximum(np.array([0.4, 0.02, 0.02, 0.2]) / np.std([1.0, 3.0, 2.0, 2.0]) ** 2, 1e-10).tolist())
    assert gp_alpha([2.0, 2.0], [0.5, 0.5]).tolist() == [0.5, 0.5]  # constant y: no rescaling
    assert gp_alpha([0.0, 2.0], [0.0, -1.0]).tolist() == [1e-10, 1e-10]  # nothing positive known: no floor


def test_the_fit_subset_keeps_the_best_the_newest_and_spreads_the_rest():
    line = Space([Real(0.0, 1.0, name="x")])
    points = [{"x": i / 19} for i in range(20)]
    values = [float(i % 7) for i in range(20)]
    assert fit_subset(line, points, values, 20) == list(range(20))
    keep = fit_subset(line, points, values, 8)
    assert len(keep) == 8 and keep == sorted(keep)
    best = sorted(range(20), key=lambda i: (values[i], i))[:2]
    assert set(best) <= set(keep) and {19, 18} <= set(keep)  # the best quarter, the newest quarter
    # then, one at a time, the point farthest from those kept (the first of equals): 12, 3, 15, 5
    assert keep == [0, 3, 5, 7, 12, 15, 18, 19]


def test_the_bayesian_engine_proposes_from_its_model_after_the_initial_points():
    line = Space([Real(0.0, 1.0, name="x")])
    e = BayesianEngine(line, seed=3, n_initial_points=2)
    first = [e.ask() for _ in range(2)]
    assert first == [RandomEngine(line, seed=3).ask() for _ in range(1)] + [first[1]]  # random until 2 are told
    for x in (0.1, 0.5, 0.9):
        e.tell({"x": x}, (x - 0.3) ** 2)
    pending = [{"x": 0.31}]
    point = e.ask(pending)
    assert line.contains(point) and line.key(point) not in e.seen(pending)
    assert e.state_dict()["estimator"] == "GP" and e.state_dict()["n_initial_points"] == 2


class _RecordingOptimizer:
    """Stands in for skopt.Optimizer: records what the engine asks of scikit-optimize, proposes ``answer``."""

    made: list[_RecordingOptimizer] = []
    answer: list = []

    def __init__(self, dimensions, **kwargs):
        self.dimensions, self.kwargs, self.told, self.params = dimensions, kwargs, None, {}
        est = self

        class Estimator:
            def set_params(self, **p):
                est.params.update(p)

        self.base_estimator_ = Estimator()
        _RecordingOptimizer.made.append(self)

    def tell(self, xs, ys):
        self.told = (xs, ys)

    def ask(self):
        return list(_RecordingOptimizer.answer)


@pytest.fixture
def recorder(monkeypatch):
    import skopt

    _RecordingOptimizer.made = []
    monkeypatch.setattr(skopt, "Optimizer", _RecordingOptimizer)
    return _RecordingOptimizer


def test_what_the_bayesian_engine_asks_of_scikit_optimize(recorder):
    e = BayesianEngine(SPACE, seed=2, n_initial_points=2)
    e.tell({"x": 0.5, "n": 2, "c": "a"}, 3.0)
    e.tell({"x": 0.1, "n": 1, "c": "b"}, None)  # a failure: told as the worst value seen
    e.tell({"x": 0.9, "n": 3, "c": "b"}, 1.0)
    recorder.answer = [0.25, 2, "b"]
    assert e.ask([{"x": 0.7, "n": 1, "c": "a"}]) == {"x": 0.25, "n": 2, "c": "b"}
    opt = recorder.made[-1]
    assert [type(d).__name__ for d in opt.dimensions] == ["Real", "Integer", "Categorical"]
    assert opt.kwargs["base_estimator"] == "GP" and opt.kwargs["n_initial_points"] == 2
    assert opt.kwargs["acq_optimizer_kwargs"] is None and 0 <= opt.kwargs["random_state"] < 2**31 - 1
    xs, ys = opt.told
    assert xs == [[0.5, 2, "a"], [0.1, 1, "b"], [0.9, 3, "b"], [0.7, 1, "a"]]
    assert ys == [3.0, 3.0, 1.0, 1.0]  # the pending point told with the lie min(observed)
    assert opt.params == {}  # no variances: scikit-optimize's own GP
    recorder.answer = [0.5, 2, "a"]  # a point already evaluated: a fresh random one instead
    again = e.ask()
    assert again != {"x": 0.5, "n": 2, "c": "a"} and SPACE.contains(again)


def test_told_variances_become_the_gps_noise_and_only_the_gps(recorder):
    e = BayesianEngine(SPACE, seed=2, n_initial_points=1)
    e.tell({"x": 0.5, "n": 2, "c": "a"}, 3.0, 0.5)
    e.tell({"x": 0.9, "n": 3, "c": "b"}, 1.0)
    recorder.answer = [0.3, 1, "a"]
    e.ask([{"x": 0.2, "n": 1, "c": "a"}])
    assert recorder.made[-1].params["alpha"].tolist() == pytest.approx(
        gp_alpha([3.0, 1.0, 1.0], [0.5, None, None]).tolist())
    rf = BayesianEngine(SPACE, seed=2, estimator="RF", n_initial_points=1)
    rf.tell({"x": 0.5, "n": 2, "c": "a"}, 3.0, 0.5)
    rf.ask()
    assert recorder.made[-1].kwargs["base_estimator"] == "RF" and recorder.made[-1].params == {}


def test_past_the_fit_limit_the_gp_fits_a_subset_with_a_bounded_acquisition(recorder):
    from nnlo.optimize.engines.bayesian import BOUNDED_ACQUISITION, BOUNDED_GP_RESTARTS

    e = BayesianEngine(SPACE, seed=1, n_initial_points=1)
    e.fit_limit = 4
    points = [{"x": i / 10, "n": 1 + i % 3, "c": "a"} for i in range(8)]
    for i, p in enumerate(points):
        e.tell(p, float(i % 5), 0.1 * (i + 1))
    recorder.answer = [0.95, 1, "b"]
    e.ask()
    opt = recorder.made[-1]
    keep = fit_subset(SPACE, points, [float(i % 5) for i in range(8)], 4)
    assert opt.told[0] == [SPACE.as_list(points[i]) for i in keep] and opt.told[1] == [float(i % 5) for i in keep]
    assert opt.kwargs["acq_optimizer_kwargs"] == BOUNDED_ACQUISITION == {"n_points": 2000, "n_restarts_optimizer": 2}
    assert opt.params["n_restarts_optimizer"] == BOUNDED_GP_RESTARTS == 0
    assert opt.params["alpha"].tolist() == pytest.approx(
        gp_alpha([float(i % 5) for i in keep], [0.1 * (i + 1) for i in keep]).tolist())
    e.fit_limit = None  # the benchmark's "old GP": every observation, skopt's acquisition
    e.ask()
    assert len(recorder.made[-1].told[0]) == 8 and recorder.made[-1].kwargs["acq_optimizer_kwargs"] is None
    e.fit_limit = 8  # at the limit: still every observation
    e.ask()
    assert len(recorder.made[-1].told[0]) == 8 and "n_restarts_optimizer" not in recorder.made[-1].params


def test_tournament_selection():
    g = GeneticEngine(SPACE, population=3, tournament=5)
    pop = [({"x": 0.1, "n": 1, "c": "a"}, 0.5), ({"x": 0.2, "n": 1, "c": "a"}, 1.0), ({"x": 0.3, "n": 1, "c": "a"}, 1.0)]
    rng = np.random.default_rng(0)
    assert all(g._select(pop, rng) == pop[0][0] for _ in range(20))  # a tournament of everyone: the best wins
    g.tournament = 2
    picks = [g._select(pop, rng)["x"] for _ in range(300)]
    assert set(picks) == {0.1, 0.2}  # the worst never wins a tournament of two; ties go to the older
    g.tournament = 1
    assert {g._select(pop, rng)["x"] for _ in range(300)} == {0.1, 0.2, 0.3}


def test_crossover_blends_numbers_a_little_past_the_parents_and_picks_categories():
    line = Space([Real(0.0, 10.0, name="x"), Categorical(["a", "b"], name="c")])
    g = GeneticEngine(line)
    rng = np.random.default_rng(1)
    children = [g._cross({"x": 4.0, "c": "a"}, {"x": 6.0, "c": "b"}, rng) for _ in range(400)]
    xs = [c["x"] for c in children]
    assert min(xs) >= 4.0 - 0.5 and max(xs) <= 6.0 + 0.5  # BLX-0.25: a quarter of the gap beyond each parent
    assert min(xs) < 4.0 and max(xs) > 6.0 and any(4.0 < x < 6.0 for x in xs)
    assert {c["c"] for c in children} == {"a", "b"}


def test_breeding_uses_crossover_as_often_as_asked():
    def children(crossover):
        g = GeneticEngine(SPACE, seed=3, population=2, tournament=1, crossover=crossover, mutation=0.0, sigma=0.0)
        g.tell({"x": 0.0, "n": 1, "c": "a"}, 1.0)
        g.tell({"x": 1.0, "n": 3, "c": "b"}, 2.0)
        return [g.ask() for _ in range(30)]

    # without crossover a child is a parent with exactly one gene moved: never a blend of x
    assert all(c["x"] in (0.0, 1.0) for c in children(0.0))
    assert any(0.0 < c["x"] < 1.0 for c in children(1.0))
