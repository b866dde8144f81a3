"""The schedules as pure functions (no MPI, no files): rung ladders, ASHA's promotion rule, Hyperband's brackets,
PBT's exploit and explore, the engine's per-rung model, and the options that refuse what cannot run."""
from __future__ import annotations

import math
import random

import numpy as np
import pytest

from nnlo.config import TrainConfig
from nnlo.errors import ConfigError
from nnlo.optimize.engines import make_engine
from nnlo.optimize.options import SearchConfig, check_schedule
from nnlo.optimize.results import Objective, Trial
from nnlo.optimize.schedules import Full, Job, Ledger, ScheduleError, ScheduleSpec, TrialView, make_schedule
from nnlo.optimize.schedules.asha import Asha, geometric_budgets, keep, promotable, promotion
from nnlo.optimize.schedules.hyperband import Hyperband, bracket_sizes, next_bracket
from nnlo.optimize.schedules.ledger import RungResults, feed, ledger, model_rung
from nnlo.optimize.schedules.pbt import Pbt, donor_for, explore, perturb, quantile_size, steps
from nnlo.optimize.space import Categorical, Integer, Real, Space

RNG = np.random.default_rng(0)
SPACE = Space([Real(1e-3, 1.0, prior="log-uniform", name="lr"), Integer(1, 5, name="layers"),
               Categorical(["a", "b", "c"], name="act")])


def v(tid, results=None, running=None, bracket=0, **kw):
    return TrialView(tid, dict(results or {}), running, bracket, **kw)


def L(*trials):  # noqa: N802 - reads as the schedules' argument
    return Ledger(trials[0] if len(trials) == 1 and isinstance(trials[0], list) else trials)


def ranked(trials, rung):
    return Ledger(trials).ranked(rung)


# -- rungs ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("lo, hi, eta, want", [
    (1, 27, 3, (1, 3, 9, 27)), (1, 10, 3, (1, 3, 9, 10)), (2, 2, 3, (2,)), (1, 16, 2, (1, 2, 4, 8, 16)),
    (1, 5, 2.5, (1, 3, 5)), (3, 100, 3, (3, 9, 27, 81, 100)),
    (1, 20, 2.5, (1, 3, 6, 16, 20)), (2, 40, 2.5, (2, 5, 13, 31, 40)),  # halves round up: 2.5 is 3, 12.5 is 13
])
def test_rungs_grow_by_eta_up_to_the_maximum(lo, hi, eta, want):
    assert geometric_budgets(lo, hi, eta) == want


def test_keep_is_the_floor_of_n_over_eta():
    assert [keep(n, 3) for n in range(10)] == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3]
    assert keep(5, 2.5) == 2


# -- ASHA's promotion rule ------------------------------------------------------------------------------
def test_promotion_takes_the_best_of_the_top_third_that_is_still_there():
    rung0 = [v(0, {0: 0.5}), v(1, {0: 0.2}), v(2, {0: 0.9})]
    assert promotable(L(rung0), 0, 3).id == 1
    assert promotable(L(rung0[:2]), 0, 3) is None  # 2 results: floor(2/3) = 0, nobody goes on yet
    rung0[1] = v(1, {0: 0.2}, running=1)  # promoted, training now
    assert promotable(L(rung0), 0, 3) is None  # the top third is 1 trial, and it has left
    six = [*rung0, v(3, {0: 0.1}), v(4, {0: 0.3}), v(5, {0: None})]  # a failure ranks last, never goes on
    assert [t.id for t in ranked(six, 0)] == [3, 1, 4, 0, 2, 5]
    assert promotable(L(six), 0, 3).id == 3  # top 2 = {3, 1}; 1 has left
    grown = L(rung0)  # the ledger updated one trial at a time ranks as one built at once
    for t in six[3:]:
        grown.update(t)
    grown.update(v(1, {0: 0.2, 1: 0.15}))
    assert [t.id for t in grown.ranked(0)] == [3, 1, 4, 0, 2, 5] and [t.id for t in grown.ranked(1)] == [1]
    assert grown.count(0) == 6 and len(grown) == 6 and grown.started(0) == 6


def _naive_promotable(trials, rung, eta, bracket=None):
    """ASHA's rule read literally: the first of the rung's top floor(n / eta) that is still there."""
    mine = [t for t in trials if rung in t.results and (bracket is None or t.bracket == bracket)]
    order = sorted(mine, key=lambda t: (math.inf if t.results[rung] is None else t.results[rung], t.id))
    for t in order[:keep(len(order), eta)]:
        if t.results[rung] is not None and not t.reached(rung) and t.running is None:
            return t
    return None


@pytest.mark.parametrize("seed", range(20))
def test_the_ledgers_promotion_is_the_rule_read_literally(seed):
    rng = random.Random(seed)
    ledger_now, views_now = Ledger(), {}
    for step in range(120):  # trials arrive, report, get promoted and report again, in a random order
        tid = rng.randrange(40)
        old = views_now.get(tid, v(tid, bracket=tid % 2))
        top = old.top
        if old.running is not None:
            results = {**old.results, old.running: rng.choice([rng.random(), rng.random(), None])}
            new = v(tid, results, None, old.bracket)
        else:
            new = v(tid, old.results, 0 if top is None else top + 1, old.bracket)
        views_now[tid] = new
        ledger_now.update(new)
        for rung in range(3):
            for bracket in (None, 0, 1):
                want = _naive_promotable(list(views_now.values()), rung, 3, bracket)
                got = promotable(ledger_now, rung, 3, bracket)
                assert (got and got.id) == (want and want.id), (step, rung, bracket)


def test_promotion_prefers_the_highest_rung():
    trials = [v(i, {0: 0.1 * i}) for i in range(9)] + [v(9, {0: 0.0, 1: 0.5}), v(10, {0: 0.05, 1: 0.4}),
                                                       v(11, {0: 0.07, 1: 0.6})]
    t, rung = promotion(L(trials), [0, 1], 3)
    assert (t.id, rung) == (10, 2)


def test_asha_starts_new_trials_when_nothing_is_promotable_and_waits_without_budget():
    asha = Asha(ScheduleSpec("asha", max_epochs=9, min_epochs=1, eta=3))
    assert asha.budgets == (1, 3, 9)
    job = asha.next_job(L(v(0, {0: 1.0})), new=True, rng=RNG)
    assert job.new and (job.rung, job.epochs) == (0, 1)
    assert asha.next_job(L(v(0, {0: 1.0}), v(1, running=0)), new=False, rng=RNG) is None
    job = asha.next_job(L(v(0, {0: 1.0}), v(1, {0: 0.5}), v(2, {0: 0.7})), new=True, rng=RNG)
    assert (job.trial, job.rung, job.epochs) == (1, 1, 3)
    assert asha.completed(v(1, {0: 0.5, 1: 0.4, 2: 0.3})) and not asha.completed(v(1, {0: 0.5}))


def _drive(schedule, n_trials, value, seed, blocks=4):
    """An asynchronous run: blocks finish jobs in random order; returns the views and every promotion with the
    rung's ranking at that moment."""
    rng = random.Random(seed)
    results: dict[int, dict[int, float | None]] = {}
    running: dict[int, int] = {}
    extra: dict[int, dict] = {}
    made, promotions = 0, []

    def current():
        ids = sorted(set(results) | set(running))
        return [TrialView(i, dict(results.get(i, {})), running.get(i), **extra.get(i, {})) for i in ids]

    while True:
        while len(running) < blocks:
            views_now = current()
            job = schedule.next_job(Ledger(views_now), new=made < n_trials, rng=np.random.default_rng([seed, made]))
            if job is None:
                break
            if job.trial is None:
                tid, made = made, made + 1
                extra[tid] = {"bracket": job.bracket, "parent": job.parent, "replaces": job.replaces,
                              "params": job.params or {}}
            else:
                tid = job.trial
                promotions.append((tid, job.rung, [t.id for t in ranked(views_now, job.rung - 1)], views_now))
            running[tid] = job.rung
        if not running:
            return current(), promotions
        tid = rng.choice(sorted(running))
        rung = running.pop(tid)
        results.setdefault(tid, {})[rung] = value(tid, rung)


@pytest.mark.parametrize("seed", range(5))
def test_asha_promotes_only_from_a_rungs_top_and_leaves_none_of_it_behind(seed):
    asha = Asha(ScheduleSpec("asha", max_epochs=27, min_epochs=1, eta=3))
    rng = random.Random(seed)
    quality = {i: rng.random() for i in range(60)}
    final, promotions = _drive(asha, 60, lambda tid, rung: quality[tid] + 0.1 * rng.random() / (rung + 1), seed)
    for tid, _rung, order, seen in promotions:  # promoted from the top floor(n / eta) at that moment
        assert tid in order[:keep(len(order), 3)]
        assert all(t.id != tid or t.running is None for t in seen)
    for rung in range(3):  # at the end every trial in a rung's top 1/eta went on
        order = ranked(final, rung)
        assert all(t.top > rung for t in order[:keep(len(order), 3)])
    assert len([t for t in final if t.top == 3]) >= 1 and len(final) == 60
    # every trial's rungs are contiguous from 0: no rung skipped
    assert all(sorted(t.results) == list(range(t.top + 1)) for t in final)


# -- Hyperband -----------------------------------------------------------------------------------------
def test_bracket_sizes_are_hyperbands():
    assert bracket_sizes(4, 3) == [27, 12, 6, 4]  # Li et al.'s table for R = 27, eta = 3
    assert bracket_sizes(5, 3) == [81, 34, 15, 8, 5]


def test_new_trials_follow_the_bracket_proportions():
    sizes, started = [27, 12, 6, 4], [0, 0, 0, 0]
    for _ in range(49 * 3):
        started[next_bracket(started, sizes)] += 1
    assert started == [81, 36, 18, 12]


def test_hyperband_brackets_start_high_and_promote_within_themselves():
    hb = Hyperband(ScheduleSpec("hyperband", max_epochs=9, min_epochs=1, eta=3))
    assert hb.budgets == (1, 3, 9) and hb.sizes == [9, 5, 3]
    final, promotions = _drive(hb, 40, lambda tid, rung: (tid * 7919 % 97) / 97 + 0.01 * rung, seed=1)
    by_bracket = {b: [t for t in final if t.bracket == b] for b in range(3)}
    assert all(by_bracket.values())
    for b, trials in by_bracket.items():
        assert all(min(t.results) == b for t in trials)  # bracket b starts at rung b
    for tid, rung, _, seen in promotions:
        me = next(t for t in seen if t.id == tid)
        mates = [t for t in seen if t.bracket == me.bracket]
        order = ranked(mates, rung - 1)
        assert tid in [t.id for t in order[:keep(len(order), 3)]]


# -- PBT --------------------------------------------------------------------------------------------------
def test_steps_end_at_the_maximum():
    assert steps(3, 10) == (3, 6, 9, 10) and steps(5, 5) == (5,) and steps(2, 6) == (2, 4, 6)


def test_perturb_moves_reals_by_factors_and_others_to_neighbours():
    lr, layers, act = SPACE.dimensions
    seen = {perturb(lr, 0.1, np.random.default_rng(i)) for i in range(20)}
    assert {round(x, 12) for x in seen} == {0.08, 0.12}
    assert perturb(lr, 0.95, np.random.default_rng(3)) in (0.76, 1.0)  # clipped to the range
    assert {perturb(layers, 3, np.random.default_rng(i)) for i in range(20)} == {2, 4}
    assert {perturb(layers, 5, np.random.default_rng(i)) for i in range(20)} == {4}  # the only neighbour
    assert {perturb(act, "b", np.random.default_rng(i)) for i in range(20)} == {"a", "c"}
    assert {perturb(act, "a", np.random.default_rng(i)) for i in range(20)} == {"b"}


def test_perturb_moves_a_wide_integer_by_a_step_scaled_to_its_range():
    wide, logged = Integer(0, 1000, name="units"), Integer(16, 1024, prior="log-uniform", name="batch")
    assert {perturb(wide, 500, np.random.default_rng(i)) for i in range(20)} == {400, 600}  # a tenth of the range
    assert {perturb(wide, 980, np.random.default_rng(i)) for i in range(20)} == {880, 1000}  # clipped at the end
    assert {perturb(wide, 1000, np.random.default_rng(i)) for i in range(20)} == {900}  # the only way
    assert {perturb(logged, 100, np.random.default_rng(i)) for i in range(20)} == {80, 120}  # x0.8 or x1.2
    assert {perturb(logged, 16, np.random.default_rng(i)) for i in range(20)} == {19}
    assert {perturb(Integer(1, 1000, prior="log-uniform"), 2, np.random.default_rng(i)) for i in range(20)} == {1, 3}


def test_perturb_finds_a_choice_of_tuples_read_back_from_json():
    shape = Categorical([(32, 32), (64, 64), (128, 128)], name="shape")
    assert {perturb(shape, [64, 64], np.random.default_rng(i)) for i in range(20)} == {(32, 32), (128, 128)}
    assert perturb(shape, [7, 7], np.random.default_rng(0)) in shape.categories  # none of them: drawn afresh


def test_explore_resamples_with_its_probability_and_keeps_points_valid():
    point = {"lr": 0.1, "layers": 3, "act": "b"}
    kept = explore(SPACE, point, np.random.default_rng(1), resample=0.0)
    assert kept["lr"] in (pytest.approx(0.08), pytest.approx(0.12)) and kept["layers"] in (2, 4)
    fresh = [explore(SPACE, point, np.random.default_rng(i), resample=1.0) for i in range(30)]
    assert all(SPACE.contains(p) for p in fresh)
    assert len({round(p["lr"], 6) for p in fresh}) > 20  # drawn from the prior, not multiplied


def test_explore_in_a_tree_space_fills_the_branch_it_switches_to():
    tree = Space([Categorical(["mlp", "cnn"], name="model", branches={
        "mlp": [Integer(16, 256, name="hidden")], "cnn": [Integer(8, 64, name="filters")]})])
    for i in range(20):
        child = explore(tree, {"model": "mlp", "hidden": 32}, np.random.default_rng(i), resample=0.0)
        assert tree.contains(child) and child["model"] == "cnn" and "hidden" not in child


def test_the_bottom_quantile_copies_a_top_member():
    assert [quantile_size(n, 0.25) for n in (1, 2, 3, 4, 8, 9)] == [0, 1, 1, 1, 2, 2]
    members = [v(i, {0: 0.1 * i}) for i in range(8)]  # 0 best ... 7 worst
    assert donor_for(members, members[7], 0, 0.25, RNG).id in (0, 1)
    assert donor_for(members, members[6], 0, 0.25, RNG).id in (0, 1)
    assert donor_for(members, members[5], 0, 0.25, RNG) is None
    # a member compared at a step it has not reached uses its latest value below it
    assert donor_for([v(0, {0: 0.1, 1: 0.05}), v(1, {0: 0.9})], v(1, {0: 0.9}), 1, 0.25, RNG).id == 0


def test_pbt_fills_the_population_then_steps_the_least_trained_and_exploits():
    pbt = Pbt(ScheduleSpec("pbt", max_epochs=6, population=4, interval=2), SPACE)
    assert pbt.budgets == (2, 4, 6)
    pts = [{"lr": 0.01 * (i + 1), "layers": 2, "act": "a"} for i in range(4)]
    started = [v(i, running=0, params=pts[i]) for i in range(3)]
    assert pbt.next_job(L(started), new=True, rng=RNG).new  # 3 of 4 members: a fourth first
    pop = [v(i, {0: 0.1 * (i + 1)}, params=pts[i]) for i in range(4)]
    job = pbt.next_job(L(pop), new=True, rng=RNG)  # member 0 (best, least trained, lowest id) trains on
    assert (job.trial, job.rung, job.epochs) == (0, 1, 4)
    pop[0] = v(0, {0: 0.1, 1: 0.05}, params=pts[0])
    job = pbt.next_job(L(pop), new=True, rng=RNG)  # member 1 next: not in the bottom quarter either
    assert job.trial == 1
    pop[1], pop[2] = v(1, {0: 0.2, 1: 0.1}, params=pts[1]), v(2, {0: 0.3, 1: 0.2}, params=pts[2])
    job = pbt.next_job(L(pop), new=True, rng=RNG)  # member 3 is the worst: a child of a top member replaces it
    assert job.new and job.replaces == 3 and job.parent == 0 and job.rung == 1
    assert job.params != pts[0] and SPACE.contains(job.params)
    assert pbt.next_job(L(pop), new=False, rng=RNG).trial == 3  # no budget left for children: it trains on
    pop.append(v(4, running=1, params=job.params, parent=0, replaces=3))
    assert [t.id for t in pbt.living(pop)] == [0, 1, 2, 4]
    assert pbt.next_job(L(pop), new=True, rng=RNG).trial == 0  # 3 is out; the child is running
    done = [v(i, {0: 1, 1: 1, 2: 0.1 * i}) for i in range(4)]
    assert pbt.next_job(L(done), new=True, rng=RNG) is None and all(pbt.completed(t) for t in done)


def test_a_failed_pbt_child_gives_its_place_back_and_a_failed_member_is_replaced_while_budget_lasts():
    pbt = Pbt(ScheduleSpec("pbt", max_epochs=6, population=4, interval=2), SPACE)
    pts = [{"lr": 0.01 * (i + 1), "layers": 2, "act": "a"} for i in range(4)]
    pop = [v(0, {0: 0.1, 1: 0.05}, params=pts[0]), v(1, {0: 0.2, 1: 0.1}, params=pts[1]),
           v(2, {0: 0.3, 1: 0.2}, params=pts[2]), v(3, {0: 0.4}, params=pts[3]),
           v(4, {1: None}, params=pts[0], parent=0, replaces=3)]  # member 3's child failed
    assert [t.id for t in pbt.living(pop)] == [0, 1, 2, 3]  # 3 is back: it stopped at step 0 and trains on
    job = pbt.next_job(L(pop), new=False, rng=RNG)
    assert (job.trial, job.rung) == (3, 1)
    pop[3] = v(3, {0: None}, params=pts[3])  # a member that fails itself: a fresh trial takes its place
    assert [t.id for t in pbt.living(pop)] == [0, 1, 2]
    assert pbt.next_job(L(pop), new=True, rng=RNG) == Job(rung=0, epochs=2)
    assert pbt.next_job(L(pop), new=False, rng=RNG).trial == 0  # without budget the others train on


def test_a_pbt_population_above_the_budget_starts_what_the_budget_allows_and_trains_it_on():
    pbt = Pbt(ScheduleSpec("pbt", max_epochs=4, population=8, interval=2), SPACE)
    few = [v(i, {0: 0.1 * (i + 1)}, params={"lr": 0.01, "layers": 2, "act": "a"}) for i in range(3)]
    assert pbt.next_job(L(few), new=True, rng=RNG).new  # filling the population while the budget lasts
    job = pbt.next_job(L(few), new=False, rng=RNG)  # budget spent: the members train on, no wait for ever
    assert (job.trial, job.rung) == (0, 1)


# -- the options ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("opts, message", [
    ({"schedule": "asha", "min_epochs": 20}, "--min-epochs 20 is above --epochs 10"),
    ({"schedule": "asha", "reduction_factor": 1.5}, "--reduction-factor 1.5 must be a number >= 2"),
    ({"schedule": "hyperband", "min_epochs": 0}, "--min-epochs must be an integer >= 1"),
    ({"schedule": "pbt", "population": 20}, "--population 20 is larger than the budget, --num-iterations 10"),
    ({"schedule": "pbt", "population": 1}, "--population must be an integer >= 2"),
    ({"schedule": "pbt", "pbt_interval": 11}, "--pbt-interval 11 must be a whole number of epochs between 1"),
    ({"schedule": "full", "min_epochs": 2}, "--min-epochs applies to --schedule asha or hyperband"),
    ({"schedule": "asha", "population": 4}, "--population applies to --schedule pbt"),
    ({"schedule": "sha"}, "--schedule 'sha' is unknown"),
])
def test_bad_schedule_options_are_one_line(opts, message):
    with pytest.raises(ConfigError, match="^" + message.replace("(", r"\(").split("...")[0]) as e:
        SearchConfig(num_iterations=10, **opts).shape(TrainConfig(model="m.py", epochs=10))
    assert "\n" not in str(e.value)


def test_schedule_defaults_resolve_against_the_training():
    spec = SearchConfig(schedule="asha").schedule_spec(TrainConfig(epochs=27))
    assert (spec.min_epochs, spec.eta, spec.max_epochs) == (1, 3.0, 27)
    spec = SearchConfig(schedule="pbt", num_iterations=20).schedule_spec(TrainConfig(epochs=30))
    assert (spec.population, spec.interval) == (8, 3)  # the same when --num-iterations is raised later
    # the default does not depend on the budget (a search resumed with more trials is the same search): a
    # budget below it starts what it allows
    assert SearchConfig(schedule="pbt", num_iterations=5).schedule_spec(TrainConfig(epochs=5)).population == 8
    with pytest.raises(ConfigError, match="population of at least 2 trials; --num-iterations 1 is too few"):
        SearchConfig(schedule="pbt", num_iterations=1)
    with pytest.raises(ScheduleError):
        ScheduleSpec("asha", max_epochs=3, min_epochs=1, eta=math.nan)


class _Hook:
    @staticmethod
    def evaluate(params, *, fold=0, n_fold=1):
        return 0.0


class _StagedHook:
    @staticmethod
    def evaluate(params, *, fold=0, n_fold=1, epochs=None, state=None):
        return 0.0


def test_a_schedule_refuses_a_model_that_cannot_resume_and_an_epochs_parameter():
    spec = ScheduleSpec("asha", max_epochs=9)
    with pytest.raises(ConfigError, match=r"m\.py's evaluate\(\) takes no epochs= or state= \(it cannot save one\)"):
        check_schedule(spec, ["x"], _Hook, "m.py")
    check_schedule(spec, ["x"], _StagedHook, "m.py")
    check_schedule(ScheduleSpec(), ["x"], _Hook, "m.py")  # full: any hook
    with pytest.raises(ConfigError, match="remove the search parameter 'epochs'"):
        check_schedule(spec, ["epochs"], None, "m.py")


# -- what the engine learns from ---------------------------------------------------------------------------
def _trial(tid, rungs, **kw):
    t = Trial(tid, {"lr": 0.01 * (tid + 1), "layers": 1, "act": "a"}, **kw)
    for rung, fom in rungs:
        t.rungs.append({"rung": rung, "epochs": 3 ** rung, "status": "ok" if fom is not None else "failed",
                        "fom": fom, "fom_std": 0.0, "fold_foms": [fom], "finished": float(tid * 10 + rung)})
    return t


def test_the_model_learns_from_the_highest_rung_with_enough_results():
    obj = Objective.parse("val_loss")
    trials = [_trial(i, [(0, 1.0 + i)]) for i in range(5)] + [_trial(5, [(0, 0.5), (1, 0.3)]),
                                                              _trial(6, [(0, 0.6), (1, 0.4)]),
                                                              _trial(7, [(0, None)])]
    counts = RungResults.of(trials, obj, 2).ok
    assert counts == {0: 7, 1: 2}
    assert model_rung(counts, 3) == 0 and model_rung(counts, 2) == 1 and model_rung({}, 2) == 0
    engine = make_engine("bayesian", SPACE, 0, n_initial_points=2)
    # rung 1's results, and the failure below it, in the order they finished
    assert feed(engine, trials, obj) == 1 and [val for _, val in engine.observations] == [0.3, 0.4, None]
    grown = RungResults(2)  # a failure before a rung's first result is told to that rung's model too
    grown.add({"lr": 0.5}, 0, None)
    grown.add({"lr": 0.1}, 1, 0.2, 0.01)
    grown.add({"lr": 0.2}, 1, 0.3)
    assert grown.feed(engine) == 1 and engine.observations == [({"lr": 0.5}, None), ({"lr": 0.1}, 0.2),
                                                                 ({"lr": 0.2}, 0.3)]
    assert engine.variances == [None, 0.01, None] and grown.total == 3
    maximise = Objective.parse("val_accuracy")
    assert list(ledger([_trial(0, [(0, 0.9)])], maximise, {0: 1})) == [TrialView(
        0, {0: -0.9}, 1, 0, {"lr": 0.01, "layers": 1, "act": "a"})]


def test_make_schedule_by_name():
    full = make_schedule(ScheduleSpec(max_epochs=9), SPACE)  # a schedule object too: no None branches
    assert isinstance(full, Full) and not full.spec.staged and full.budgets == (9,)
    for name, cls in (("asha", Asha), ("hyperband", Hyperband)):
        assert isinstance(make_schedule(ScheduleSpec(name, max_epochs=9), SPACE), cls)
    assert isinstance(make_schedule(ScheduleSpec("pbt", max_epochs=9, population=2, interval=3), SPACE), Pbt)
