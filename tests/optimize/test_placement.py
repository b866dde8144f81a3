"""Hardware-aware placement, mechanism by mechanism, without MPI or a clock: block types, trial traits, the cost
model per (class, block type), memory feasibility, walltime fit, the tail, the steady-state choice; and how the
search uses them (out-of-memory re-runs, cost observations kept and restored, a rank the OOM killer took)."""
from __future__ import annotations

import errno
import json
import math
import signal
from types import SimpleNamespace

import numpy as np
import pytest

from nnlo.errors import ConfigError, ModelError
from nnlo.optimize.assign import HardwareAware, make_policy
from nnlo.optimize.engines import make_engine
from nnlo.optimize.placement import (
    MORE,
    WAIT,
    BlockType,
    Busy,
    CostModel,
    CostObservation,
    Job,
    MemoryModel,
    Moment,
    Placement,
    RankFacts,
    Traits,
    TraitsOf,
    block_types,
    is_out_of_memory,
)
from nnlo.optimize.results import Objective
from nnlo.optimize.search import Search
from nnlo.optimize.space import Categorical, Integer, Real, Space

GPU = BlockType(2, gpus=1.0, memory_gb=40.0, node="gpu")
CPU = BlockType(2, memory_gb=64.0, node="cpu")
SMALL, BIG = BlockType(1, memory_gb=8.0, node="n"), BlockType(2, memory_gb=32.0, node="n")
TREE = Space([Categorical(["conv", "mlp"], name="model", branches={"conv": [Integer(8, 64, name="filters")],
                                                                   "mlp": [Integer(16, 256, name="width")]}),
              Real(0.0, 1.0, name="epochs")])


def typed_seconds(p, t: BlockType) -> float:
    """conv runs 10x faster on GPU blocks, mlp alike everywhere; epochs double the cost."""
    return (1.0 + p["epochs"]) * (10.0 if p["model"] == "conv" and not t.gpus else 1.0)


def typed_observations(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    traits = TraitsOf(TREE)
    out = []
    for i in range(n):
        p = TREE.sample(rng)
        t = (GPU, CPU)[i % 2]
        tr = traits(p)
        out.append((CostObservation(i, tr.cls, 1.0, t, typed_seconds(p, t) * math.exp(0.02 * rng.standard_normal())),
                    p))
    return out


# -- block types -------------------------------------------------------------------------------------------
def test_block_types_come_from_the_ranks_hardware():
    def facts(host, gpus, needs, node="epyc", gpu_mem=None):
        return RankFacts(host, node, gpus, gpu_mem, 256.0, needs)

    world = [facts("a", 0, False),  # the coordinator
             facts("a", 4, False), facts("a", 4, True, "epyc + A100", 80.0), facts("a", 4, True, "epyc + A100", 80.0),
             facts("b", 0, False), facts("b", 0, True), facts("b", 0, True), facts("b", 0, True)]
    gpu, cpu = block_types([(1, 2, 3), (4, 5, 6, 7)], world)
    assert gpu == BlockType(3, gpus=2.0, memory_gb=80.0, node="epyc + A100")  # 4 GPUs shared by 2 workers
    assert cpu == BlockType(4, gpus=0.0, memory_gb=64.0, node="epyc")  # 256 GiB over the node's 4 ranks
    assert gpu.key == "3 ranks, 2 GPU/rank, 80 GiB/rank, epyc + A100" and str(cpu) == "4 ranks, 64 GiB/rank, epyc"
    assert BlockType.from_dict(json.loads(json.dumps(gpu.to_dict()))) == gpu
    for bad in ({"ranks": 0}, {"ranks": 2, "gpus": -1}, {"ranks": 2, "memory_gb": 0}, {"gpus": 1}):
        with pytest.raises((ValueError, KeyError)):
            BlockType.from_dict(bad)


def test_no_larger_than_compares_every_resource():
    assert SMALL.no_larger_than(BIG) and not BIG.no_larger_than(SMALL) and SMALL.no_larger_than(SMALL)
    assert not BlockType(1, 1.0, 80.0).no_larger_than(BlockType(4, 0.0, 80.0))  # more GPUs
    assert not BlockType(1, memory_gb=64.0).no_larger_than(BlockType(2, memory_gb=32.0))  # more memory per rank
    assert BlockType(1, node="x").no_larger_than(BlockType(2, node="x"))  # memory unknown: same node type compares
    assert not BlockType(1, node="x").no_larger_than(BlockType(2, node="y"))


# -- traits ------------------------------------------------------------------------------------------------
def test_a_trial_class_comes_from_the_model_module_else_the_tree_spaces_top_level_choice():
    assert TraitsOf(TREE)({"model": "conv", "filters": 8, "epochs": 0.5}) == Traits("model=conv", 1.0, None)
    flat = Space([Real(0.0, 1.0, name="epochs")])
    assert TraitsOf(flat)({"epochs": 0.5}) == Traits("", 1.0, None)
    module = SimpleNamespace(trial_class=lambda p: "big" if p["epochs"] > 0.5 else "small",
                             trial_size=lambda p: 1 + 9 * p["epochs"], trial_memory=lambda p: None)
    traits = TraitsOf(TREE, module, where="m.py")
    assert traits.declared == ("trial_class", "trial_size", "trial_memory")
    assert traits({"model": "mlp", "width": 16, "epochs": 1.0}) == Traits("big", 10.0, None)


@pytest.mark.parametrize(("hook", "value", "message"), [
    ("trial_class", [1], r"^trial_class\(\{'epochs': 0.5\}\) in m.py returned \[1\]: return a short string"),
    ("trial_size", 0, r"^trial_size\(\{'epochs': 0.5\}\) in m.py returned 0: return a positive finite number"),
    ("trial_memory", math.nan, r"^trial_memory\(\{'epochs': 0.5\}\) in m.py returned nan: return a positive"),
    ("trial_size", True, r"returned True: return a positive finite number"),
])
def test_a_hook_that_answers_wrongly_is_one_line_naming_it(hook, value, message):
    traits = TraitsOf(Space([Real(0.0, 1.0, name="epochs")]), SimpleNamespace(**{hook: lambda p: value}), "m.py")
    with pytest.raises(ModelError, match=message):
        traits({"epochs": 0.5})


def test_a_hook_that_raises_is_one_line_naming_it():
    def trial_size(p):
        raise KeyError("width")

    traits = TraitsOf(Space([Real(0.0, 1.0, name="epochs")]), SimpleNamespace(trial_size=trial_size), "m.py")
    with pytest.raises(ModelError, match=r"^trial_size\(\{'epochs': 0.5\}\) in m.py raised KeyError: 'width'; "
                                         r"fix trial_size\(\) or remove it$"):
        traits({"epochs": 0.5})


# -- the cost model ----------------------------------------------------------------------------------------
def test_the_cost_model_learns_a_speed_per_class_and_block_type():
    """The old model had one speed per block for every trial; this one tells a class that gains 10x on GPU
    blocks from one that does not."""
    model = CostModel(TREE).fit(typed_observations(60))
    conv, mlp = Traits("model=conv"), Traits("model=mlp")
    p = {"epochs": 0.5}
    assert model.seconds(p, conv, CPU) / model.seconds(p, conv, GPU) == pytest.approx(10.0, rel=0.15)
    assert model.seconds(p, mlp, CPU) / model.seconds(p, mlp, GPU) == pytest.approx(1.0, rel=0.15)
    assert model.seconds({"epochs": 1.0}, mlp, GPU) / model.seconds({"epochs": 0.0}, mlp, GPU) == pytest.approx(
        2.0, rel=0.15)
    assert model.ready and model.classes == ["model=conv", "model=mlp"] and model.sigma < 0.1
    true = typed_seconds({"model": "conv", "epochs": 0.5}, CPU)
    assert model.seconds(p, conv, CPU) < true * 1.2 < model.upper(p, conv, CPU) * 1.2


def test_before_anything_ran_costs_follow_size_hints_and_rank_counts():
    model = CostModel(TREE)
    assert not model.ready and model.classes == []
    small, large = Traits("", size=1.0), Traits("", size=8.0)
    assert model.seconds(None, large, BlockType(1)) / model.seconds(None, small, BlockType(1)) == pytest.approx(8.0)
    assert model.seconds(None, small, BlockType(1)) / model.seconds(None, small, BlockType(4)) == pytest.approx(4.0)
    assert model.upper(None, small, BlockType(1)) > model.seconds(None, small, BlockType(1)) * math.exp(1.0)


def test_a_type_or_class_never_seen_is_predicted_from_what_was_and_with_a_wider_margin():
    model = CostModel(TREE).fit(typed_observations(40))
    p, mlp = {"epochs": 0.5}, Traits("model=mlp")
    new_type = BlockType(4, memory_gb=64.0, node="cpu")  # like CPU with twice the ranks
    assert model.seconds(p, mlp, new_type) == pytest.approx(model.seconds(p, mlp, CPU) / 2, rel=0.3)
    seen_margin = model.upper(p, mlp, CPU) / model.seconds(p, mlp, CPU)
    assert model.upper(p, Traits("rnn"), CPU) / model.seconds(p, Traits("rnn"), CPU) > seen_margin * 2


def test_cost_observations_round_trip_and_malformed_ones_are_refused():
    obs = CostObservation(7, "conv", 2.0, GPU, 12.5, "oom", 0.5, 30.0)
    assert CostObservation.from_record(json.loads(json.dumps(obs.to_record()))) == obs
    assert "memory_gb" not in CostObservation(1, "", 1.0, CPU, 1.0).to_record()
    for bad in ({"outcome": "lost"}, {"seconds": -1}, {"size": 0}, {"seconds": math.inf}, {"type": {"ranks": 0}}):
        with pytest.raises((ValueError, KeyError, TypeError)):
            CostObservation.from_record({**obs.to_record(), **bad})


# -- memory ------------------------------------------------------------------------------------------------
def test_out_of_memory_is_recognised_in_exceptions_and_in_failed_folds_messages():
    class OutOfMemoryError(RuntimeError):  # torch.cuda.OutOfMemoryError's name
        pass

    assert is_out_of_memory(MemoryError()) and is_out_of_memory(OutOfMemoryError("CUDA out of memory"))
    assert is_out_of_memory(OSError(errno.ENOMEM, "Cannot allocate memory"))
    assert is_out_of_memory("rank 3 (worker): MemoryError: Unable to allocate 8.00 GiB")
    assert is_out_of_memory("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB")
    assert is_out_of_memory("ResourceExhaustedError: OOM when allocating tensor")
    assert not is_out_of_memory(ValueError("bad shape")) and not is_out_of_memory("x1 is nan (diverged)")
    assert not is_out_of_memory(None)


def test_out_of_memory_on_a_type_rules_out_that_type_and_smaller_ones_for_the_class_at_least_as_large():
    memory = MemoryModel().learn([CostObservation(1, "large", 4.0, SMALL, 3.0, "oom")])
    assert not memory.fits(Traits("large", 4.0), SMALL) and not memory.fits(Traits("large", 9.0), SMALL)
    assert memory.fits(Traits("large", 2.0), SMALL)  # a smaller trial of the class may fit
    assert memory.fits(Traits("large", 9.0), BIG) and memory.fits(Traits("small", 9.0), SMALL)
    tiny = BlockType(1, memory_gb=4.0, node="n")
    assert not memory.fits(Traits("large", 4.0), tiny)  # a type no larger
    assert memory.why_not(Traits("large", 4.0), tiny) == ("class 'large' at least as large ran out of memory on "
                                                          "blocks of 1 rank, 8 GiB/rank, n")


def test_a_declared_memory_need_skips_smaller_types_before_anything_runs():
    memory = MemoryModel()
    need = Traits("", 1.0, memory_gb=16.0)
    assert not memory.fits(need, SMALL) and memory.fits(need, BIG) and memory.fits(need, BlockType(1))
    assert memory.why_not(need, SMALL) == "it needs 16 GiB per rank (trial_memory), blocks of 1 rank, 8 GiB/rank, n " \
                                          "have 8"


def test_a_class_that_ran_out_of_memory_is_probed_one_job_at_a_time_on_types_where_it_is_unproven():
    placement = Placement([BIG, BIG, SMALL], CostModel(TREE))
    job = Job({"epochs": 0.5}, Traits("large", 1.0))
    running = Moment(0.2, (1,), (Busy(0, job, 0.0),))  # predicted to take 0.5 (1 / 2 ranks): not past it yet
    assert not placement.probing(job, 1, running)  # nothing ran out of memory: no class is held back
    placement.memory.learn([CostObservation(1, "large", 1.0, SMALL, 0.1, "oom")])
    assert placement.probing(job, 1, running)  # one unproven 'large' runs on a BIG block already
    assert placement.choose(1, [job], running) in (WAIT, MORE)
    placement.memory.learn([CostObservation(1, "large", 1.0, SMALL, 0.1, "oom"),
                            CostObservation(2, "large", 1.0, BIG, 2.0, "ok")])
    assert not placement.probing(job, 1, running) and placement.choose(1, [job], running) == 0


# -- the choice --------------------------------------------------------------------------------------------
def typed_placement(**options) -> Placement:
    return Placement([GPU, GPU, CPU, CPU], CostModel(TREE).fit(typed_observations(60)), **options)


def test_a_block_takes_the_job_it_runs_relatively_fastest_and_asks_for_more_rather_than_waste_itself():
    placement = typed_placement()
    conv = Job({"model": "conv", "filters": 8, "epochs": 0.5}, Traits("model=conv"))
    mlp = Job({"model": "mlp", "width": 16, "epochs": 0.5}, Traits("model=mlp"))
    now = Moment(1.0, (0, 1, 2, 3))
    assert placement.choose(0, [mlp, conv], now) == 1  # the GPU block takes the conv, though it came second
    assert placement.choose(2, [mlp, conv], now) == 0  # the CPU block the mlp
    assert placement.choose(2, [conv], now) == MORE  # a CPU block leaves a conv to the GPU blocks ...
    assert placement.choose(0, [mlp], now) == MORE  # ... and a GPU block the mlp to the CPU blocks
    full = [conv] * placement.pool_max
    assert placement.choose(2, full, now) == WAIT  # pool full: wait for a proposal that suits it
    assert placement.choose(0, [mlp] * placement.pool_max, now) == 0  # an mlp runs as well on a GPU: take it


def test_where_speed_does_not_depend_on_the_class_the_choice_is_fifo():
    obs = [(CostObservation(i, "", 1.0, t, 8.0 / t.ranks), {"epochs": 0.5}) for i, t in
           enumerate([BlockType(1), BlockType(4)] * 5)]
    placement = Placement([BlockType(1), BlockType(4)], CostModel(TREE).fit(obs))
    jobs = [Job({"model": "mlp", "width": 16, "epochs": e}) for e in (0.1, 0.9, 0.5)]
    assert placement.choose(0, jobs, Moment(0.0, (0, 1))) == 0 and placement.choose(1, jobs, Moment(0.0, (0, 1))) == 0
    # one type: always the oldest
    assert Placement([CPU, CPU], CostModel(TREE)).choose(0, jobs, Moment(0.0)) == 0


def test_old_jobs_go_to_the_next_block_they_are_not_markedly_slower_on():
    placement = typed_placement(max_age=3)
    conv = Job({"model": "conv", "filters": 8, "epochs": 0.5}, Traits("model=conv"), age=5)
    mlp = Job({"model": "mlp", "width": 16, "epochs": 0.5}, Traits("model=mlp"), age=5)
    fresh_conv = Job({"model": "conv", "filters": 8, "epochs": 0.5}, Traits("model=conv"))
    assert placement.choose(0, [fresh_conv, mlp], Moment(0.0)) == 1  # old enough: the GPU takes the mlp now
    assert placement.choose(2, [conv, mlp], Moment(0.0)) == 1  # never a conv forced onto a CPU block


def test_walltime_fit_a_job_that_cannot_reach_its_first_checkpoint_is_not_started():
    model = CostModel(TREE).fit(typed_observations(60))
    cheaper, end = Placement([GPU, CPU], model, cheaper=True), Placement([GPU, CPU], model, cheaper=False)
    long = Job({"model": "mlp", "width": 16, "epochs": 1.0}, Traits("model=mlp"))  # ~2 s
    short = Job({"model": "mlp", "width": 16, "epochs": 0.0}, Traits("model=mlp"))  # ~1 s
    at = Moment(100.0, (1,), deadline=101.6)
    assert cheaper.choose(1, [long, short], at) == 1  # a cheaper one that fits
    assert cheaper.choose(1, [long], at) == MORE and end.choose(1, [long], at) == WAIT  # look on, or end early
    assert cheaper.choose(1, [long], Moment(100.0, (1,), deadline=103.0)) == 0
    halfway = Job(long.params, long.traits, checkpoint=0.5)  # a checkpoint after half of it: that is what counts
    assert end.choose(1, [halfway], at) == 0
    assert not model.ready or end.fits(long, 1, 100.0, 101.0) is False
    assert Placement([CPU], CostModel(TREE)).fits(long, 0, 100.0, 100.1)  # nothing known yet: nothing ruled out


def test_the_tail_gives_the_longest_predicted_to_the_fastest_blocks_and_lets_a_slow_block_wait():
    types = [BlockType(1), BlockType(4)]
    placement = Placement(types, CostModel(TREE))  # the size hints alone: nothing ran yet
    jobs = [Job({"epochs": 0.5}, Traits("", size)) for size in (1.0, 8.0, 2.0)]
    idle = Moment(0.0, (0, 1), remaining=3)
    assert placement.in_tail(3) and placement.pool_size(3) == 3 and placement.pool_size(None) == 3
    assert placement.choose(1, jobs, idle) == 1  # the 4x block takes the 8
    # plan: 8 -> 4x (ends at 2), 2 -> 4x (ends at 2.5, the 1x would end at 2), so the 1x block takes the 2
    assert placement.choose(0, jobs, idle) == 2
    busy = Moment(0.0, (0,), (Busy(1, jobs[1], 0.0),), remaining=2)
    assert placement.choose(0, [jobs[0], jobs[2]], busy) == 1  # the 1x block takes the 2 (ends at 2 < 2.5)
    lone = Moment(0.0, (0,), (Busy(1, Job({"epochs": 0.5}, Traits("", 1.0)), 0.0),), remaining=1)
    assert placement.choose(0, [jobs[1]], lone) == WAIT  # the 8 ends at 2.25 on the busy 4x, at 8 here: wait
    assert placement.choose(1, [jobs[1]], Moment(0.25, (1,), remaining=1)) == 0


# -- in the search ---------------------------------------------------------------------------------------
SPACE = Space([Categorical(["small", "large"], name="model"), Real(0.0, 1.0, name="epochs")])


def two_type_search(tmp_path, policy_name="hardware-aware", n=6, module=None) -> Search:
    traits_of = TraitsOf(SPACE, module or SimpleNamespace(trial_class=lambda p: p["model"]))
    return Search(make_engine("random", SPACE, 0), Objective.parse("val_loss"), num_iterations=n,
                  out_dir=tmp_path, blocks=2, block_types=[SMALL, BIG], traits_of=traits_of,
                  assign=make_policy(policy_name, SPACE, [SMALL, BIG], traits_of))


OOM = [{"error": "MemoryError: out of memory", "oom": True, "code": 1}]


def test_a_trial_out_of_memory_on_one_type_re_runs_on_another_and_stays_off_the_first(tmp_path):
    search = two_type_search(tmp_path)
    first = search.next_trial(0, 0.0)
    cls = first.params["model"]
    assert search.out_of_memory(first.id, OOM, 0, 1.0) == "it re-runs on another block type than 1 rank, 8 GiB/rank, n"
    assert first.id not in search.in_flight and search.requeue == [first]
    assert [(o.trial, o.block_type, o.outcome, o.seconds) for o in search.costs] == [(first.id, SMALL, "oom", 1.0)]
    again = search.next_trial(1, 1.0)
    assert again is first and again.block == 1 and again.status == "running"  # on the big block, same id
    search.record(again.id, [{"metrics": {"val_loss": 0.5}}], 1, 3.0)
    assert search.costs[-1].outcome == "ok" and search.costs[-1].block_type == BIG
    # the trial itself is out on the small type; its class is not (no size hook orders it: each trial of the
    # class is only unproven there, probed one at a time)
    assert not search.assign.fits_type(first.params, SMALL) and search.assign.fits_type(first.params, BIG)
    assert search.assign.fits_type({"model": cls, "epochs": 1.0 - first.params["epochs"]}, SMALL)


def test_a_trial_that_fits_no_block_fails_with_why_and_fifo_keeps_the_old_failure(tmp_path):
    search = two_type_search(tmp_path)
    t = search.next_trial(1, 0.0)
    assert search.out_of_memory(t.id, OOM, 1, 1.0) is None  # out of memory on the largest type: nowhere left
    fifo = two_type_search(tmp_path / "fifo", "fifo")
    t = fifo.next_trial(0, 0.0)
    assert fifo.out_of_memory(t.id, OOM, 0, 1.0) is None and not fifo.costs
    declared = two_type_search(tmp_path / "d", module=SimpleNamespace(trial_memory=lambda p: 64.0))
    assert declared.next_trial(0, 0.0) is None  # declares more than any block has: recorded failed at once
    failed = list(declared.finished.values())
    assert failed and all(f.status == "failed" for f in failed)
    assert failed[0].error == ("it fits no block of this job: it needs 64 GiB per rank (trial_memory), blocks of "
                               "1 rank, 8 GiB/rank, n have 8; it needs 64 GiB per rank (trial_memory), blocks of "
                               "2 ranks, 32 GiB/rank, n have 32")


def test_without_a_size_hook_one_out_of_memory_fails_only_its_own_trial_not_the_rest_of_the_budget(tmp_path):
    search = two_type_search(tmp_path, n=8)  # trial_class only: every trial has size 1, nothing orders them
    oom = search.next_trial(1, 0.0)
    cls = oom.params["model"]
    assert search.out_of_memory(oom.id, OOM, 1, 1.0) is None  # on the largest type: it fails (the caller records)
    search.record(oom.id, OOM, 1, 1.0)
    clock, ran = 2.0, []
    while (t := search.next_trial(1, clock)) is not None:  # the big block runs the rest of the budget
        search.record(t.id, [{"metrics": {"val_loss": 1.0}}], 1, clock + 1.0)
        ran.append(t)
        clock += 2.0
    failed = [t.id for t in search.finished.values() if t.status == "failed"]
    assert failed == [oom.id] and len(search.finished) == 8  # not every trial of its class, unrun
    assert any(t.params["model"] == cls for t in ran)  # its class ran on
    assert not search.assign.fits_type(oom.params, BIG)  # the trial itself is out where it ran out of memory
    other = {**oom.params, "epochs": 1.0 - oom.params["epochs"]}
    assert search.assign.fits_type(other, BIG) and search.assign.fits_type(other, SMALL)


def test_with_a_size_hook_an_out_of_memory_rules_out_the_class_at_least_as_large():
    hooks = SimpleNamespace(trial_class=lambda p: p["model"], trial_size=lambda p: 1.0 + p["epochs"])
    policy = make_policy("hardware-aware", SPACE, [SMALL, BIG], TraitsOf(SPACE, hooks))
    big, small = {"model": "large", "epochs": 0.8}, {"model": "large", "epochs": 0.2}
    policy.learn([(CostObservation(1, "large", 1.5, SMALL, 3.0, "oom"), {"model": "large", "epochs": 0.5})])
    assert not policy.fits_type(big, SMALL) and policy.fits_type(small, SMALL) and policy.fits_type(big, BIG)
    unsized = make_policy("hardware-aware", SPACE, [SMALL, BIG],
                          TraitsOf(SPACE, SimpleNamespace(trial_class=lambda p: p["model"])))
    unsized.learn([(CostObservation(1, "large", 1.0, SMALL, 3.0, "oom"), {"model": "large", "epochs": 0.5})])
    assert unsized.fits_type(big, SMALL) and unsized.fits_type(small, SMALL)  # no size: nothing to order by
    assert not unsized.fits_type({"model": "large", "epochs": 0.5}, SMALL)  # but that trial is out there
    assert unsized.fits_type({"model": "large", "epochs": 0.5}, BIG)
    # evidence from a second trial (and none of the class fitted there): the class is out on that type
    second = [(CostObservation(1, "large", 1.0, SMALL, 3.0, "oom"), {"model": "large", "epochs": 0.5}),
              (CostObservation(2, "large", 1.0, SMALL, 3.0, "oom"), {"model": "large", "epochs": 0.9})]
    unsized.learn(second)
    assert not unsized.fits_type(small, SMALL) and unsized.fits_type(small, BIG)
    assert unsized.memory.why_not(unsized.traits(small), SMALL) == (
        "2 trials of class 'large' ran out of memory on blocks of 1 rank, 8 GiB/rank, n or larger and none of "
        "them fitted there")
    unsized.learn([*second, (CostObservation(3, "large", 1.0, SMALL, 3.0, "ok"), small)])
    assert unsized.fits_type(big, SMALL)  # one of the class fitted there: only the two trials themselves are out


def test_cost_observations_are_saved_and_restored_and_an_old_state_without_them_loads(tmp_path):
    search = two_type_search(tmp_path)
    t = search.next_trial(0, 0.0)
    search.out_of_memory(t.id, OOM, 0, 2.0)
    t = search.next_trial(1, 2.0)
    search.record(t.id, [{"metrics": {"val_loss": 1.0}}], 1, 5.0)
    search.save()
    again = two_type_search(tmp_path)
    assert again.restore() and again.costs == search.costs
    state = json.loads((tmp_path / "optimizer-state.json").read_text())
    del state["costs"]
    (tmp_path / "optimizer-state.json").write_text(json.dumps(state))
    old = two_type_search(tmp_path)
    assert old.restore() and old.costs == []
    state["costs"] = [{"id": 1, "outcome": "oom"}]
    (tmp_path / "optimizer-state.json").write_text(json.dumps(state))
    with pytest.raises(ConfigError, match="holds a malformed cost observation"):
        two_type_search(tmp_path).restore()


def test_a_rank_the_oom_killer_took_marks_the_trial_its_block_ran(tmp_path):
    from nnlo.rankfate import RankFate, keep_fate

    search = two_type_search(tmp_path)
    running = search.next_trial(0, 0.0)
    other = search.next_trial(1, 0.0)
    search.save()  # the job is killed here
    (tmp_path / "ranks").mkdir()
    (tmp_path / "ranks" / "rank-1.json").write_text("{}")
    keep_fate(RankFate(int(signal.SIGKILL), "node7", 1, "block 0 worker:w0", 4242), [tmp_path / "ranks"])
    restored = two_type_search(tmp_path)
    assert restored.restore()
    assert [(o.trial, o.block_type, o.outcome) for o in restored.costs] == [(running.id, SMALL, "oom")]
    assert not (tmp_path / "ranks" / "fate.json").exists()  # learnt once
    assert {t.id for t in restored.requeue} == {running.id, other.id}
    small = restored.next_trial(0, 10.0)
    assert small is None or small.id != running.id  # not again on the small block
    assert restored.next_trial(1, 10.0).id == running.id  # the big block takes it first
    assert not restored.assign.fits_type(running.params, SMALL) and restored.assign.fits_type(running.params, BIG)
    # a rank killed by another signal teaches nothing, nor a fate without a block
    for fate in (RankFate(int(signal.SIGSEGV), "node7", 1, "block 0 worker:w0"),
                 RankFate(int(signal.SIGKILL), "node7", 0, "coordinator")):
        keep_fate(fate, [tmp_path / "ranks"])
        other_death = two_type_search(tmp_path)
        assert other_death.restore() and other_death.costs == []


def test_the_policy_is_pure_and_carries_its_options(tmp_path):
    policy = make_policy("hardware-aware", SPACE, [SMALL, BIG], tail_factor=1.0, cheaper=False)
    assert isinstance(policy, HardwareAware) and policy.placement.tail_factor == 1.0
    assert policy.placement.cheaper is False and policy.fits_deadline
    assert policy.pool_size(2, 100) == 3 and policy.pool_size(2, 2) == 2


# -- shared searches: cost records in the journal ------------------------------------------------------------
class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def participant(tmp_path, name, types, clock, n=8):
    from nnlo.optimize.shared import shared_search

    traits_of = TraitsOf(SPACE, SimpleNamespace(trial_class=lambda p: p["model"]))
    s = shared_search(make_engine("random", SPACE, 0), Objective.parse("val_loss"), num_iterations=n,
                      out_dir=tmp_path, participant=name, lease_s=10.0, clock=clock, heartbeat=False,
                      blocks=len(types), block_types=types, traits_of=traits_of,
                      assign=make_policy("hardware-aware", SPACE, types, traits_of))
    s.restore()
    return s


def test_the_journal_folds_cost_records_and_journals_without_them_load():
    from nnlo.optimize.journal import rebuild

    obs = CostObservation(3, "conv", 1.0, GPU, 2.5)
    base = [{"kind": "search", "p": "a", "t": 1, "spec": {}},
            {"kind": "propose", "p": "a", "t": 1, "id": 3, "params": {"x": 1}, "until": 9}]
    state = rebuild([*base, {"kind": "cost", "p": "a", "t": 2, **obs.to_record()},
                     {"kind": "cost", "p": "b", "t": 3, **CostObservation(3, "conv", 1.0, CPU, 25.0).to_record()},
                     {"kind": "cost", "p": "b", "t": 4, "id": 3, "outcome": "lost"}])
    assert state.costs[0] == obs and [o.block_type for o in state.costs] == [GPU, CPU]
    assert state.types == {"a": {GPU}, "b": {CPU}} and state.ignored == 1  # the malformed one
    assert 3 in state.open and state.n_trials == 1  # costs change no trial
    old = rebuild(base)
    assert old.costs == [] and old.types == {} and old.ignored == 0
    assert rebuild([*base, {"kind": "cost", "p": "a", "t": 2, **obs.to_record()}]).costs == [obs]  # pure


def test_every_participant_learns_from_every_participants_jobs(tmp_path):
    clock = Clock()
    a, b = participant(tmp_path, "a", [SMALL, SMALL], clock), participant(tmp_path, "b", [BIG], clock)
    t = a.next_trial(0)
    clock.t += 3
    a.record(t.id, [{"metrics": {"val_loss": 1.0}}], 0)
    b.storage.catch_up()  # reads the journal
    assert [(o.trial, o.block_type, o.outcome, o.seconds) for o in b.costs] == [(t.id, SMALL, "ok", 3.0)]
    assert b.observations()[0][1] == t.params  # with the trial's parameters, for the features
    records = [json.loads(line)["rec"] for line in (tmp_path / "search-journal.jsonl").read_text().splitlines()]
    assert [r["kind"] for r in records].index("cost") < [r["kind"] for r in records].index("result")


def test_a_shared_trial_out_of_memory_goes_to_a_block_or_a_participant_it_may_fit(tmp_path):
    clock = Clock()
    both = participant(tmp_path, "both", [SMALL, BIG], clock)
    t = both.next_trial(0)
    assert both.out_of_memory(t.id, OOM, 0) == "it re-runs on another block type than 1 rank, 8 GiB/rank, n"
    again = both.next_trial(0)
    assert again is None or again.id != t.id  # the small block does not take it back
    assert both.next_trial(1).id == t.id  # the big one does
    # a participant with small blocks only hands it to one that has run on big blocks
    clock2 = Clock()
    small = participant(tmp_path / "2", "small", [SMALL], clock2)
    big = participant(tmp_path / "2", "big", [BIG], clock2)
    warm = big.next_trial(0)
    big.record(warm.id, [{"metrics": {"val_loss": 1.0}}], 0)  # 'big' has run on BIG blocks
    u = small.next_trial(0)
    assert small.out_of_memory(u.id, OOM, 0) == "it fits no block here: back to the pool for big"
    taken = big.next_trial(0)
    assert taken.id == u.id
    # nobody else: it fails
    alone = participant(tmp_path / "3", "alone", [SMALL], Clock())
    v = alone.next_trial(0)
    assert alone.out_of_memory(v.id, OOM, 0) is None


# -- with a schedule, and the hooks checked up front ---------------------------------------------------------
def staged_search(tmp_path, types, deadline=None):
    from nnlo.optimize.schedules import ScheduleSpec, make_schedule

    traits_of = TraitsOf(SPACE, SimpleNamespace(trial_class=lambda p: p["model"]))
    return Search(make_engine("random", SPACE, 0), Objective.parse("val_loss"), num_iterations=9,
                  out_dir=tmp_path, schedule=make_schedule(ScheduleSpec("asha", max_epochs=9, min_epochs=1, eta=3),
                                                           SPACE),
                  blocks=len(types), block_types=types, traits_of=traits_of,
                  assign=make_policy("hardware-aware", SPACE, types, traits_of), deadline=deadline)


def test_under_a_schedule_a_stage_out_of_memory_re_runs_toward_the_same_rung_on_another_type(tmp_path):
    search = staged_search(tmp_path, [SMALL, BIG])
    t = search.next_trial(0, 0.0)
    rung = t.target
    assert search.out_of_memory(t.id, OOM, 0, 0.5) is not None
    assert search.costs[-1].work == pytest.approx(1 / 9) and search.costs[-1].outcome == "oom"  # its first stage
    other = search.next_trial(0, 1.0)
    assert other is None or other.id != t.id
    again = search.next_trial(1, 1.0)
    assert again.id == t.id and again.target == rung and search.job_epochs(again) == 1


def test_under_a_schedule_a_trial_trained_on_must_reach_its_checkpoint_before_the_deadline(tmp_path):
    slow, fast = BlockType(1, node="n"), BlockType(8, node="n")
    # the job's deadline: 12 s after the three first stages end (8 + 1 + 8 s); a promotion trains 2 more epochs:
    # ~16 s on the slow block, ~2 s on the fast
    search = staged_search(tmp_path, [slow, fast], deadline=17.0 + 12.0)
    clock = 0.0
    for i in range(3):  # three first stages, 1 epoch each: 8 s on the slow block, 1 s on the fast one
        block = i % 2
        t = search.next_trial(block, clock)
        clock += 8.0 if block == 0 else 1.0
        search.record(t.id, [{"metrics": {"val_loss": 1.0 + i}, "epochs": 1}], block, clock)
    assert [o.work for o in search.costs] == pytest.approx([1 / 9] * 3) and clock == 17.0
    assert search.next_trial(0, clock) is None  # the slow block would not reach the stage's end in time
    up = search.next_trial(1, clock)
    assert up is not None and up.target == 1 and search.job_epochs(up) == 3


def test_broken_placement_hooks_stop_the_search_before_it_starts():
    from nnlo.optimize.run import check_placement_hooks

    check_placement_hooks(SPACE, SimpleNamespace(), "m.py")  # no hooks: nothing to check
    check_placement_hooks(SPACE, SimpleNamespace(trial_size=lambda p: 1 + p["epochs"]), "m.py")
    with pytest.raises(ModelError, match=r"^trial_class\(\{.*\}\) in m.py returned None: return a short string"):
        check_placement_hooks(SPACE, SimpleNamespace(trial_class=lambda p: None), "m.py")


def test_the_chains_fate_line_keeps_the_dead_ranks_fate_for_the_next_job_once(tmp_path):
    from nnlo.rankfate import fate_line, take_fate

    ranks = tmp_path / "ranks"
    ranks.mkdir()
    (ranks / "rank-3.json").write_text(json.dumps({"rank": 3, "role": "block 1 worker:w0", "host": "nid01",
                                                   "pid": 77}))
    line = fate_line("srun: error: nid01: task 3: Out Of Memory\n", ranks, tmp_path / "missing")
    assert line == "rank 3 (block 1 worker:w0) on nid01 was killed by SIGKILL (signal 9); the job was ended"
    fate = take_fate(ranks)
    assert (fate.signal, fate.rank, fate.role, fate.pid) == (int(signal.SIGKILL), 3, "block 1 worker:w0", 77)
    assert take_fate(ranks) is None  # taken once
    (ranks / "fate.json").write_text("{not json")
    assert take_fate(ranks) is None and not (ranks / "fate.json").exists()  # a damaged one is dropped
    assert fate_line("all ranks exited cleanly\n", ranks) is None and not (ranks / "fate.json").exists()


def test_a_lost_nodes_line_names_no_rank_and_teaches_no_out_of_memory(tmp_path):
    from nnlo.rankfate import ENDED, fate_line, silent_line, take_fate

    ranks = tmp_path / "ranks"
    ranks.mkdir()
    for rank, role in ((1, "block 0 worker:w0"), (3, "block 1 worker:w0")):
        (ranks / f"rank-{rank}.json").write_text(json.dumps({"rank": rank, "role": role, "host": f"nid0{rank}",
                                                             "pid": 70 + rank}))
    lost = f"nnlo: error: {silent_line('nid03', [3], 60)}\n"  # the node went silent: no rank is named first
    teardown = "srun: error: nid01: task 1: Killed\n"  # then the launcher kills the innocent rest
    assert fate_line(lost + teardown, ranks) == silent_line("nid03", [3], 60) and ENDED in lost
    assert take_fate(ranks) is None  # block 0's trial is not learnt as out of memory
    # a named rank the launcher never reported killed: no fate either (not the first teardown report)
    died = "nnlo: error: rank 3 (block 1 worker:w0) on nid03 died: its process ended without exiting; " + ENDED
    assert fate_line(died + "\n" + teardown, ranks) is not None and take_fate(ranks) is None


def test_what_a_killed_rank_teaches():
    from nnlo.optimize.placement.memory import killed_out_of_memory

    on = {"block": 1, "type": SMALL.to_dict(), "class": "large", "size": 2.0, "memory_gb": None, "work": 0.5}
    rerun = [{"id": 4, "params": {}, "running_on": on}, {"id": 5, "params": {}},
             {"id": 6, "params": {}, "running_on": {**on, "block": 0}},
             {"id": 7, "params": {}, "running_on": {"block": 1}}]  # an earlier version's entry: no type
    assert killed_out_of_memory(int(signal.SIGKILL), 1, rerun) == [
        CostObservation(4, "large", 2.0, SMALL, 0.0, "oom", 0.5)]
    assert killed_out_of_memory(int(signal.SIGSEGV), 1, rerun) == []
    assert killed_out_of_memory(int(signal.SIGKILL), None, rerun) == []


def test_a_ranks_facts_come_from_its_environment_and_nvml_where_there_is_one(monkeypatch):
    import sys

    from nnlo.contract import ENV_NODE_TYPE
    from nnlo.optimize.placement.probe import rank_facts

    monkeypatch.setitem(sys.modules, "pynvml", None)  # no gpu extra: the environment is all there is
    site = rank_facts(True, {ENV_NODE_TYPE: " daint-gpu ", "CUDA_VISIBLE_DEVICES": "0,1"})
    assert (site.node, site.gpus_visible, site.gpu_memory_gb, site.needs_device) == ("daint-gpu", 2, None, True)
    assert site.host_memory_gb is not None and site.host_memory_gb > 0
    for hidden in ("", "-1", "NoDevFiles"):
        assert rank_facts(False, {"CUDA_VISIBLE_DEVICES": hidden}).gpus_visible == 0
    plain = rank_facts(True, {})
    assert plain.gpus_visible == 0 and plain.node and "+" not in plain.node  # the CPU model names the node

    calls: list[str] = []
    nvml = SimpleNamespace(
        nvmlInit=lambda: calls.append("init"), nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlDeviceGetCount=lambda: 4, nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(total=80 * 2 ** 30),
        nvmlDeviceGetName=lambda h: b"NVIDIA A100-SXM4-80GB")
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    gpu = rank_facts(True, {"CUDA_VISIBLE_DEVICES": "2,3"})
    assert (gpu.gpus_visible, gpu.gpu_memory_gb) == (2, 80.0) and gpu.node.endswith(" + NVIDIA A100-SXM4-80GB")
    assert calls == ["init", "shutdown"]  # NVML is let go of
    assert rank_facts(True, {ENV_NODE_TYPE: "a100"}).gpus_visible == 4  # every GPU NVML sees when none is listed
