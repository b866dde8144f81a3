"""Assignment policies and the cost model, without MPI: FIFO is the old hand-out, hardware-aware gives
expensive points to fast blocks and cheap ones to slow blocks; the options and layout carry the new shape."""
from __future__ import annotations

import math

import numpy as np
import pytest

from nnlo.errors import ConfigError
from nnlo.optimize.assign import (
    Candidate,
    CostModel,
    Fifo,
    HardwareAware,
    Observation,
    default_subspace,
    make_policy,
    priorities,
    resolve,
)
from nnlo.optimize.engines import make_engine
from nnlo.optimize.options import SearchConfig
from nnlo.optimize.results import Objective
from nnlo.optimize.search import Search
from nnlo.optimize.space import Categorical, Real, Space
from nnlo.roles import Shape
from nnlo_sched.inner import parse_inner

SPACE = Space([Real(0.0, 1.0, name="x"), Categorical(["small", "big"], name="model")])
SPEEDS = [1.0, 2.0, 4.0]


def true_cost(p) -> float:
    return math.exp(2.0 * p["x"]) * (5.0 if p["model"] == "big" else 1.0)


def observations(n: int, seed: int = 0, noise: float = 0.05) -> list[Observation]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        p = SPACE.sample(rng)
        b = i % len(SPEEDS)
        out.append(Observation(p, b, true_cost(p) / SPEEDS[b] * math.exp(noise * rng.standard_normal()),
                               value=float(p["x"])))
    return out


def test_auto_is_hardware_aware_only_for_blocks_of_different_sizes():
    assert resolve("auto", [2, 2, 2]) == "fifo" and resolve("auto", [6, 3]) == "hardware-aware"
    assert resolve("fifo", [6, 3]) == "fifo" and resolve("hardware-aware", [2, 2]) == "hardware-aware"
    assert isinstance(make_policy("auto", SPACE, [4, 4]), Fifo)
    assert isinstance(make_policy("auto", SPACE, [4, 2]), HardwareAware)
    with pytest.raises(ValueError, match="fifo"):
        resolve("fastest", [1])
    with pytest.raises(ConfigError, match="--assign 'fastest' is unknown"):
        SearchConfig(assign="fastest")


def test_the_cost_model_learns_block_speeds_and_trial_costs():
    model = CostModel(SPACE, prior_speed=[1, 1, 1]).fit(observations(60))
    speeds = [model.speed(b) for b in range(3)]
    assert speeds[1] / speeds[0] == pytest.approx(2.0, rel=0.15)
    assert speeds[2] / speeds[0] == pytest.approx(4.0, rel=0.15)
    for p in ({"x": 0.1, "model": "small"}, {"x": 0.9, "model": "big"}, {"x": 0.5, "model": "big"}):
        ratio = model.cost(p) / model.cost({"x": 0.1, "model": "small"})
        assert ratio == pytest.approx(true_cost(p) / true_cost({"x": 0.1, "model": "small"}), rel=0.2)


def test_before_any_trial_the_speeds_follow_the_block_sizes():
    model = CostModel(SPACE, prior_speed=[6, 3]).fit([])
    assert model.speed(0) / model.speed(1) == pytest.approx(2.0)


def test_hardware_aware_gives_expensive_points_to_fast_blocks_and_cheap_ones_to_slow_blocks():
    policy = HardwareAware(SPACE, [1, 1, 1])
    policy.learn(observations(30))
    cheap, mid, dear = ({"x": 0.05, "model": "small"}, {"x": 0.5, "model": "small"}, {"x": 0.95, "model": "big"})
    pool = [Candidate(mid), Candidate(dear), Candidate(cheap)]
    assert policy.choose(2, pool) == 1  # the fastest block (4x) takes the dearest point
    assert policy.choose(0, pool) == 2  # the slowest (1x) the cheapest
    assert policy.choose(1, pool) == 0
    assert policy.block_quantile(0) == 0.0 and policy.block_quantile(2) == 1.0


def test_hardware_aware_is_fifo_until_it_has_seen_trials_and_drops_stale_points():
    policy = HardwareAware(SPACE, [1, 2], min_observations=4, pool=3)
    policy.learn(observations(2))
    pool = [Candidate({"x": 0.9, "model": "big"}, age=99), Candidate({"x": 0.1, "model": "small"})]
    assert policy.choose(0, pool) == 0 and policy.expired(pool) == []
    policy.learn(observations(12))
    assert policy.expired(pool) == [0]
    fifo = Fifo()
    assert fifo.pool_size(100) == 1 and fifo.choose(3, pool) == 0 and fifo.expired(pool) == []


def test_subspace_priorities_favour_the_better_and_more_uncertain_subspace():
    obs = [Observation({"model": "big"}, 0, 1.0, v) for v in (0.1, 0.5, 0.9)]
    obs += [Observation({"model": "small"}, 0, 1.0, v) for v in (0.6, 0.61, 0.62)]
    prio = priorities(obs, lambda p: p["model"])
    assert prio["big"] == pytest.approx(1.0) and prio["small"] < 0.1
    assert priorities(obs, lambda p: "") == {"": 1.0}


def test_the_subspaces_of_a_tree_space_are_its_top_level_choices():
    from types import SimpleNamespace as D

    inner = D(name="act", branches=((("relu",), ()),))
    tree = [D(name="model", branches=(("cnn", (D(name="filters"), inner)), ("mlp", (D(name="units"),)))),
            inner, D(name="filters"), D(name="units"), D(name="lr")]
    sub = default_subspace(tree)
    assert sub({"model": "cnn", "filters": 8, "act": "relu", "lr": 0.1}) == "model=cnn"
    assert sub({"model": "mlp", "units": 8, "lr": 0.1}) == "model=mlp"
    assert default_subspace(SPACE)({"x": 0.5, "model": "big"}) == ""  # a flat space is one subspace


def run_search(policy, seed=0, n=40):
    """A serial stand-in for the coordinator: three blocks of speeds 1, 2, 4, each trial taking cost/speed."""
    search = Search(make_engine("random", SPACE, seed), Objective.parse("val_loss"), num_iterations=n,
                    out_dir="unused")  # never saved here
    search.blocks, search.assign = 3, policy
    clock, running = 0.0, {}
    for b in range(3):
        t = search.next_trial(b, clock)
        running[b] = (clock + true_cost(t.params) / SPEEDS[b], t.id)
    while running:
        b = min(running, key=lambda k: running[k][0])
        clock, tid = running.pop(b)
        search.record(tid, [{"metrics": {"val_loss": 1.0}}], b, now=clock)
        t = search.next_trial(b, clock)
        if t is not None:
            running[b] = (clock + true_cost(t.params) / SPEEDS[b], t.id)
    return search, clock


def test_in_a_search_the_fast_block_runs_the_dearer_trials_and_finishes_sooner():
    ha, ha_time = run_search(HardwareAware(SPACE, [1, 1, 1]))
    fifo, fifo_time = run_search(Fifo())
    late = [t for t in ha.finished.values() if t.id >= 10]
    mean = {b: np.mean([true_cost(t.params) for t in late if t.block == b]) for b in range(3)}
    assert mean[2] > mean[1] > mean[0]
    assert ha_time < fifo_time


def test_fifo_hands_out_exactly_the_engines_asks():
    """FIFO keeps the old behaviour: each trial is the engine's next ask with the running trials pending."""
    search, _ = run_search(Fifo(), seed=4, n=12)
    replay = make_engine("random", SPACE, 4)
    assert search.engine.n_asked == 12
    points = [t.params for t in sorted(search.finished.values(), key=lambda t: t.id)]
    for i, p in enumerate(points[:3]):  # the first three are asked back to back, each seeing the earlier ones
        assert replay.ask(points[:i]) == p


def test_options_and_the_inner_parser_carry_heterogeneous_blocks_and_proposers():
    inner = parse_inner("optimize", ["--model", "m.py", "--block-sizes", "4, 2", "--proposers", "2",
                                     "--assign", "fifo"])
    assert inner.shape == Shape(block_sizes=(4, 2), proposers=2, block_size=None)
    assert inner.search is not None and inner.search.assign == "fifo"
    again = SearchConfig.from_dict(inner.search.to_dict())  # as read back from spec.json (a list)
    assert again == inner.search and again.block_sizes == (4, 2)
    with pytest.raises(ConfigError, match="exclude each other"):
        parse_inner("optimize", ["--model", "m.py", "--block-sizes", "4,2", "--block-size", "2"])
    with pytest.raises(ConfigError, match="use e.g. 6,6,3,3"):
        parse_inner("optimize", ["--model", "m.py", "--block-sizes", "4;2"])


# -- exact values: names, features, priorities, quantiles, defaults ----------------------------------------
def test_policy_names_and_the_auto_rule():
    assert resolve("fifo", [2, 4]) == "fifo" and resolve("hardware-aware", [2, 2]) == "hardware-aware"
    assert resolve("auto", [3]) == "fifo" and resolve("auto", [3, 3, 3]) == "fifo"
    assert resolve("auto", [3, 3, 2]) == "hardware-aware"
    with pytest.raises(ValueError, match=r"^--assign 'fast' is unknown; use one of auto, fifo, hardware-aware$"):
        resolve("fast", [2])
    assert isinstance(make_policy("auto", SPACE, [2, 2]), Fifo)
    hw = make_policy("auto", SPACE, [2, 4])
    assert isinstance(hw, HardwareAware) and hw.name == "hardware-aware" and list(hw.block_sizes) == [2, 4]
    fifo = Fifo()
    assert (fifo.name, fifo.pool_size(9), fifo.choose(3, [Candidate({}), Candidate({})]), fifo.expired(
        [Candidate({}, age=99)])) == ("fifo", 1, 0, [])


def test_features_of_every_kind_of_value():
    from nnlo.optimize.assign import features
    from nnlo.optimize.space import Integer

    space = Space([Real(0.0, 4.0, name="x"), Integer(1, 5, name="n"), Categorical(["a", "b", "c"], name="c")])
    assert features(space, {"x": 1.0, "n": 5, "c": "b"}) == [0.25, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0]
    assert features(space, {"c": "z"}) == [0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0]  # inactive: 0 and a flag
    assert features(space, {"x": "fast", "n": None}) == [0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0]  # unreadable: same


def test_subspaces_from_the_space():
    class WithSubspace(list):
        def subspace(self, p):
            return ("tall" if p["x"] > 0.5 else "short", 1)

    assert default_subspace(WithSubspace(SPACE))({"x": 0.9}) == "('tall', 1)"
    assert default_subspace(SPACE)({"x": 0.3, "model": "big"}) == ""  # no branches: one subspace


def test_priorities_rank_half_by_best_value_and_half_by_spread():
    def obs(sub, value):
        return Observation({"s": sub}, 0, 1.0, value)

    def by(p):
        return p["s"]

    got = priorities([obs("a", 1.0), obs("a", 3.0), obs("b", 2.0), obs("b", 2.0), obs("c", 5.0), obs("c", 9.0),
                      obs("b", None), obs("b", float("nan")), obs("b", float("-inf"))], by)
    # best values a 1 < b 2 < c 5: ranks 1, 0.5, 0; spreads (std) 1, 0, 2 of the widest 2
    assert got == {"a": 0.5 * 1 + 0.5 * 0.5, "b": 0.5 * 0.5 + 0.0, "c": 0.0 + 0.5 * 1}
    assert priorities([obs("a", 1.0), obs("b", 2.0)], by) == {"a": 0.5, "b": 0.0}  # no spread anywhere
    assert priorities([obs("a", 1.0), obs("a", 7.0)], by) == {"a": 1.0}
    assert priorities([obs("a", None)], by) == {} and priorities([], by) == {}


def test_cost_model_before_and_after_fitting():
    model = CostModel(SPACE, [1.0, 4.0])
    assert model.prior_log.tolist() == pytest.approx([math.log(0.5), math.log(2.0)])
    assert model.speed(0) == pytest.approx(0.5) and model.speed(1) == pytest.approx(2.0)
    assert model.cost({"x": 0.5, "model": "big"}) == 1.0 and model.n == 0 and model.ridge == 0.1
    fitted = model.fit([Observation({"x": 0.5, "model": "big"}, 0, 0.0), Observation({"x": 0.5, "model": "big"}, 5,
                                                                                     1.0),
                        Observation({"x": 0.5, "model": "big"}, -1, 1.0)])
    assert fitted is model and model.n == 0 and model.w is None  # no duration, no such block: nothing learnt
    model.fit([Observation({"x": 0.0, "model": "small"}, b, d) for b, d in ((0, 8.0), (1, 2.0), (0, 8.0), (1, 2.0))])
    assert model.n == 4 and model.w is not None
    assert model.speed(1) / model.speed(0) == pytest.approx(4.0, rel=0.05)  # 4 times faster, as timed
    assert math.exp(float(np.mean(model.log_speed))) == pytest.approx(1.0)  # relative speeds: geometric mean 1
    assert model.cost({"x": 0.0, "model": "small"}) == pytest.approx(8.0 * model.speed(0), rel=0.05)


def test_hardware_aware_defaults_and_quantiles():
    hw = HardwareAware(SPACE, [2, 4, 8])
    assert (hw.min_observations, hw.pool, hw.max_age, hw.priority_weight) == (4, 4, None, 0.15)
    assert [hw.pool_size(n) for n in (0, 1, 2, 3, 10)] == [1, 2, 3, 4, 4]
    assert [hw.block_quantile(b) for b in range(3)] == [0.0, 0.5, 1.0]
    assert HardwareAware(SPACE, [3, 3]).block_quantile(1) == 0.5 and HardwareAware(SPACE, [3]).block_quantile(0) == 0
    assert hw.cost_quantile({"x": 0.5, "model": "big"}) == 0.5  # nothing to compare with
    assert hw.cost_quantile({"x": 0.5, "model": "big"}, [-1.0, 0.0, 1.0, 2.0]) == (1 + 0.5) / 4
    old = [Candidate({"x": 0.1, "model": "small"}, age=a) for a in (0, 8, 9, 30)]
    assert not hw.ready and hw.expired(old) == [] and hw.choose(0, old) == 0
    hw.learn(observations(4))
    assert hw.ready and hw.expired(old) == [2, 3]  # older than 2 x pool hand-outs
    hw.max_age = 0
    assert hw.expired(old) == [1, 2, 3]
    assert hw.choose(2, old[:1]) == 0  # one candidate: nothing to choose
