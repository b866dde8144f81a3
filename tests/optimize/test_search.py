"""The search bookkeeping without MPI: budget, k-fold means, failures, target, state and results files."""
from __future__ import annotations

import csv
import json
import threading

import pytest

from nnlo.contract import OPTIMIZER_STATE_FILE
from nnlo.errors import ConfigError
from nnlo.optimize.engines import make_engine
from nnlo.optimize.results import Objective, Trial
from nnlo.optimize.search import Search
from nnlo.optimize.space import Real, Space

SPACE = Space([Real(0.0, 1.0, name="a"), Real(0.0, 1.0, name="b")])


def new_search(tmp_path, engine="random", **kw) -> Search:
    kw.setdefault("num_iterations", 6)
    return Search(make_engine(engine, SPACE, 0, n_initial_points=2), Objective.parse(kw.pop("fom", "val_loss")),
                  out_dir=tmp_path, **kw)


def ok(v, **extra):
    return {"metrics": {"val_loss": v, **extra}}


def test_objective_parsing_and_direction():
    assert Objective.parse("val_loss") == Objective("val_loss", "min")
    assert Objective.parse("val_accuracy") == Objective("val_accuracy", "max")
    assert Objective.parse("val_accuracy:min").direction == "min"
    assert Objective("val_accuracy", "max").value(0.9) == -0.9
    with pytest.raises(ConfigError, match="NAME:min"):
        Objective.parse("val_loss:up")


def test_kfold_fom_is_the_mean_and_spread_is_recorded(tmp_path):
    s = new_search(tmp_path, n_fold=3)
    t = s.next_trial(block=0, now=100.0)
    done = s.record(t.id, [ok(1.0), ok(2.0), ok(6.0)], block=0, now=102.5)
    assert done.status == "ok" and done.fold_foms == [1.0, 2.0, 6.0]
    assert done.fom == pytest.approx(3.0)
    assert done.fom_std == pytest.approx((((1 - 3) ** 2 + (2 - 3) ** 2 + (6 - 3) ** 2) / 3) ** 0.5)
    assert done.duration_s == pytest.approx(2.5)


@pytest.mark.parametrize("fold, why", [
    ({"error": "ValueError: boom", "metrics": None}, "ValueError: boom"),
    (ok(float("nan")), "diverged"),
    ({"metrics": {"loss": 1.0}}, "no metric 'val_loss'"),
])
def test_a_failed_fold_fails_the_trial_and_the_search_goes_on(tmp_path, fold, why):
    s = new_search(tmp_path, n_fold=2)
    t = s.next_trial(0)
    done = s.record(t.id, [ok(1.0), fold], 0)
    assert done.status == "failed" and done.fom is None and why in done.error
    assert s.engine.observations[-1][1] is None
    assert s.next_trial(0) is not None  # not the end of the search


def test_budget_counts_failures_and_running_trials(tmp_path):
    s = new_search(tmp_path, num_iterations=3)
    a, b, c = s.next_trial(0), s.next_trial(1), s.next_trial(2)
    assert s.next_trial(3) is None
    assert len({s.engine.space.key(t.params) for t in (a, b, c)}) == 3
    s.record(a.id, [ok(0.5)], 0)
    s.record(b.id, [{"error": "x"}], 1)
    assert not s.done()
    s.record(c.id, [ok(0.2)], 2)
    assert s.done() and s.best().id == c.id


def test_target_objective_stops_handing_out(tmp_path):
    s = new_search(tmp_path, num_iterations=50, target=0.1)
    t = s.next_trial(0)
    s.record(t.id, [ok(0.05)], 0)
    assert s.next_trial(0) is None and s.done()


def test_maximised_fom_picks_the_largest(tmp_path):
    s = new_search(tmp_path, fom="val_accuracy", num_iterations=3, target=0.99)
    for v in (0.7, 0.9, 0.8):
        t = s.next_trial(0)
        s.record(t.id, [{"metrics": {"val_accuracy": v}}], 0)
    assert s.best().fom == 0.9
    assert s.engine.observations[1][1] == -0.9


def test_broken_model_stops_once_more_than_half_of_at_least_8_trials_failed(tmp_path):
    """The default rule tolerates a bad start (upstream went on): 4 failures first, then trials that work."""
    s = new_search(tmp_path, num_iterations=20)
    for i in range(7):
        t = s.next_trial(0)
        s.record(t.id, [{"error": "m.py: get_model() raised KeyError: 'x'", "code": 2}] if i < 4 else [ok(0.1)], 0)
    assert s.broken() is None and s.next_trial(0) is not None  # 4 of 7: fewer than 8 finished trials
    bad = new_search(tmp_path / "bad", num_iterations=20)
    for _ in range(8):
        t = bad.next_trial(0)
        bad.record(t.id, [{"error": "m.py: get_model() raised KeyError: 'x'", "code": 2}], 0)
        assert bad.broken() is None or len(bad.finished) == 8
    assert bad.broken().id == 0 and bad.broken().error_code == 2 and "KeyError" in bad.broken().error
    assert bad.next_trial(0) is None


@pytest.mark.parametrize("text, fails, finished, budget, stops", [
    ("0.5:8", 5, 9, 20, True), ("0.5:8", 4, 8, 20, False), ("0.5:8", 3, 3, 3, True),  # a budget under 8: all of it
    ("0.25:4", 2, 4, 20, True), ("0.25", 3, 7, 20, False), ("0.25", 3, 8, 20, True), ("1", 30, 30, 30, False), ("0:1", 1, 1, 20, True),
])
def test_the_failure_rule(text, fails, finished, budget, stops):
    from nnlo.optimize.failures import FailureRule

    rule = FailureRule.parse(text)
    assert rule.stops(fails, finished, budget) is stops
    assert FailureRule.parse(rule.option) == rule


@pytest.mark.parametrize("text", ["", "half", "1.5", "-0.1", "0.5:0", "0.5:x", "0.5:8:2", "nan"])
def test_a_bad_failure_rule_is_one_line_with_an_example(text):
    from nnlo.optimize.failures import FailureRule

    with pytest.raises(ConfigError, match="--max-failures .*e.g. 0.5:8"):
        FailureRule.parse(text)


def test_the_failure_rule_reads_as_it_is_printed():
    from nnlo.optimize.failures import FailureRule

    assert FailureRule.default().describe() == "more than half of at least 8 finished trials failed"
    assert FailureRule.parse("0.25:4").describe() == "more than 25% of at least 4 finished trials failed"
    assert FailureRule.parse("1").describe() == "never (--max-failures 1)"


def test_results_files_and_restore_rerun_in_flight(tmp_path):
    s = new_search(tmp_path, n_fold=2, num_iterations=5)
    t0, t1, t2 = s.next_trial(0), s.next_trial(1), s.next_trial(2)
    s.record(t0.id, [ok(0.3), ok(0.5)], 0)
    s.record(t2.id, [ok(0.1), {"error": "RuntimeError: rank died"}], 2)
    s.save()
    rows = list(csv.DictReader((tmp_path / "trials.csv").open()))
    assert [r["trial"] for r in rows] == ["0", "2"]
    assert rows[0]["fom"] == repr(0.4) and rows[0]["fom_fold1"] == repr(0.5) and rows[1]["status"] == "failed"
    table = json.loads((tmp_path / "trials.json").read_text())
    assert table[0]["params"] == t0.params and table[0]["fold_foms"] == [0.3, 0.5]
    best = json.loads((tmp_path / "best.json").read_text())
    assert best["best_trial"] == 0 and best["trials_done"] == 2 and best["trials_ok"] == 1
    assert best["trials_failed"] == 1 and best["trials_total"] == 5

    # a new coordinator (after a kill) resumes: finished trials kept, the in-flight one re-runs first
    r = new_search(tmp_path, n_fold=2, num_iterations=5)
    assert r.restore()
    assert sorted(r.finished) == [0, 2] and r.finished[0].fom == pytest.approx(0.4)
    again = r.next_trial(0)
    assert (again.id, again.params) == (t1.id, t1.params)
    fresh = r.next_trial(1)
    assert fresh.id == 3 and fresh.params not in (t0.params, t1.params, t2.params)
    assert len(r.engine.observations) == 2


def test_restore_refuses_a_different_search(tmp_path):
    s = new_search(tmp_path, n_fold=2)
    s.save()
    with pytest.raises(ConfigError, match="different .*--n-fold"):
        new_search(tmp_path, n_fold=3).restore()
    with pytest.raises(ConfigError, match="different engine"):
        Search(make_engine("genetic", SPACE, 0), Objective(), num_iterations=6, out_dir=tmp_path, n_fold=2).restore()
    (tmp_path / "optimizer-state.json").write_text("{half")
    with pytest.raises(ConfigError, match="unreadable"):
        new_search(tmp_path, n_fold=2).restore()


def test_trial_round_trips_through_json():
    t = Trial(4, {"a": 0.5}, status="ok", fom=1.0, fold_foms=[1.0], block=1)
    assert Trial.from_dict(json.loads(json.dumps(t.to_dict()))) == t


def test_a_trial_interrupted_by_the_deadline_is_kept_for_a_rerun(tmp_path):
    s = new_search(tmp_path, num_iterations=3)
    t = s.next_trial(0)
    s.interrupted(t.id)
    assert not s.finished and not s.in_flight
    s.save()
    state = json.loads((tmp_path / "optimizer-state.json").read_text())
    assert state["rerun"] == [{"id": t.id, "params": t.params}] and state["finished"] == []
    assert s.next_trial(1).params == t.params  # re-run in this job too if there is time


def test_stop_request_deadline_and_signals(monkeypatch):
    from nnlo.contract import DEADLINE_SAFETY_S, ENV_DEADLINE_SAFETY
    from nnlo.stop import Stop

    monkeypatch.delenv(ENV_DEADLINE_SAFETY, raising=False)
    SAFETY_S = DEADLINE_SAFETY_S
    stop = Stop(deadline=1000.0)
    assert stop.reason(1000.0 - SAFETY_S - 1) is None and stop.reason(1000.0 - SAFETY_S) == "deadline"
    assert stop.no_time_for(typical_s=100.0, now=900.0) and not stop.no_time_for(typical_s=None, now=900.0)
    stop.signal_name = "SIGUSR2"
    assert stop.reason(0.0) == "signal SIGUSR2"
    assert Stop(None).reason(1e12) is None


def test_a_search_keeps_the_deadline_safety_the_environment_asks_for(monkeypatch):
    """``NNLO_DEADLINE_SAFETY`` is the margin of a search's stop as of a training's (it was a fixed 10 s)."""
    from nnlo.contract import ENV_DEADLINE_SAFETY
    from nnlo.stop import Stop
    from nnlo.training.deadline import Deadline

    monkeypatch.setenv(ENV_DEADLINE_SAFETY, "30")
    stop = Stop(deadline=1000.0)
    assert stop.reason(969.0) is None and stop.reason(971.0) == "deadline"
    assert stop.safety_s == Deadline(1000.0).safety == 30.0


def test_an_interrupted_training_stops_the_hand_out():
    from nnlo.stop import Stop

    stop = Stop(deadline=None)
    stop.request("a training was interrupted (deadline or signal)")
    assert "interrupted" in stop.reason(0.0)


def test_a_search_continues_with_a_larger_budget_and_its_initial_design_counts(tmp_path, monkeypatch):
    """optimize --num-iterations 10 --opt-restore over a search of 4: the random first points that the budget
    of 4 derived (2) are the design done; the 10-trial search would have derived 3."""
    from dataclasses import replace

    from nnlo.optimize.options import OptimizeOptions
    from nnlo.optimize.run import prepare_search

    monkeypatch.delenv("NNLO_RUN_DIR", raising=False)
    opts = OptimizeOptions(out_dir=tmp_path, block_size=1, num_iterations=4, hyper_opt="bayesian")
    s = prepare_search(opts, SPACE)
    for v in (0.4, 0.3, 0.2, 0.1):
        t = s.next_trial(0)
        s.record(t.id, [ok(v + t.params["a"])], 0)
    s.save()
    assert not s.can_hand_out() and s.engine.n_initial_points == 2
    more = prepare_search(replace(opts, num_iterations=10, restore=True), SPACE)
    assert sorted(more.finished) == [0, 1, 2, 3] and more.engine.n_initial_points == 2
    assert replace(opts, num_iterations=10).initial_points() == 3
    assert more.next_trial(0).id == 4 and more.num_iterations == 10
    given = prepare_search(replace(opts, num_iterations=10, restore=True, n_initial_points=6), SPACE)
    assert given.engine.n_initial_points == 6 and len(given.finished) == 4  # asked for explicitly: as given
    for other, what in ((dict(hyper_opt="random"), "engine"), (dict(estimator="RF"), "engine"),
                        (dict(fom="val_accuracy"), "--fom")):
        with pytest.raises(ConfigError, match=f"different {what}"):
            prepare_search(replace(opts, num_iterations=10, restore=True, **other), SPACE)


def test_the_default_rule_is_the_contracts():
    from nnlo.contract import MAX_FAILURES
    from nnlo.optimize.failures import FailureRule

    assert FailureRule.parse(MAX_FAILURES) == FailureRule.default() == FailureRule(0.5, 8)


def test_a_blocks_kept_result_is_found_only_for_the_same_trial_parameters_and_stage(tmp_path):
    """What a block keeps before sending its result (a coordinator dying meanwhile loses nothing)."""
    from nnlo.optimize.trial_files import read_block_result, write_block_result

    result = {"trial": 3, "block": 1, "folds": [{"metrics": {"val_loss": 0.5}}], "elapsed": 1.0}
    write_block_result(tmp_path, 3, {"lr": 0.1, "k": 2}, 4, result)
    assert read_block_result(tmp_path, 3, {"k": 2, "lr": 0.1}, 4) == result
    assert read_block_result(tmp_path, 3, {"lr": 0.2, "k": 2}, 4) is None  # another trial took the id
    assert read_block_result(tmp_path, 3, {"lr": 0.1, "k": 2}, 8) is None  # a promotion trains on
    assert read_block_result(tmp_path, 4, {"lr": 0.1, "k": 2}, 4) is None
    (tmp_path / "trials" / "0003" / "block-result.json").write_text("{torn")
    assert read_block_result(tmp_path, 3, {"lr": 0.1, "k": 2}, 4) is None


def test_the_last_words_wait_for_a_result_being_recorded(tmp_path):
    """Issue 39, defect 14: a rank's death makes the liveness thread save the search (its last words) while the
    coordinator's thread may be recording a result: the save waits for the record, so the state it writes is
    never half of one (here: the trial finished, its result not yet told to the engine)."""
    from nnlo.optimize.engines.random import RandomEngine

    telling, go = threading.Event(), threading.Event()

    class GatedTell(RandomEngine):
        def tell(self, *args, **kwargs):
            if threading.current_thread() is not threading.main_thread():
                telling.set()
                assert go.wait(120)
            return super().tell(*args, **kwargs)

    s = Search(GatedTell(SPACE, 0), Objective.parse("val_loss"), num_iterations=2, out_dir=tmp_path)
    t = s.next_trial(0)
    recording = threading.Thread(target=lambda: s.record(t.id, [ok(0.5)], 0), daemon=True)
    recording.start()
    assert telling.wait(120)  # the coordinator's thread is inside the record
    words = threading.Thread(target=s.last_words, daemon=True)
    words.start()
    words.join(5)  # unguarded, the save is done by now (the record stays held until go)
    go.set()
    recording.join(120)
    words.join(120)
    state = json.loads((tmp_path / OPTIMIZER_STATE_FILE).read_text())
    assert [d["id"] for d in state["finished"]] == [t.id] and state["rerun"] == []
    assert len(state["engine_state"]["observations"]) == 1  # the engine was told before the save
