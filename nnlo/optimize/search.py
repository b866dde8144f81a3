"""The search's bookkeeping, free of MPI: budget, hand-out, pending points, failures, results, state.

The coordinator asks :meth:`Search.next_trial` whenever a block is idle and passes each block's answer to
:meth:`Search.record`; everything else (which points are pending, when the search is over, what goes into
the checkpoint) lives here, so it can be tested without MPI and reused by the serial path of the tests.

Budget: ``num_iterations`` finished trials, failed ones included (a model that fails everywhere must not
loop forever). ``target`` ends the search once a trial's figure of merit reaches it; trials already running
are still collected. If the first ``max_failures_at_start`` trials all fail, the search stops with the first
error: the model is broken, not the parameters, and the allocation should not be burnt.

Asking ahead (:mod:`nnlo.optimize.ask_ahead`): with several blocks, once an ask costs more than 2 % of a
typical trial, the next point is proposed in the background right after each hand-out.

Assignment (:mod:`nnlo.optimize.assign`): proposals wait in a small pool (one point under FIFO, a few under
the hardware-aware policy), and the policy picks which pooled point an idle block gets. Pooled points are
pending (told to the engine as lies) like running trials. With ``--proposers P`` > 1 the points come from
the proposer ranks (:attr:`Search.propose`, set by the coordinator) instead of the engine's own ask.
"""
from __future__ import annotations

import logging
import statistics
import time
from pathlib import Path
from typing import Any

from nnlo.contract import OPTIMIZER_STATE_FILE
from nnlo.errors import ConfigError
from nnlo.optimize.ask_ahead import AskAhead, describe, worth_it
from nnlo.optimize.assign import Candidate, Fifo, Observation, Policy
from nnlo.optimize.engines import Engine, engine_options
from nnlo.optimize.results import FAILED, OK, Objective, Trial, best_trial, fold_variance, write_results
from nnlo.optimize.state import load_state, save_state

log = logging.getLogger("nnlo.optimize.search")


class Search:
    def __init__(
        self,
        engine: Engine,
        objective: Objective,
        *,
        num_iterations: int,
        out_dir: Path,
        target: float | None = None,
        n_fold: int = 1,
        max_failures_at_start: int = 3,
    ):
        if num_iterations < 1:
            raise ConfigError(f"--num-iterations must be at least 1, got {num_iterations}")
        self.engine = engine
        self.objective = objective
        self.num_iterations = num_iterations
        self.target = target
        self.n_fold = n_fold
        self.out_dir = Path(out_dir)
        self.max_failures_at_start = max_failures_at_start
        self.finished: dict[int, Trial] = {}
        self.in_flight: dict[int, Trial] = {}
        self.requeue: list[Trial] = []  # restored in-flight trials: re-run first, same id and parameters
        self.next_id = 0
        self.blocks = 1  # how many blocks run trials at once (the coordinator sets it)
        self.ask_s: float | None = None  # how long the last proposal took
        self._ahead = AskAhead(engine)
        self._ahead_announced = False
        self.assign: Policy = Fifo()  # which pooled proposal an idle block gets (the coordinator sets it)
        self.pool: list[Candidate] = []  # proposals not handed out yet (pending for the engine)
        self.propose: Any = None  # with --proposers P > 1: pending points -> a point from a proposer rank
        self.dropped = 0  # pooled proposals that expired unused (hardware-aware policy)
        self._learned = -1

    # -- hand-out ------------------------------------------------------------------------------------
    @property
    def n_ok(self) -> int:
        return sum(1 for t in self.finished.values() if t.status == OK)

    @property
    def n_failed(self) -> int:
        return sum(1 for t in self.finished.values() if t.status == FAILED)

    def broken(self) -> Trial | None:
        """The first failed trial, if every one of the first trials failed (the model, not the point, is bad)."""
        if self.n_ok == 0 and self.n_failed >= min(self.max_failures_at_start, self.num_iterations):
            return min(self.finished.values(), key=lambda t: t.id)
        return None

    def target_reached(self) -> bool:
        best = self.best()
        return best is not None and best.fom is not None and self.objective.reached(best.fom, self.target)

    def done(self) -> bool:
        """Nothing more to hand out or wait for."""
        return not self.in_flight and (not self.can_hand_out())

    def can_hand_out(self) -> bool:
        if self.target_reached() or self.broken():
            return False
        return len(self.finished) + len(self.in_flight) < self.num_iterations

    def next_trial(self, block: int, now: float | None = None) -> Trial | None:
        """A trial for an idle block, or None when the budget is spent / the target reached."""
        if not self.can_hand_out():
            self._ahead.discard()
            return None
        if self.requeue:
            trial = self.requeue.pop(0)
        else:
            self._learn()
            want = max(1, self.assign.pool_size(self.blocks))
            while len(self.pool) < want:
                self.pool.append(Candidate(self._proposal()))
            chosen = self.pool.pop(self.assign.choose(block, self.pool))
            for c in self.pool:
                c.age += 1
            for i in sorted(self.assign.expired(self.pool), reverse=True):
                del self.pool[i]
                self.dropped += 1
            trial = Trial(self.next_id, chosen.point)
            self.next_id += 1
        trial.status, trial.block, trial.started = "running", block, now if now is not None else time.time()
        self.in_flight[trial.id] = trial
        self._ask_ahead()
        return trial

    def _proposal(self) -> dict[str, Any]:
        """The next proposed point: from a proposer rank, the ask-ahead thread, or the engine now."""
        if self.propose is not None:
            t0 = time.perf_counter()
            point: dict[str, Any] = self.propose(self._pending())
            self.ask_s = time.perf_counter() - t0
        elif self._ahead.running:
            point = self._ahead.take()
            self.ask_s = self._ahead.seconds
        else:
            t0 = time.perf_counter()
            point = self.engine.ask(self._pending())
            self.ask_s = time.perf_counter() - t0
        return point

    def _learn(self) -> None:
        """Tell the assignment policy every finished trial (once per new result)."""
        if self._learned == len(self.finished):
            return
        self._learned = len(self.finished)
        self.assign.learn(self.observations())

    def observations(self) -> list[Observation]:
        """Finished trials as the assignment policy sees them (duration, block, minimised value)."""
        return [Observation(t.params, int(t.block), float(t.duration_s),
                            None if t.fom is None else self.objective.value(t.fom))
                for t in sorted(self.finished.values(), key=lambda t: t.id)
                if t.duration_s and t.block is not None and t.block < self.blocks]

    def pending(self) -> list[dict[str, Any]]:
        """Points proposed and not finished: running, to re-run, pooled (told to the engine as lies)."""
        return self._pending()

    def _pending(self) -> list[dict[str, Any]]:
        return ([t.params for t in self.in_flight.values()] + [t.params for t in self.requeue]
                + [c.point for c in self.pool])

    def typical_trial_s(self) -> float | None:
        durations = [t.duration_s for t in self.finished.values() if t.duration_s]
        return statistics.median(durations) if durations else None

    def _ask_ahead(self) -> None:
        """Start proposing the next point now, if another trial will be handed out and asks are slow."""
        if self.propose is not None or self._ahead.running or self.requeue or not self.can_hand_out():
            return  # proposer ranks propose; or the budget is handed out
        typical = self.typical_trial_s()
        if not worth_it(self.ask_s, typical, self.blocks):
            return
        if not self._ahead_announced:
            log.info(describe(self.ask_s, typical))  # type: ignore[arg-type]
            self._ahead_announced = True
        self._ahead.start(self._pending())

    def close(self) -> None:
        """Wait for a proposal still under way (none is left running when the coordinator ends)."""
        self._ahead.discard()

    # -- results -------------------------------------------------------------------------------------
    def record(self, trial_id: int, fold_results: list[dict[str, Any]], block: int, now: float | None = None) -> Trial:
        """Finish a trial from its folds' results; tell the engine; caller then :meth:`save`."""
        trial = self.in_flight.pop(trial_id)
        trial.finish(fold_results, self.objective, block, now)
        self.finished[trial.id] = trial
        self.engine.tell(trial.params, None if trial.fom is None else self.objective.value(trial.fom),
                         fold_variance(trial))
        return trial

    def interrupted(self, trial_id: int) -> None:
        """A trial stopped by the deadline: it is neither finished nor lost; it re-runs after resubmission."""
        trial = self.in_flight.pop(trial_id)
        trial.status, trial.block, trial.started = "pending", None, None
        self.requeue.append(trial)

    def best(self) -> Trial | None:
        return best_trial(list(self.finished.values()), self.objective)

    # -- persistence ---------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "space": self.engine.space.to_dict(),
            "engine_options": engine_options(self.engine),
            "engine_state": self.engine.state_dict(),
            "objective": {"name": self.objective.name, "direction": self.objective.direction},
            "n_fold": self.n_fold,
            "next_id": self.next_id,
            "finished": [t.to_dict() for t in sorted(self.finished.values(), key=lambda t: t.id)],
            # in-flight and re-queued trials are stored as "to re-run": their results never arrived
            "rerun": [{"id": t.id, "params": t.params} for t in
                      sorted([*self.in_flight.values(), *self.requeue], key=lambda t: t.id)],
        }

    def save(self) -> None:
        """State first, then the tables: the state is the checkpoint, the tables are derived from it."""
        save_state(self.out_dir, self.state_dict())
        write_results(self.out_dir, list(self.finished.values()), self.objective, self.engine.space.names,
                      self.n_fold, self.num_iterations)

    def restore(self) -> bool:
        """Load the state in ``out_dir`` if there is one; refuse one made for a different search."""
        state = load_state(self.out_dir)
        if state is None:
            return False
        path = self.out_dir / OPTIMIZER_STATE_FILE
        mismatch = []
        if state["space"] != self.engine.space.to_dict():
            mismatch.append("search space")
        if state["engine_options"] != engine_options(self.engine):
            mismatch.append(f"engine ({state['engine_options']})")
        if state["objective"] != {"name": self.objective.name, "direction": self.objective.direction}:
            mismatch.append(f"--fom ({state['objective']['name']}:{state['objective']['direction']})")
        if state["n_fold"] != self.n_fold:
            mismatch.append(f"--n-fold ({state['n_fold']})")
        if mismatch:
            raise ConfigError(
                f"{path} was written by a search with a different {', '.join(mismatch)}; "
                "rerun with the same options, or use a new --output directory"
            )
        self.engine.load_state_dict(state["engine_state"])
        self.next_id = int(state["next_id"])
        self.finished = {t.id: t for t in (Trial.from_dict(d) for d in state["finished"])}
        self.requeue = [Trial(int(d["id"]), self.engine.space.point(d["params"])) for d in state["rerun"]]
        self.in_flight = {}
        return True
