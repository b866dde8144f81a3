"""Schedules driving the real search bookkeeping without MPI: one job's Search (budget, rung results, restore
mid-search, deadline re-runs), PBT's checkpoint copy, and a shared search's journal (pauses, resumes, leases
of a resumed job, replay)."""
from __future__ import annotations

import csv
import json
import threading

import pytest

from nnlo.errors import ConfigError
from nnlo.optimize.engines import make_engine
from nnlo.optimize.failures import FailureRule
from nnlo.optimize.journal import read_journal, rebuild
from nnlo.optimize.results import Objective
from nnlo.optimize.schedules import ScheduleSpec, make_schedule
from nnlo.optimize.search import Search
from nnlo.optimize.shared import rebuilt_engine_state, shared_search
from nnlo.optimize.space import Integer, from_dimensions, from_model
from nnlo.optimize.trial_files import inherit, read_hook_state, trial_dir, write_hook_state
from tests.helpers.env import example

curves = example("curves")  # the example's learning curves

SPACE = from_model(curves)
ASHA = ScheduleSpec("asha", max_epochs=9, min_epochs=1, eta=3)
PBT = ScheduleSpec("pbt", max_epochs=6, population=4, interval=2)


def search(tmp_path, spec=ASHA, n=12, engine="random", cls=Search, **kw):
    return cls(make_engine(engine, SPACE, 3, n_initial_points=3), Objective.parse("val_loss"), num_iterations=n,
               out_dir=tmp_path, schedule=make_schedule(spec, SPACE), **kw)


def run_job(s, trial, block=0, out=None):
    """What a block does: the hook trained from the trial's state to the job's epochs."""
    folder = trial_dir(out or s.out_dir, trial.id, 0)
    state, _ = read_hook_state(folder)
    metrics = curves.evaluate(trial.params, epochs=s.job_epochs(trial), state=state)
    write_hook_state(folder, metrics.pop("state"), s.job_epochs(trial))
    return s.record(trial.id, [{"metrics": metrics, "epochs": s.job_epochs(trial)}], block)


def drain(s, blocks=1, stop_after=None):
    """Hand out and record jobs (round robin over ``blocks``) until the search is complete, or until
    ``stop_after`` results have been recorded; returns the jobs left running (handed out, never reported)."""
    n = 0
    while True:
        running = [t for b in range(blocks) if (t := s.next_trial(b, 0.0)) is not None]
        if not running:
            assert s.complete()
            return []
        for i, t in enumerate(running):
            if stop_after is not None and n >= stop_after:
                return running[i:]
            run_job(s, t, t.block)
            n += 1


def summary(s):
    return {t.id: (t.params, [(r["rung"], r["fom"]) for r in t.rungs]) for t in s.finished.values()}


def test_an_asha_search_spends_its_budget_and_records_every_rung(tmp_path):
    s = search(tmp_path)
    drain(s, blocks=2)
    s.save()
    assert len(s.finished) == 12 and s.next_id == 12
    tops = [t for t in s.finished.values() if t.rung == 2]
    assert tops and all(t.epochs == 9 for t in tops)
    for t in s.finished.values():  # contiguous rungs, epochs of the ladder, one result per rung
        assert [r["rung"] for r in t.rungs] == list(range(t.rung + 1))
        assert [r["epochs"] for r in t.rungs] == [1, 3, 9][: t.rung + 1]
    best = json.loads((tmp_path / "best.json").read_text())
    assert best["best_epochs"] == 9 and best["best_trial"] in {t.id for t in tops}  # only full trainings count
    assert sum(best["rungs"].values()) == 12 and set(best["rungs"]) <= {"1", "3", "9"}
    rows = list(csv.DictReader((tmp_path / "trials.csv").open()))
    assert {r["epochs"] for r in rows} <= {"1", "3", "9"} and {r["rung"] for r in rows} <= {"0", "1", "2"}
    state = json.loads((tmp_path / "optimizer-state.json").read_text())
    assert state["schedule"]["name"] == "asha" and state["rerun"] == []


def test_a_restored_search_continues_as_if_never_stopped(tmp_path):
    whole = search(tmp_path / "whole")
    drain(whole)
    cut = search(tmp_path / "cut")
    [running] = drain(cut, stop_after=7)  # handed out, never reported: a kill now re-runs it
    cut.save()
    again = search(tmp_path / "cut")
    assert again.restore() and [t.id for t in again.requeue] == [running.id]
    assert again.requeue[0].target == running.target
    drain(again)
    assert summary(again) == summary(whole)
    with pytest.raises(ConfigError, match="different schedule"):
        search(tmp_path / "cut", spec=ScheduleSpec("hyperband", max_epochs=9)).restore()


def test_a_job_stopped_by_the_deadline_reruns_toward_the_same_rung(tmp_path):
    s = search(tmp_path, n=3)
    for b in range(3):
        run_job(s, s.next_trial(b))
    promoted = s.next_trial(0)
    assert promoted.target == 1 and promoted.status == "ok"  # a paused trial keeps its status while it trains on
    s.interrupted(promoted.id)
    assert s.requeue == [promoted] and promoted.target == 1
    again = s.next_trial(1)
    assert again is promoted and s.job_epochs(again) == 3
    run_job(s, again)
    assert [r["rung"] for r in s.finished[promoted.id].rungs] == [0, 1]


def test_target_counts_only_full_trainings(tmp_path):
    s = search(tmp_path, n=6, target=1.9)
    t = s.next_trial(0)
    s.record(t.id, [{"metrics": {"val_loss": 0.1}, "epochs": 1}], 0)  # rung 0: a good start, not a result
    assert not s.target_reached()


def test_pbt_children_start_from_their_donors_checkpoint(tmp_path):
    s = search(tmp_path, spec=PBT, n=8)
    drain(s, blocks=2)
    children = [t for t in s.finished.values() if t.parent is not None]
    assert children and len(s.finished) <= 8
    for c in children:
        assert c.replaces is not None and c.start_epochs is not None and c.start_epochs % 2 == 0
        # it trained on from the donor's checkpoint to a later step (unless the copy was the last one)
        assert c.rungs[0]["epochs"] > c.start_epochs or c.start_epochs == 6
    living = [t for t in s.finished.values() if t.id not in {c.replaces for c in children}]
    assert len(living) == 4 and all(t.epochs == 6 for t in living)
    rows = list(csv.DictReader((tmp_path / "trials.csv").open())) if s.save() is None else []
    assert {r["parent"] for r in rows} - {""} == {str(c.parent) for c in children}


def test_a_failing_pbt_child_leaves_the_population_whole_and_the_budget_is_spent(tmp_path):
    s = search(tmp_path, spec=PBT, n=12, failures=FailureRule.parse("1"))
    while (t := s.next_trial(0, 0.0)) is not None:
        if t.parent is not None and t.rung is None:  # every child fails (a perturbed point that diverges)
            s.record(t.id, [{"error": "x1 is nan (diverged)", "code": 1}], 0)
        else:
            run_job(s, t)
    assert s.complete() and len(s.finished) == 12  # the whole budget, not a search that stops early
    living = s.schedule.living(s.ledger())
    assert len(living) == 4 and all(t.parent is None and t.epochs == 6 for t in (s.finished[m.id] for m in living))


def test_a_pbt_search_resumed_with_a_larger_budget_is_the_same_search(tmp_path):
    from nnlo.config import TrainConfig
    from nnlo.optimize.options import SearchConfig

    def spec(n):
        return SearchConfig(schedule="pbt", num_iterations=n, pbt_interval=2).schedule_spec(TrainConfig(epochs=6))

    s = search(tmp_path, spec=spec(6), n=6)
    drain(s, stop_after=8)  # six members (the budget) and two of their steps; then the job ends
    s.save()
    more = search(tmp_path, spec=spec(16), n=16)  # --num-iterations raised, --opt-restore
    assert more.restore() and len(more.finished) == 6
    drain(more)  # the population fills up to its default and exploits with the budget it has now
    living = more.schedule.living(more.ledger())
    assert more.schedule.spec.population == 8 and len(living) == 8
    assert any(t.parent is not None for t in more.finished.values()) and len(more.finished) > 8


def test_inherit_copies_the_donors_checkpoint_at_its_result(tmp_path):
    from nnlo.checkpoint import CheckpointWriter

    for fold in range(2):
        w = CheckpointWriter(trial_dir(tmp_path, 3, fold) / "checkpoints", keep=3)
        for epoch in (2, 4):
            tmp = w.begin(epoch, epoch * 10)
            (tmp / "master.pkl").write_bytes(b"x")
            w.commit(tmp, {"epoch": epoch, "updates": epoch * 10})
    stale = trial_dir(tmp_path, 9, 0) / "leftover"
    stale.mkdir(parents=True)
    assert inherit(tmp_path, 3, 9, 2, epochs=2) == 2
    assert not stale.exists()  # a killed job's leftover in the new id's folder is gone
    assert sorted(p.name for p in (trial_dir(tmp_path, 9, 1) / "checkpoints").iterdir()) == ["ckpt-e0002-u00000020"]
    assert inherit(tmp_path, 3, 10, 2, epochs=None) == 4  # else the newest
    write_hook_state(trial_dir(tmp_path, 5, 0), {"loss": 2.0}, 4)
    write_hook_state(trial_dir(tmp_path, 5, 0), {"loss": 1.0}, 6)
    assert inherit(tmp_path, 5, 11, 1) == 6 and read_hook_state(trial_dir(tmp_path, 11, 0)) == ({"loss": 1.0}, 6)
    assert inherit(tmp_path, 5, 13, 1, epochs=4) == 4  # the state before the newest is kept too
    assert read_hook_state(trial_dir(tmp_path, 13, 0)) == ({"loss": 2.0}, 4)
    assert inherit(tmp_path, 42, 12, 1) is None  # no donor folder: a fresh start


def test_a_damaged_pbt_donor_gives_a_fresh_start_with_one_warning(tmp_path, caplog):
    s = search(tmp_path, spec=PBT, n=8)
    for _ in range(4):  # the population has its first results
        run_job(s, s.next_trial(0, 0.0))
    for tid in range(4):  # then every member's checkpoint is damaged: no donor can be read
        (trial_dir(tmp_path, tid, 0) / "hook-state.json").write_text("{torn")
    s.save()
    again = search(tmp_path, spec=PBT, n=8)  # a resume hands the same jobs out
    assert again.restore()
    caplog.set_level("WARNING", logger="nnlo.optimize.trial_files")
    child = None
    while child is None:  # members train on (a block would fail them on the damage: not the point here)
        t = again.next_trial(0, 0.0)
        assert t is not None
        if t.parent is not None:
            child = t
        else:
            again.record(t.id, [{"metrics": {"val_loss": 9.0 + t.id}, "epochs": again.job_epochs(t)}], 0)
    assert child.start_epochs is None and not trial_dir(tmp_path, child.id, 0).exists()  # it starts afresh
    warnings = [r.getMessage() for r in caplog.records if r.name == "nnlo.optimize.trial_files"]
    assert len(warnings) == 1 and f"trial {child.id}: trial {child.parent}'s checkpoint" in warnings[0]
    assert "trains from scratch" in warnings[0]
    epochs = again.job_epochs(child)
    done = run_job(again, child)  # from epoch 0 to its step
    assert done.status == "ok" and done.rungs[-1]["epochs"] == epochs


def test_a_donor_checkpoint_pruned_while_it_is_copied_is_passed_over(tmp_path, monkeypatch):
    import shutil

    from nnlo.checkpoint import CheckpointWriter
    from nnlo.optimize import trial_files

    w = CheckpointWriter(trial_dir(tmp_path, 3, 0) / "checkpoints", keep=3)
    for epoch in (2, 4):
        tmp = w.begin(epoch, epoch * 10)
        (tmp / "master.pkl").write_bytes(b"x")
        w.commit(tmp, {"epoch": epoch, "updates": epoch * 10})
    copytree = shutil.copytree

    def pruned_after_the_copy(src, dst, *a, **kw):  # the donor's training prunes it right after we copied it
        out = copytree(src, dst, *a, **kw)
        shutil.rmtree(src)
        return out

    monkeypatch.setattr(trial_files.shutil, "copytree", pruned_after_the_copy)
    assert inherit(tmp_path, 3, 9, 1, epochs=4) == 4
    assert [p.name for p in (trial_dir(tmp_path, 9, 0) / "checkpoints").iterdir()] == ["ckpt-e0004-u00000040"]
    # a damaged manifest is passed over for an older checkpoint
    (trial_dir(tmp_path, 3, 0) / "checkpoints" / "ckpt-e0002-u00000020" / "manifest.json").write_text("{torn")
    monkeypatch.setattr(trial_files.shutil, "copytree", copytree)
    assert inherit(tmp_path, 3, 10, 1, epochs=2) is None and not trial_dir(tmp_path, 10, 0).exists()


# -- a shared search ------------------------------------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def participant(tmp_path, name, clock, n=9):
    s = search(tmp_path, n=n, cls=shared_search, participant=name, lease_s=10.0, clock=clock, heartbeat=False)
    s.restore()
    return s


def test_shared_asha_pauses_in_one_job_and_resumes_in_another_and_replays(tmp_path):
    clock = Clock()
    a, b = participant(tmp_path, "a", clock), participant(tmp_path, "b", clock)
    first = [a.next_trial(0), b.next_trial(0), a.next_trial(1)]
    assert [t.id for t in first] == [0, 1, 2] and all(t.target == 0 for t in first)
    for s, t in zip((a, b, a), first, strict=True):
        run_job(s, t)
    best = min(first, key=lambda t: a.storage.shared.finished[t.id].fom)
    up = b.next_trial(1)  # b promotes whichever is best: a trial paused by a's job, or its own
    assert up.id == best.id and up.target == 1 and up.rungs == a.storage.shared.finished[best.id].rungs
    # b dies while training it on; its lease expires and a takes the job over, toward the same rung
    clock.t += 11
    a.storage._quiet_until = 0.0
    again = a.next_trial(0)
    assert again.id == best.id and again.target == 1
    run_job(a, again)
    b.record(up.id, [{"metrics": {"val_loss": 99.0}, "epochs": 3}], 1)  # b's late result: the rung is taken
    assert a.storage.shared.finished[best.id].rungs[-1]["fom"] != 99.0
    records, skipped = read_journal(tmp_path)
    assert skipped == [] and [r["kind"] for r in records].count("resume") == 1
    state = rebuild(records)  # the pure fold gives what the participants hold
    assert {i: t.rungs for i, t in state.finished.items()} == {i: t.rungs for i, t in a.storage.shared.finished.items()}
    assert rebuilt_engine_state(tmp_path)["observations"] == a.engine.state_dict()["observations"]
    while (t := a.next_trial(0)) is not None:
        run_job(a, t)
    assert a.complete() and len(a.storage.shared.finished) == 9
    assert [r["rung"] for r in a.storage.shared.finished[best.id].rungs][:2] == [0, 1]
    a.close()
    b.close()


def test_a_shared_search_with_another_schedule_is_refused(tmp_path):
    clock = Clock()
    participant(tmp_path, "a", clock).close()
    other = shared_search(make_engine("random", SPACE, 3, n_initial_points=3), Objective.parse("val_loss"),
                          num_iterations=9, out_dir=tmp_path, participant="b", clock=clock, heartbeat=False)
    with pytest.raises(ConfigError, match="different schedule"):
        other.restore()


def test_the_assignment_policy_learns_a_stages_cost_per_epoch(tmp_path):
    """Heterogeneous blocks under a schedule: the hardware-aware policy is told every stage's cost on the block
    that ran it, with the share of a whole trial the stage was (its epochs over --epochs), so a trial's cost is
    learnt per epoch, not as a total that grows with the rungs a good trial reaches."""
    s = search(tmp_path, n=4, blocks=2)
    for b in range(3):
        t = s.next_trial(b % 2, now=0.0)
        s.record(t.id, [{"metrics": {"val_loss": 1.0 + b}, "epochs": 1}], t.block, now=2.0 * (b + 1))
    up = s.next_trial(0, now=10.0)
    assert up.target == 1
    s.record(up.id, [{"metrics": {"val_loss": 0.5}, "epochs": 3}], 1, now=30.0)  # 2 more epochs, on block 1
    top = s.schedule.budgets[-1]
    costs = [(o.trial, o.seconds, o.work, o.outcome) for o, _ in s.observations()]
    assert costs[:3] == [(0, 2.0, 1 / top, "ok"), (1, 4.0, 1 / top, "ok"), (2, 6.0, 1 / top, "ok")]
    assert costs[3] == (up.id, 20.0, 2 / top, "ok") and len(costs) == 4
    assert s.observations()[3][1] == up.params


def test_a_shared_pbt_child_whose_copy_is_further_along_trains_on_to_its_next_step(tmp_path):
    """Issue 39, defect 10: the donor trained on past the step it was compared at and its checkpoint there is
    gone, so the child starts from a later one; its job is the next step above that (as in a search of its
    own), in the journal too - not the step the schedule named, which it already holds: a 0-epoch stage would
    report the donor's value as the child's."""
    clock = Clock()
    a = search(tmp_path, spec=PBT, n=8, cls=shared_search, participant="a", lease_s=10.0, clock=clock,
               heartbeat=False)
    a.restore()
    for _ in range(50):
        a.storage.catch_up()  # so the peek is the job the next hand-out takes
        job = a._job()
        assert job is not None
        if job.parent is not None:
            break
        run_job(a, a.next_trial(0))
    else:
        raise AssertionError("PBT never exploited")
    budgets = a.schedule.budgets
    donor = trial_dir(tmp_path, job.parent, 0)
    state, done = read_hook_state(donor)
    for epochs in (done + 1, budgets[job.rung]):  # the donor trained on: its state at the compared step is gone
        write_hook_state(donor, state, epochs)
    child = a.next_trial(0)
    assert child.parent == job.parent and child.start_epochs == budgets[job.rung]
    assert a.job_epochs(child) > child.start_epochs  # it trains on: its own result, not the donor's
    lease = rebuild(read_journal(tmp_path)[0]).open[child.id]  # what any participant taking it over reads
    assert lease.target == child.target and lease.job["start_epochs"] == child.start_epochs
    a.close()


def test_a_shared_pbt_childs_checkpoint_copy_runs_outside_the_journals_lock(tmp_path):
    """Issue 39, defect 9: the child is proposed (leased to this job) under the lock, its donor's checkpoint
    copied outside it - other participants append and this job's heartbeat renews the child's lease meanwhile,
    so it cannot expire and be trained by another job in the same folder - then a ``start`` record says where
    it starts."""
    copying, go = threading.Event(), threading.Event()

    def gated_inherit(*args):
        if threading.current_thread() is not threading.main_thread():
            copying.set()
            assert go.wait(120)
        return inherit(*args)

    clock = Clock()
    a = search(tmp_path, spec=PBT, n=8, cls=shared_search, participant="a", lease_s=10.0, clock=clock,
               heartbeat=False, copy_checkpoint=gated_inherit)
    a.restore()
    b = search(tmp_path, spec=PBT, n=8, cls=shared_search, participant="b", lease_s=10.0, clock=clock,
               heartbeat=False)
    b.restore()
    for _ in range(50):
        a.storage.catch_up()
        job = a._job()
        if job is not None and job.parent is not None:
            break
        run_job(a, a.next_trial(0))
    else:
        raise AssertionError("PBT never exploited")
    out: list = []
    claiming = threading.Thread(target=lambda: out.append(a.next_trial(0)), daemon=True)
    claiming.start()
    assert copying.wait(120)  # the child is proposed and leased to a; its copy is under way
    child_id = max(rebuild(read_journal(tmp_path, final=False)[0]).open)
    renewals: list = []
    other = threading.Thread(target=lambda: renewals.append((b.storage.renew(), a.storage.renew())), daemon=True)
    other.start()
    other.join(120)  # with the lock held by the copy this would wait until the test lets the copy go
    alive = other.is_alive()
    go.set()
    claiming.join(120)
    other.join(120)
    assert not alive, "renewals waited for the checkpoint copy: it ran under the journal's lock"
    assert renewals == [([], [child_id])]  # a's heartbeat renews the child's lease while it is copied
    [child] = out
    assert child.id == child_id and child.parent == job.parent and child.start_epochs is not None
    records, _ = read_journal(tmp_path)
    assert [r["kind"] for r in records if r.get("id") == child.id][:2] == ["propose", "start"]
    assert "copy" not in rebuild(records).open[child.id].job
    a.close()
    b.close()


# -- every trial handed out is pending for the engine (no copies) ------------------------------------------------
GRID = from_dimensions([Integer(1, 4, name="a"), Integer(1, 4, name="b")])  # 16 points: copies are likely


def grid_job(s, trial):
    """A deterministic learning curve of the grid's points (the later rungs reorder them a little)."""
    p, e = trial.params, s.job_epochs(trial)
    value = (p["a"] - 2.5) ** 2 + (p["b"] - 2) ** 2 / (1 + e) + 1 / e
    return s.record(trial.id, [{"metrics": {"val_loss": value}, "epochs": e}], trial.block or 0)


@pytest.mark.parametrize("spec, cls", [(ASHA, Search), (ScheduleSpec("hyperband", max_epochs=9), Search),
                                       (ASHA, shared_search)], ids=["asha", "hyperband", "shared-asha"])
def test_a_staged_search_never_proposes_a_paused_trials_point_again(tmp_path, spec, cls):
    # random proposals (Bayesian ones copy too, at more cost): 11-12 distinct of 14 before paused trials were pending
    extra = {"clock": Clock(), "participant": "p", "lease_s": 10.0, "heartbeat": False} if cls is shared_search else {}
    s = cls(make_engine("random", GRID, 3, n_initial_points=2), Objective.parse("val_loss"), num_iterations=14,
            out_dir=tmp_path, schedule=make_schedule(spec, GRID), **extra)
    s.restore()
    while True:
        running = [t for b in range(2) if (t := s.next_trial(b, 0.0)) is not None]
        if not running:
            break
        for t in running:
            grid_job(s, t)
    points = [GRID.key(t.params) for t in sorted(s.finished.values(), key=lambda t: t.id)]
    assert len(points) == 14 and len(set(points)) == len(points)  # 14 distinct points of 16
