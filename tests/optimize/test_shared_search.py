"""Participants of one shared search, in one process without MPI: budget across participants, leases expiring
by an injected clock and taken over, the first result counting, the engine rebuilt from the journal."""
from __future__ import annotations

import json
import random
import threading
import time

import pytest

from nnlo.contract import OPTIMIZER_STATE_FILE, SEARCH_JOURNAL
from nnlo.errors import ConfigError
from nnlo.optimize.engines import make_engine
from nnlo.optimize.engines.random import RandomEngine
from nnlo.optimize.journal import read_journal, rebuild
from nnlo.optimize.results import Objective
from nnlo.optimize.search import Search
from nnlo.optimize.shared import JournalStorage, participant_name, rebuilt_engine_state, shared_search
from nnlo.optimize.space import Integer, Real, Space
from nnlo.stop import Stop

SPACE = Space([Real(0.0, 1.0, name="a"), Integer(0, 1000, name="b")])


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def participant(tmp_path, name, clock, engine="random", n=6, seed=0, **kw):
    s = shared_search(make_engine(engine, SPACE, seed, n_initial_points=2), Objective.parse("val_loss"),
                      num_iterations=n, out_dir=tmp_path, participant=name, lease_s=10.0, clock=clock,
                      heartbeat=False, **kw)
    s.restore()
    return s


def fom(trial):
    return [{"metrics": {"val_loss": trial.params["a"] + trial.params["b"] / 1000}}]


def test_two_participants_share_the_budget_exactly_and_a_dead_ones_trials_are_rerun(tmp_path):
    clock = Clock()
    a, b = participant(tmp_path, "a", clock), participant(tmp_path, "b", clock)
    ta = [a.next_trial(0), a.next_trial(1)]
    tb = [b.next_trial(0), b.next_trial(1)]
    assert [t.id for t in ta + tb] == [0, 1, 2, 3]
    assert len({(t.params["a"], t.params["b"]) for t in ta + tb}) == 4  # different points across participants
    a.record(0, fom(ta[0]), 0)
    ta.append(a.next_trial(0))
    b.record(2, fom(tb[0]), 0)
    tb.append(b.next_trial(0))
    assert [ta[2].id, tb[2].id] == [4, 5]
    b.record(3, fom(tb[1]), 1)
    assert b.next_trial(1) is None  # 6 trials exist: the budget is handed out, a's are alive
    # a dies (stops renewing); b renews its own; after the lease timeout b takes a's trials over
    clock.t += 6
    assert b.storage.renew() == [5]
    clock.t += 5  # a's leases (until +10) expired, b's (renewed to +16) not
    b.storage._quiet_until = 0.0
    again = b.next_trial(1)
    assert again is not None and again.id == 1 and again.params == ta[1].params  # same id, same parameters
    b.record(1, fom(again), 1)
    again = b.next_trial(1)
    assert again.id == 4 and again.params == ta[2].params
    # a was only slow: its late result of trial 4 comes first and counts; b's then is dropped
    a.record(4, fom(ta[2]), 0)
    b.record(4, [{"metrics": {"val_loss": 99.0}}], 1)
    assert a.next_trial(0) is None
    b.record(5, fom(tb[2]), 0)
    b.save()

    records, skipped = read_journal(tmp_path)
    assert skipped == []
    state = rebuild(records)
    assert sorted(state.finished) == list(range(6)) and state.open == {}
    assert [r["id"] for r in records if r["kind"] == "result"] == [0, 2, 3, 1, 4, 5]  # no id twice
    assert state.finished[4].fom != 99.0
    assert sorted(r["from"] for r in records if r["kind"] == "lease") == ["a", "a"]
    # every participant's engine equals the engine rebuilt from the journal alone
    c = participant(tmp_path, "c", clock)
    for s in (a, b):
        s.save()  # catches up on the others' records
        assert s.engine.state_dict() == c.engine.state_dict()
    obs = [[p, v] for p, v in state.observations(c.objective)]
    assert c.engine.state_dict()["observations"] == obs and c.engine.n_asked == 6
    assert c.next_trial(0) is None and len(c.finished) == 6
    assert rebuilt_engine_state(tmp_path) == c.engine.state_dict()
    table = json.loads((tmp_path / "trials.json").read_text())
    assert [t["id"] for t in table] == list(range(6))
    best = json.loads((tmp_path / "best.json").read_text())
    assert best["trials_done"] == 6 and best["trials_total"] == 6
    saved = json.loads((tmp_path / OPTIMIZER_STATE_FILE).read_text())
    assert saved["rerun"] == [] and saved["next_id"] == 6 and saved["shared"]["journal"] == SEARCH_JOURNAL
    for s in (a, b, c):
        s.close()
    assert [r["p"] for r in read_journal(tmp_path)[0] if r["kind"] == "leave"] == ["a", "b", "c"]


def test_a_released_trial_is_rerun_by_the_next_free_participant_and_a_restarted_one_takes_its_own(tmp_path):
    clock = Clock()
    a, b = participant(tmp_path, "a", clock, n=3), participant(tmp_path, "b", clock, n=3)
    t0, t1 = a.next_trial(0), a.next_trial(1)
    a.interrupted(t0.id)  # the deadline: back to the pool at once
    got = b.next_trial(0)
    assert got.id == t0.id and got.params == t0.params
    a.storage.journal.close()  # a's job is killed with trial 1 running; its chain's next job has the same name
    a2 = participant(tmp_path, "a", clock, n=3)
    mine = a2.next_trial(0)
    assert mine.id == t1.id and mine.params == t1.params  # no wait for the lease to expire
    assert b.next_trial(1).id == 2 and b.next_trial(1) is None


def test_waiting_for_trials_elsewhere_ends_at_the_stop(tmp_path):
    clock = Clock()
    a = participant(tmp_path, "a", clock, n=1)
    b = participant(tmp_path, "b", clock, n=1, stop=Stop(deadline=clock.t + 5))  # within the safety margin: stop now
    assert a.next_trial(0).id == 0
    assert b.next_trial(0) is None and b.can_hand_out() is False
    clock.t += 11
    assert b.can_hand_out() is True  # a's lease expired: b may take it over


def test_the_first_participant_fixes_the_search_and_others_must_match(tmp_path):
    participant(tmp_path, "a", Clock()).close()
    with pytest.raises(ConfigError, match=r"different num_iterations \(num_iterations 6, this job 7\)"):
        participant(tmp_path, "b", Clock(), n=7)
    with pytest.raises(ConfigError, match="different engine_options"):
        participant(tmp_path, "b", Clock(), engine="genetic")


def test_participant_names(monkeypatch):
    assert participant_name("x", {}) == "x"
    assert participant_name(None, {"NNLO_PARTICIPANT": "chain-2"}) == "chain-2"
    assert participant_name(None, {}).rsplit("-", 1)[1].isdigit()
    with pytest.raises(ConfigError, match="--participant"):
        participant_name("bad\nname", {})
    with pytest.raises(ConfigError, match="--lease-timeout"):
        shared_search(make_engine("random", SPACE, 0), Objective(), num_iterations=1, out_dir=".",
                      participant="p", lease_s=0.1)


def test_genetic_participants_breed_from_the_other_participants_results(tmp_path):
    clock = Clock()
    a = participant(tmp_path, "a", clock, engine="genetic", n=5)
    b = participant(tmp_path, "b", clock, engine="genetic", n=5)
    for i in range(5):
        s = (a, b)[i % 2]
        t = s.next_trial(0)
        s.record(t.id, fom(t), 0)
    a.save()
    b.save()
    assert len(a.engine.observations) == len(b.engine.observations) == 5
    assert a.engine.state_dict() == b.engine.state_dict() == rebuilt_engine_state(tmp_path)


def test_the_heartbeat_renews_running_trials_until_closed(tmp_path):
    s = shared_search(make_engine("random", SPACE, 0), Objective(), num_iterations=2, out_dir=tmp_path,
                      participant="a", lease_s=1.0)  # the real clock; a beat every 0.25 s
    s.restore()
    t = s.next_trial(0)
    end = time.monotonic() + 60  # the heartbeat's second renewal, however long a busy machine takes for it
    while sum(r["kind"] == "renew" for r in read_journal(tmp_path, final=False)[0]) < 2:
        assert time.monotonic() < end, "the heartbeat renewed fewer than 2 times in 60 s"
        time.sleep(0.05)
    s.close()  # gives back the lease of the trial still running
    records, _ = read_journal(tmp_path)
    renews = [r for r in records if r["kind"] == "renew"]
    assert len(renews) >= 2 and all(r["ids"] == [t.id] for r in renews)
    assert [r["kind"] for r in records][-2:] == ["release", "leave"]
    state = rebuild(records)
    assert state.open[t.id].holder is None  # in the pool for the next participant


def test_a_folder_is_joined_only_as_the_kind_of_search_it_holds(tmp_path):
    from nnlo.optimize.options import OptimizeOptions
    from nnlo.optimize.run import prepare_search

    def opts(out, **kw):
        return OptimizeOptions(out_dir=out, block_size=2, hyper_opt="random", num_iterations=3, **kw)

    shared = prepare_search(opts(tmp_path / "s", shared=True, participant="x"), SPACE)
    assert isinstance(shared.storage, JournalStorage) and (tmp_path / "s" / SEARCH_JOURNAL).exists()
    shared.close()
    with pytest.raises(ConfigError, match="add --shared"):
        prepare_search(opts(tmp_path / "s", restore=True), SPACE)
    single = prepare_search(opts(tmp_path / "o"), SPACE)
    single.save()
    with pytest.raises(ConfigError, match="without --shared"):
        prepare_search(opts(tmp_path / "o", shared=True), SPACE)


def test_the_options_travel_in_a_search_config():
    from nnlo.config import TrainConfig
    from nnlo.optimize.options import SearchConfig

    cfg = SearchConfig(shared=True, participant="chain-1", lease_timeout=30.0, output="out")
    again = SearchConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    o = again.options(TrainConfig(model="examples/branin.py", mode="allreduce"))
    assert (o.shared, o.participant, o.lease_s) == (True, "chain-1", 30.0)


def test_the_command_line_options(monkeypatch):
    from nnlo_sched.inner import parse_inner

    monkeypatch.delenv("NNLO_RUN_DIR", raising=False)
    inner = parse_inner("optimize", ["--model", "examples/branin.py", "--shared", "--participant", "p7",
                                     "--lease-timeout", "45", "--output", "o"])
    assert inner.search is not None
    o = inner.search.options(inner.train)
    assert (o.shared, o.participant, o.lease_s) == (True, "p7", 45.0)
    default = parse_inner("optimize", ["--model", "examples/branin.py"]).search
    assert default is not None and (default.shared, default.participant, default.lease_timeout) == (False, None, 120)


def test_proposer_ranks_are_refused_in_a_shared_search(monkeypatch):
    from nnlo.errors import ConfigError
    from nnlo_sched.inner import parse_inner

    monkeypatch.delenv("NNLO_RUN_DIR", raising=False)
    with pytest.raises(ConfigError, match="--proposers does not apply to a shared search"):
        parse_inner("optimize", ["--model", "examples/branin.py", "--shared", "--proposers", "2", "--output", "o"])
    ok = parse_inner("optimize", ["--model", "examples/branin.py", "--proposers", "2", "--output", "o"]).search
    assert ok is not None and ok.proposers == 2


@pytest.mark.parametrize("seed", range(8))
def test_random_schedules_of_participants_finish_with_exactly_the_budget(tmp_path, seed):
    """Participants start, hand out, record, fail, stop at a deadline, die without a word, restart under
    their name, at random moments and with a random clock: the search ends with exactly N results, no id
    twice, every result the first one reported for its trial, every engine equal to the journal's."""
    rng = random.Random(seed)
    clock, n = Clock(), 12
    live: dict[str, Search] = {}
    first: dict[int, float | None] = {}  # the first reported fom of each trial

    def report(s, tid):
        v = None if rng.random() < 0.15 else rng.random()
        folds = [{"error": "boom"}] if v is None else [{"metrics": {"val_loss": v}}]
        if tid not in first:
            first[tid] = v
        s.record(tid, folds, 0)

    for _ in range(150):
        if len(live) < 3 and rng.random() < 0.3:
            name = rng.choice([x for x in "abcde" if x not in live])
            live[name] = participant(tmp_path, name, clock, n=n)
        if not live:
            continue
        name = rng.choice(sorted(live))
        s = live[name]
        s.storage._quiet_until = 0.0
        action = rng.random()
        if action < 0.35:
            for block in (0, 1):
                if block not in {t.block for t in s.in_flight.values()}:
                    s.next_trial(block)
        elif action < 0.7 and s.in_flight:
            report(s, rng.choice(sorted(s.in_flight)))
        elif action < 0.75 and s.in_flight:
            s.interrupted(rng.choice(sorted(s.in_flight)))
        elif action < 0.85:
            s.storage.renew()
        elif action < 0.92:
            s.storage.journal.close()  # dies: no release, no leave
            del live[name]
        else:
            s.close()
            del live[name]
        clock.t += rng.uniform(0, 4)
    # one last participant finishes whatever is left, taking over expired leases
    last = participant(tmp_path, "z", clock, n=n)
    for s in live.values():
        s.storage.journal.close()
    for _ in range(10 * n):
        clock.t += 11
        last.storage._quiet_until = 0.0
        t = last.next_trial(0)
        if t is None:
            break
        report(last, t.id)
    records, skipped = read_journal(tmp_path)
    results = [r["id"] for r in records if r["kind"] == "result"]
    assert sorted(results) == list(range(n)) and not skipped
    state = rebuild(records)
    assert {i: t.fom for i, t in state.finished.items()} == first
    fresh = participant(tmp_path, "check", clock, n=n)
    last.save()
    assert last.engine.state_dict() == fresh.engine.state_dict()
    assert fresh.engine.n_asked == n and len(fresh.engine.observations) == n


class GatedEngine(RandomEngine):
    """A random engine whose proposals made outside the main thread wait for ``go`` (a proposal as slow as a
    Gaussian process at hundreds of trials, held for exactly as long as the test needs)."""

    asking: threading.Event
    go: threading.Event

    def _propose(self, pending, rng):
        if threading.current_thread() is not threading.main_thread():
            self.asking.set()
            assert self.go.wait(120)
        return super()._propose(pending, rng)


def gated(tmp_path, name, clock, n=3, **kw):
    engine = GatedEngine(SPACE, 0)
    engine.asking, engine.go = threading.Event(), threading.Event()
    s = shared_search(engine, Objective(), num_iterations=n, out_dir=tmp_path, participant=name, lease_s=10.0,
                      clock=clock, heartbeat=False, **kw)
    s.restore()
    return s


def in_thread(fn):
    """Run ``fn`` in a thread; its result (or exception) in the returned list once joined."""
    out: list = []

    def run():
        try:
            out.append(fn())
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def test_a_slow_proposal_holds_no_lock_so_another_participants_renewal_goes_through(tmp_path):
    """Issue 39, defect 9: a participant's proposal (a Gaussian process's ask may take many seconds) is asked
    outside the journal's lock: another participant's heartbeat renews its leases meanwhile (it used to wait
    for the ask, and a lease could expire and be taken over while its trial still ran)."""
    clock = Clock()
    b = gated(tmp_path, "b", clock)
    held = b.next_trial(0)  # asked in the main thread: no gate
    a = gated(tmp_path, "a", clock)
    asking, out = in_thread(lambda: a.next_trial(0))
    assert a.engine.asking.wait(120)  # a is inside its ask for trial 1
    renewing, renewed = in_thread(b.storage.renew)
    renewing.join(120)  # with the lock held by a's ask this would wait until the test lets the ask go
    alive = renewing.is_alive()
    a.engine.go.set()
    asking.join(120)
    renewing.join(120)
    assert not alive, "b's renewal waited for a's proposal: the ask held the journal's lock"
    assert renewed == [[held.id]]
    [trial] = out
    assert trial.id == held.id + 1
    kinds = [(r["kind"], r["p"], r.get("ids", r.get("id"))) for r in read_journal(tmp_path)[0]]
    assert kinds[-2:] == [("renew", "b", [held.id]), ("propose", "a", trial.id)]
    a.close()
    b.close()


def test_a_proposal_made_stale_meanwhile_is_asked_again_for_the_next_id(tmp_path):
    """The ask outside the lock saw a state another participant changed before it appended: the id it asked
    for is taken, so the decision is taken again (a new id, its own random stream) - no id proposed twice."""
    clock = Clock()
    a, b = gated(tmp_path, "a", clock), gated(tmp_path, "b", clock)
    asking, out = in_thread(lambda: a.next_trial(0))
    assert a.engine.asking.wait(120)  # a asks for trial 0 ...
    assert b.next_trial(0).id == 0  # ... while b proposes it
    a.engine.go.set()
    asking.join(120)
    [trial] = out
    assert trial.id == 1
    records, skipped = read_journal(tmp_path)
    assert not skipped and [r["id"] for r in records if r["kind"] == "propose"] == [0, 1]
    a.close()
    b.close()


def test_the_quiet_period_after_an_empty_claim_is_an_interval_not_a_wall_time(tmp_path):
    """Issue 39, defect 14: a participant that found nothing to claim waits a moment before it looks again,
    measured on the monotonic clock: a wall clock stepped back (NTP) does not keep it quiet for the step.
    Leases' ends stay wall times, as the journal records them for every node."""
    wall, mono = Clock(), Clock()
    a = participant(tmp_path, "a", wall, n=1, monotonic=mono)
    b = participant(tmp_path, "b", wall, n=1, monotonic=mono)
    t = a.next_trial(0)
    assert b.next_trial(0) is None  # nothing to claim: b stays quiet for a moment
    a.interrupted(t.id)  # back to the pool
    wall.t -= 3600  # the wall clock is stepped back an hour
    mono.t += 2 * b.storage.poll_s  # the moment has passed
    again = b.next_trial(0)
    assert again is not None and again.id == t.id
    a.close()
    b.close()


def test_a_dead_rank_gives_the_running_trials_back_at_once_and_stops_their_leases(tmp_path):
    """What the coordinator does when a rank of its job died (nnlo.liveness's last words): every trial it runs
    returns to the pool at once, for another participant; its lease is never renewed again."""
    from nnlo.optimize.run import _last_words

    clock = Clock()
    a, b = participant(tmp_path, "a", clock, n=4), participant(tmp_path, "b", clock, n=4)
    t0, t1 = a.next_trial(0), a.next_trial(1)
    _last_words(a)()  # the lease (10 s on this clock) has not run out: only the release gives them back
    assert a.storage.renew() == []
    assert [b.next_trial(0).id, b.next_trial(1).id] == [t0.id, t1.id]
    records, _ = read_journal(tmp_path)
    assert [r["id"] for r in records if r["kind"] == "release"] == [t0.id, t1.id]
    assert not any(r["kind"] == "leave" for r in records)  # the job ends by its abort, not by leaving the search
