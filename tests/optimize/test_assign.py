"""Assignment policies behind ``--assign``, without MPI: FIFO is the old hand-out, hardware-aware places (its
mechanisms are tested one by one in test_placement.py); the options and layout carry the new shape."""
from __future__ import annotations

import math

import numpy as np
import pytest

from nnlo.errors import ConfigError
from nnlo.optimize.assign import (
    MORE,
    WAIT,
    Candidate,
    Fifo,
    HardwareAware,
    Situation,
    default_subspace,
    make_policy,
    resolve,
)
from nnlo.optimize.engines import make_engine
from nnlo.optimize.options import SearchConfig
from nnlo.optimize.placement import BlockType
from nnlo.optimize.results import Objective
from nnlo.optimize.search import Search
from nnlo.optimize.space import Categorical, Real, Space
from nnlo.roles import Shape
from nnlo_sched.inner import parse_inner

SPACE = Space([Real(0.0, 1.0, name="x"), Categorical(["small", "big"], name="model")])
SPEEDS = [1.0, 2.0, 4.0]


def true_cost(p) -> float:
    return math.exp(2.0 * p["x"]) * (5.0 if p["model"] == "big" else 1.0)


def test_auto_is_hardware_aware_only_for_blocks_that_differ():
    assert resolve("auto", [2, 2, 2]) == "fifo" and resolve("auto", [6, 3]) == "hardware-aware"
    assert resolve("fifo", [6, 3]) == "fifo" and resolve("hardware-aware", [2, 2]) == "hardware-aware"
    gpu, cpu = BlockType(2, gpus=1.0, node="g"), BlockType(2, node="c")
    assert resolve("auto", [gpu, cpu]) == "hardware-aware" and resolve("auto", [cpu, cpu]) == "fifo"
    assert isinstance(make_policy("auto", SPACE, [4, 4]), Fifo)
    assert isinstance(make_policy("auto", SPACE, [4, 2]), HardwareAware)
    with pytest.raises(ValueError, match=r"^--assign 'fastest' is unknown; use one of auto, fifo, hardware-aware$"):
        resolve("fastest", [1])
    with pytest.raises(ConfigError, match="--assign 'fastest' is unknown"):
        SearchConfig(assign="fastest")


def test_fifo_takes_the_first_candidate_and_holds_one_proposal():
    fifo = Fifo()
    pool = [Candidate({"x": 0.9, "model": "big"}, age=99), Candidate({"x": 0.1, "model": "small"})]
    assert fifo.pool_size(100, 50) == 1 and fifo.choose(3, pool, Situation()) == 0 and not fifo.fits_deadline
    assert fifo.placeable({"x": 0.1}) is None and fifo.fits_type({"x": 0.1}, BlockType(1))


def run_search(policy, seed=0, n=40):
    """A serial stand-in for the coordinator: three blocks of speeds 1, 2, 4, each trial taking cost/speed."""
    search = Search(make_engine("random", SPACE, seed), Objective.parse("val_loss"), num_iterations=n,
                    out_dir="unused", blocks=3, assign=policy,  # never saved here
                    block_types=[BlockType(int(s)) for s in SPEEDS])
    clock, running = 0.0, {}
    for b in range(3):
        t = search.next_trial(b, clock)
        running[b] = (clock + true_cost(t.params) / SPEEDS[b], t.id)
    while running:
        b = min(running, key=lambda k: running[k][0])
        clock, tid = running.pop(b)
        search.record(tid, [{"metrics": {"val_loss": 1.0}}], b, now=clock)
        for free in range(3):
            if free not in running:
                t = search.next_trial(free, clock)
                if t is not None:
                    running[free] = (clock + true_cost(t.params) / SPEEDS[free], t.id)
    return search, clock


def test_in_a_small_batch_the_fast_block_runs_the_dearer_trials_and_the_batch_ends_sooner():
    """40 trials on 3 blocks of 1, 2 and 4 ranks: once 9 (3 x blocks) remain, the longest predicted go to the
    fastest block, and the batch ends sooner than FIFO's."""
    ha, ha_time = run_search(make_policy("hardware-aware", SPACE, [1, 2, 4]))
    _, fifo_time = run_search(Fifo())
    late = [t for t in ha.finished.values() if t.id >= 31]
    mean = {b: np.mean([true_cost(t.params) for t in late if t.block == b] or [0.0]) for b in range(3)}
    assert mean[2] > mean[0]
    assert ha_time < fifo_time
    assert len(ha.costs) == 40 and {o.block_type.ranks for o in ha.costs} <= {1, 2, 4}


def test_fifo_hands_out_exactly_the_engines_asks():
    """FIFO keeps the old behaviour: each trial is the engine's next ask with the running trials pending."""
    search, _ = run_search(Fifo(), seed=4, n=12)
    replay = make_engine("random", SPACE, 4)
    assert search.engine.n_asked == 12
    points = [t.params for t in sorted(search.finished.values(), key=lambda t: t.id)]
    for i, p in enumerate(points[:3]):  # the first three are asked back to back, each seeing the earlier ones
        assert replay.ask(points[:i]) == p


def test_a_block_the_policy_has_wait_gets_nothing_and_is_asked_again_once_something_changed():
    class Stubborn(Fifo):
        calls = 0

        def choose(self, block, candidates, situation):
            Stubborn.calls += 1
            return WAIT if block == 0 else 0

    search = Search(make_engine("random", SPACE, 1), Objective.parse("val_loss"), num_iterations=5,
                    out_dir="unused", blocks=2, assign=Stubborn())
    assert search.next_trial(0, 10.0) is None and Stubborn.calls == 1
    assert search.next_trial(0, 10.2) is None and Stubborn.calls == 1  # nothing changed: not asked again
    t = search.next_trial(1, 10.3)
    assert t is not None and t.block == 1 and Stubborn.calls == 2
    assert search.next_trial(0, 10.4) is None and Stubborn.calls == 3  # a hand-out changed the state
    assert search.next_trial(0, 11.5) is None and Stubborn.calls == 4  # and a second passed


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


# -- exact values: names, features, classes, the cost model, defaults --------------------------------------
def test_policy_names_and_the_auto_rule():
    assert resolve("fifo", [2, 4]) == "fifo" and resolve("hardware-aware", [2, 2]) == "hardware-aware"
    assert resolve("auto", [3]) == "fifo" and resolve("auto", [3, 3, 3]) == "fifo"
    assert resolve("auto", [3, 3, 2]) == "hardware-aware"
    assert resolve("auto", [BlockType(2, memory_gb=8.0), BlockType(2, memory_gb=16.0)]) == "hardware-aware"
    with pytest.raises(ValueError, match=r"^--assign 'fast' is unknown; use one of auto, fifo, hardware-aware$"):
        resolve("fast", [2])
    assert isinstance(make_policy("auto", SPACE, [2, 2]), Fifo)
    hw = make_policy("auto", SPACE, [2, 4])
    assert isinstance(hw, HardwareAware) and hw.name == "hardware-aware" and hw.fits_deadline
    assert list(hw.block_types) == [BlockType(2), BlockType(4)]
    fifo = Fifo()
    assert (fifo.name, fifo.pool_size(9), fifo.choose(3, [Candidate({}), Candidate({})], Situation()),
            fifo.choose(0, [], Situation())) == ("fifo", 1, 0, MORE)


def test_features_of_every_kind_of_value():
    from nnlo.optimize.assign import features
    from nnlo.optimize.space import Integer

    space = Space([Real(0.0, 4.0, name="x"), Integer(1, 5, name="n"), Categorical(["a", "b", "c"], name="c")])
    assert features(space, {"x": 1.0, "n": 5, "c": "b"}) == [0.25, 0.0625, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0]
    assert features(space, {"c": "z"}) == [0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]  # inactive: 0s and a flag
    assert features(space, {"x": "fast", "n": None}) == [0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]
    assert features(space, None) == [0.0] * 9  # no point at all: no flags either


def test_classes_from_the_space():
    tree = Space([Categorical(["mlp", "cnn"], name="model", branches={"cnn": [
        Categorical(["max", "avg"], name="pool", branches={"max": [Real(1.0, 2.0, name="size")]})]}),
        Real(0.0, 1.0, name="x")])
    assert default_subspace(tree)({"model": "cnn", "pool": "max", "size": 1.5, "x": 0.1}) == "model=cnn"
    assert default_subspace(SPACE)({"x": 0.3, "model": "big"}) == ""  # no branches: one class


def test_cost_model_before_and_after_fitting():
    from nnlo.optimize.placement import CostModel, CostObservation, Traits

    model = CostModel(SPACE)
    one, four, p = BlockType(1), BlockType(4), {"x": 0.5, "model": "big"}
    assert (model.n, model.ready, model.ridge, model.sigma, model.classes) == (0, False, 0.1, 0.5, [])
    assert model.seconds(p, Traits(), four) == pytest.approx(0.25) and model.seconds(p, Traits(), one) == 1.0
    assert model.seconds(p, Traits("", 3.0), one, work=0.5) == pytest.approx(1.5)  # size and work scale it
    not_ok = [CostObservation(0, "", 1.0, one, 0.0), CostObservation(1, "", 1.0, one, 5.0, "failed"),
              CostObservation(2, "", 1.0, one, 5.0, "oom")]
    fitted = model.fit([(o, p) for o in not_ok])
    assert fitted is model and model.n == 0 and not model.ready  # nothing that finished well: nothing learnt
    small = {"x": 0.0, "model": "small"}
    model.fit([(CostObservation(i, "", 1.0, t, d), small) for i, (t, d) in
               enumerate(((one, 8.0), (four, 2.0), (one, 8.0), (four, 2.0)))])
    assert model.n == 4 and model.ready and model.classes == [""]
    assert model.seconds(small, Traits(), one) == pytest.approx(8.0, rel=0.05)
    assert model.seconds(small, Traits(), four) == pytest.approx(2.0, rel=0.05)  # 4 times faster, as timed
    assert model.upper(small, Traits(), one) > model.seconds(small, Traits(), one)


def test_hardware_aware_defaults():
    import math

    hw = HardwareAware(SPACE, [2, 4, 8])
    pl = hw.placement
    assert (pl.tail_factor, pl.tie, pl.more_when, pl.z, pl.cheaper) == (3.0, math.log(1.25), math.log(2.0), 2.0,
                                                                        True)
    assert (pl.pool_max, pl.max_age) == (8, 6)  # 2 x (blocks + 1), 2 x blocks
    assert [hw.pool_size(3, n) for n in (None, 1, 9, 10, 100)] == [4, 1, 9, 4, 4]  # the tail pools all of it
    assert HardwareAware(SPACE, [1] * 20).pool_size(20, None) == 9  # at most 9
    assert hw.job({"x": 0.5, "model": "big"}, 3, 0.5).checkpoint == 1.0 and hw.job({}, 0, 1.0).age == 0


def test_fifo_re_runs_restored_trials_before_it_asks_the_engine_again(tmp_path):
    search = Search(make_engine("random", SPACE, 2), Objective.parse("val_loss"), num_iterations=6, out_dir=tmp_path,
                    blocks=2)
    first, second = search.next_trial(0, 0.0), search.next_trial(1, 0.0)
    search.save()  # killed with both running
    again = Search(make_engine("random", SPACE, 2), Objective.parse("val_loss"), num_iterations=6, out_dir=tmp_path,
                   blocks=2)
    assert again.restore() and again.engine.n_asked == 2
    assert again.next_trial(1, 5.0).id == first.id and again.next_trial(0, 5.0).id == second.id
    assert again.engine.n_asked == 2 and not again.pool  # no new proposal before the re-runs went out
