"""Asking ahead (nnlo.optimize.ask_ahead) in the search bookkeeping, without MPI: when it starts, that the
point handed out is the one the engine proposed from the state at the previous hand-out, and that results
told meanwhile do not leak into it."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from nnlo.optimize.ask_ahead import WORTH_IT, AskAhead, worth_it
from nnlo.optimize.engines.random import RandomEngine
from nnlo.optimize.results import Objective
from nnlo.optimize.search import Search
from nnlo.optimize.space import Real, Space

SPACE = Space([Real(0.0, 1.0, name="a"), Real(0.0, 1.0, name="b")])


class RecordingEngine(RandomEngine):
    """A random engine that notes in which thread and from how many observations each proposal was made; a
    proposal in the background thread can be held (a slow ask) until the test releases it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[str, int, int]] = []  # (thread name, observations, pending)
        self.gate = threading.Event()
        self.gate.set()

    def _propose(self, pending, rng):
        if threading.current_thread() is not threading.main_thread():
            assert self.gate.wait(10)
        self.calls.append((threading.current_thread().name, len(self.observations), len(pending)))
        return super()._propose(pending, rng)


def new_search(tmp_path, blocks=2, n=8) -> Search:
    return Search(RecordingEngine(SPACE, seed=5), Objective.parse("val_loss"), num_iterations=n, out_dir=tmp_path,
                  blocks=blocks)


def ok(v):
    return [{"metrics": {"val_loss": v}}]


QUICK = 1e-6  # a trial of a microsecond: any real ask costs more than 2 % of it (the condition is a ratio)


def test_worth_it_needs_several_blocks_and_asks_that_matter():
    assert worth_it(0.5, 1.0, blocks=2)
    assert not worth_it(0.5, 1.0, blocks=1)  # one block: a point one result staler, for nothing
    assert not worth_it(WORTH_IT * 100 * 0.5, 100.0, blocks=4)  # 1 % of a trial: ask on demand
    assert not worth_it(None, 1.0, blocks=2) and not worth_it(0.5, None, blocks=2)


def test_no_asking_ahead_before_a_trial_finished_or_with_fast_asks(tmp_path):
    s = new_search(tmp_path)
    a, b = s.next_trial(0, now=0.0), s.next_trial(1, now=0.0)
    assert not s._ahead.running  # no trial finished: no typical duration to compare with
    s.record(a.id, ok(1.0), 0, now=100.0)  # an ask of microseconds against a 100-s trial
    s.next_trial(0, now=100.0)
    assert not s._ahead.running
    assert all(name == threading.main_thread().name for name, _, _ in s.engine.calls)
    s.close()


def test_the_next_point_is_proposed_in_the_background_from_the_state_at_the_hand_out(tmp_path):
    s = new_search(tmp_path)
    a, b = s.next_trial(0, now=0.0), s.next_trial(1, now=0.0)
    s.record(a.id, ok(1.0), 0, now=QUICK)
    reference = RandomEngine(SPACE, seed=5)
    reference.load_state_dict(s.engine.state_dict())  # what the engine knows now: 1 observation
    s.engine.gate.clear()  # hold the background proposal until b's result is told
    c = s.next_trial(0, now=1.0)  # asked on demand (nothing was under way) ...
    assert s._ahead.running  # ... and the next one is already being proposed
    pending_then = [b.params, c.params]
    s.record(b.id, ok(2.0), 1, now=2.0)  # told while the proposal is under way: must not leak into it
    held = len(s.engine.calls)
    s.engine.gate.set()
    d = s.next_trial(1, now=2.0)
    # the held proposal's record (the next one may already be under way and have recorded itself too)
    name, n_obs, n_pending = s.engine.calls[held]
    assert name == "nnlo-ask-ahead" and n_obs == 1 and n_pending == 2
    reference.ask([a.params])  # c, asked from the same state (the same random stream position)
    assert reference.ask(pending_then) == d.params
    assert s.engine.n_asked == 4 == s.next_id  # the ask counter moved on as if asked in this thread
    assert len(s.engine.observations) == 2
    s.close()


def test_a_held_proposal_is_waited_for_and_nothing_is_left_running(tmp_path):
    s = new_search(tmp_path, n=4)
    a, b = s.next_trial(0, now=0.0), s.next_trial(1, now=0.0)
    s.record(a.id, ok(1.0), 0, now=QUICK)
    s.engine.gate.clear()
    holder = threading.Timer(0.2, s.engine.gate.set)
    holder.start()  # a slow background ask
    c = s.next_trial(0, now=1.0)
    assert s._ahead.running
    s.record(b.id, ok(2.0), 1, now=2.0)
    d = s.next_trial(1, now=2.0)  # waits for the proposal under way
    assert d.params != c.params and s.engine.calls[-1][0] == "nnlo-ask-ahead"
    assert not s._ahead.running  # the budget (4) is handed out: nothing more is proposed
    assert s.next_trial(0) is None
    s.close()
    assert not [t for t in threading.enumerate() if t.name == "nnlo-ask-ahead"]


def test_an_error_in_the_background_reaches_the_caller(tmp_path):
    class Broken(RandomEngine):
        def _propose(self, pending, rng):
            raise ValueError("no point today")

    ahead = AskAhead(Broken(SPACE, seed=0))
    ahead.start([])
    with pytest.raises(ValueError, match="no point today"):
        ahead.take()
    with pytest.raises(RuntimeError, match="no proposal under way"):
        ahead.take()


def test_restored_state_does_not_depend_on_a_proposal_under_way(tmp_path):
    s = new_search(tmp_path)
    a, b = s.next_trial(0, now=0.0), s.next_trial(1, now=0.0)
    s.record(a.id, ok(1.0), 0, now=QUICK)
    s.next_trial(0, now=1.0)
    assert s._ahead.running
    state = s.state_dict()
    assert state["engine_state"]["n_asked"] == s.next_id == 3  # proposals handed out, not the one under way
    s.close()
    assert np.isfinite(state["finished"][0]["fom"])
