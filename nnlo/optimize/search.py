"""The search's bookkeeping, free of MPI: budget, hand-out, pending points, failures, results, state.

The coordinator asks :meth:`Search.next_trial` whenever a block is idle and passes each block's answer to
:meth:`Search.record`; everything else (which points are pending, when the search is over, what goes into
the checkpoint) lives here, so it can be tested without MPI and reused by the serial path of the tests.

Budget: ``num_iterations`` finished trials, failed ones included (a model that fails everywhere must not
loop forever). ``target`` ends the search once a trial's figure of merit reaches it; trials already running
are still collected. When the failure rule (:mod:`nnlo.optimize.failures`, ``--max-failures``: by default more
than half of at least 8 finished trials failed) says so, the search stops with the first error: the model is
broken, not the parameters, and the allocation should not be burnt.

Asking ahead (:mod:`nnlo.optimize.ask_ahead`): with several blocks, once an ask costs more than 2 % of a
typical trial, the next point is proposed in the background right after each hand-out.

Assignment (:mod:`nnlo.optimize.assign`): proposals wait in a small pool (one point under FIFO, a few under
the hardware-aware policy), and the policy picks which pooled point, or trial to re-run, an idle block gets -
or that it waits. Pooled points are pending (told to the engine as lies) like running trials. With
``--proposers P`` > 1 the points come from the proposer ranks (:attr:`Search.propose`, set by the coordinator)
instead of the engine's own ask. Every job a block ran leaves a cost observation (:attr:`Search.costs`, kept
in the state) the policy learns from; a trial that ran out of memory re-runs on a block it may fit
(:meth:`Search.out_of_memory`), else it fails. Under a schedule the schedule picks the job; placement picks a
new trial's point from the pool and checks that a trial trained on fits the block (memory, deadline), its cost
the rest of its stage.

Schedules (``--schedule asha|hyperband|pbt``, :mod:`nnlo.optimize.schedules`): a trial trains in stages.
The schedule picks each free block's job - a new trial at some rung, or an existing trial trained on to a
higher rung (from its own checkpoint) - and every rung's result is recorded in the trial (``rungs``); the
engine is fed the results of one rung (:func:`nnlo.optimize.schedules.ledger.feed`). The budget counts trials
started; the search is complete when the schedule has no job left and nothing runs. Under ``full`` (no
schedule) everything is as it was.
"""
from __future__ import annotations

import bisect
import logging
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from nnlo.contract import OPTIMIZER_STATE_FILE
from nnlo.errors import ConfigError
from nnlo.optimize.ask_ahead import AskAhead, describe, worth_it
from nnlo.optimize.assign import MORE, Candidate, Fifo, Policy, Running, Situation
from nnlo.optimize.engines import Engine, engine_options
from nnlo.optimize.failures import FailureRule
from nnlo.optimize.placement import BlockType, CostObservation, Traits, TraitsOf
from nnlo.optimize.results import (
    FAILED,
    OK,
    Objective,
    Trial,
    best_trial,
    fold_variance,
    mean_variance,
    write_results,
)
from nnlo.optimize.schedules import Job, Ledger, Schedule, ScheduleSpec
from nnlo.optimize.schedules.ledger import RungResults, min_results, pending
from nnlo.optimize.state import load_state, save_state

log = logging.getLogger("nnlo.optimize.search")


def _identity(options: dict[str, Any]) -> dict[str, Any]:
    """The engine options that make a search what it is: all but the size of its initial random design, which
    a continued search may change (``--n-initial-points``; a larger budget keeps the design it started with)."""
    return {k: v for k, v in options.items() if k != "n_initial_points"}


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
        failures: FailureRule | None = None,
        schedule: Schedule | None = None,
    ):
        if num_iterations < 1:
            raise ConfigError(f"--num-iterations must be at least 1, got {num_iterations}")
        self.engine = engine
        self.objective = objective
        self.num_iterations = num_iterations
        self.target = target
        self.n_fold = n_fold
        self.out_dir = Path(out_dir)
        self.failures = failures or FailureRule.default()
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
        self.costs: list[CostObservation] = []  # every job a block ran (the policy learns from them)
        self.block_types: list[BlockType] = []  # each block's hardware (the coordinator sets it)
        # params -> Traits (the run sets the model module's hooks)
        self.traits_of: Callable[[dict[str, Any]], Traits] = TraitsOf(engine.space)
        self.deadline: float | None = None  # jobs must reach a checkpoint by then (the coordinator sets it)
        self._learned = -1
        self._waiting: dict[int, tuple[Any, ...]] = {}  # block -> the state in which the policy said wait
        self.schedule = schedule  # None: --schedule full (every trial trains --epochs at once)
        self._version = 0  # bumped by every change of the trials: the schedule's job is asked once per state
        self._asked: tuple[int, Job | None] = (-1, None)
        self._ledger = Ledger()  # the schedule's view of every trial, updated trial by trial (_touch)
        self._results = RungResults(min_results(engine))  # what the engine is told under a schedule
        self._stages: list[float] = []  # durations of every stage (schedules), sorted: the typical job
        self._counted: tuple[int, tuple[int, int]] = (-1, (0, 0))

    # -- hand-out ------------------------------------------------------------------------------------
    @property
    def n_ok(self) -> int:
        return self._tally()[0]

    @property
    def n_failed(self) -> int:
        return self._tally()[1]

    def _tally(self) -> tuple[int, int]:
        """(ok, failed) finished trials (recounted when the trials changed other than by :meth:`record`)."""
        if self._counted[0] != self._version:
            ok = sum(1 for t in self.finished.values() if t.status == OK)
            failed = sum(1 for t in self.finished.values() if t.status == FAILED)
            self._counted = (self._version, (ok, failed))
        return self._counted[1]

    def _recount(self, before: str | None, after: str) -> None:
        """Keep the tally across a result (``before``: the trial's status before it, None if unfinished)."""
        ok, failed = self._tally()
        ok += (after == OK) - (before == OK)
        failed += (after == FAILED) - (before == FAILED)
        self._counted = (self._version, (ok, failed))

    def broken(self) -> Trial | None:
        """The first failed trial, once the failure rule stops the search (the model, not the point, is bad)."""
        if self.failures.stops(self.n_failed, len(self.finished), self.num_iterations):
            return min((t for t in self.finished.values() if t.status == FAILED), key=lambda t: t.id)
        return None

    def target_reached(self) -> bool:
        if self.target is None:
            return False
        if self.schedule is not None:  # only a trial trained to --epochs counts
            return any(t.status == OK and t.fom is not None and self.objective.reached(t.fom, self.target)
                       for t in self.finished.values() if self._completed(t))
        best = self.best()
        return best is not None and best.fom is not None and self.objective.reached(best.fom, self.target)

    def done(self) -> bool:
        """Nothing more to hand out or wait for."""
        return not self.in_flight and (not self.can_hand_out())

    def complete(self) -> bool:
        """The search has ended for good: budget done (every staged trial as far as its schedule takes it),
        target reached, or the model broken (a search stopped by a deadline is not complete)."""
        if self.target_reached() or self.broken() is not None:
            return True
        if self.schedule is None:
            return len(self.finished) >= self.num_iterations and not self.requeue
        return not self.in_flight and not self.requeue and self._job() is None

    def can_hand_out(self) -> bool:
        if self.target_reached() or self.broken():
            return False
        if self.schedule is not None:
            return bool(self.requeue) or self._job() is not None
        return len(self.finished) + len(self.in_flight) < self.num_iterations

    def next_trial(self, block: int, now: float | None = None) -> Trial | None:
        """A trial for an idle block, or None when the budget is spent / the target reached (under a
        schedule: also when nothing can run until a running trial reports), or when the policy has the block
        wait (nothing fits it before the deadline; in the tail, a faster block will)."""
        if not self.can_hand_out():
            self._ahead.discard()
            return None
        now = time.time() if now is None else now
        if self._waiting.get(block) == self._token(now):
            return None  # nothing changed since the policy said wait
        if self._give_up_unplaceable(block, now):
            return self.next_trial(block, now)  # the budget and the candidates changed
        trial = self._placed(block, now)
        if trial is None:
            if self._give_up_unplaceable(block, now):  # a new proposal fits no block
                return self.next_trial(block, now)
            self._waiting[block] = self._token(now)
            return None
        if not trial.rungs:  # a trial with results keeps its status (ok) while it trains on
            trial.status = "running"
        trial.block, trial.started = block, now
        self.in_flight[trial.id] = trial
        self._touch(trial)
        tally = self._tally()
        self.changed()
        self._counted = (self._version, tally)  # a hand-out finishes nothing
        self._ask_ahead()
        return trial

    def _placed(self, block: int, now: float) -> Trial | None:
        """The job the policy gives ``block``: a trial to re-run or a pooled point (under a schedule: the
        schedule's job, checked to fit the block), or None (the block waits)."""
        self._learn()
        if self.schedule is None:
            remaining = self.num_iterations - len(self.finished) - len(self.in_flight)
            chosen = self._choose(block, now, self.requeue, remaining)
        elif self.requeue:
            chosen = self._choose(block, now, self.requeue, None, new=False)
        else:
            job = self._job()
            assert job is not None  # can_hand_out() said so
            if job.trial is not None or job.params is not None:  # the schedule's own point: it must fit
                trial = self.finished.get(job.trial) if job.trial is not None else None
                params = trial.params if trial is not None else dict(job.params or {})
                fits = self.assign.choose(block, [Candidate(params, age=1 << 30, work=self._work(trial, job.rung))],
                                          self._situation(block, now, None)) >= 0
                return self._start(job, self.next_id, block) if fits else None
            chosen = self._choose(block, now, [], None, work=self._work(None, job.rung))
            return None if chosen is None else self._start(job, self.next_id, block, chosen.point)
        if chosen is None:
            return None
        if chosen.trial is not None:
            return chosen.trial
        trial = Trial(self.next_id, chosen.point)
        self.next_id += 1
        return trial

    def _choose(self, block: int, now: float, reruns: list[Trial], remaining: int | None, new: bool = True,
                work: float = 1.0) -> Candidate | None:
        """The policy's pick for ``block`` among ``reruns`` and (``new``) the pool, filled with proposals as
        the policy asks; taken out of the re-runs or the pool. None: the block waits."""
        fresh = None if remaining is None else remaining - len(self.requeue)  # proposals that may still come
        situation = self._situation(block, now, remaining)
        reran = [Candidate(t.params, age=1 << 30, trial=t, work=self._work(t, t.target)) for t in reruns]
        filled = not new or not reran  # a trial to re-run that the block takes needs no new proposal first
        while True:
            if not filled:
                pick = self.assign.choose(block, reran, situation)
                if pick >= 0:
                    candidates = reran
                    break
                filled = True
            want = max(1, self.assign.pool_size(self.blocks, remaining)) if new else 0
            while len(self.pool) < (want if fresh is None else min(want, fresh)):
                self.pool.append(Candidate(self._proposal()))
            for c in self.pool:
                c.work = work
            candidates = reran + (self.pool if new else [])
            pick = self.assign.choose(block, candidates, situation)
            if pick != MORE or not new or (fresh is not None and len(self.pool) >= fresh):
                break
            self.pool.append(Candidate(self._proposal()))
        if pick < 0:
            return None
        chosen = candidates[pick]
        if chosen.trial is not None:
            self.requeue.remove(chosen.trial)
        else:
            self.pool.remove(chosen)
            for c in self.pool:
                c.age += 1
        return chosen

    def _work(self, trial: Trial | None, rung: int | None) -> float:
        """The share of a whole trial a job is: 1, or under a schedule the epochs from where the trial stands
        to its rung's budget, over the most epochs a trial trains."""
        if self.schedule is None or rung is None:
            return 1.0
        budgets = self.schedule.budgets
        done = 0 if trial is None else int(trial.epochs or trial.start_epochs or 0)
        return max(1, budgets[rung] - done) / budgets[-1]

    def _give_up_unplaceable(self, block: int, now: float) -> bool:
        """Record as failed every trial to re-run and pooled point no block of this job can hold (it ran out
        of memory on every type here, or declares more memory than any has); True if there was one."""
        gone = False
        for c in [*(Candidate(t.params, trial=t) for t in self.requeue), *self.pool]:
            why = self.assign.placeable(c.point)
            if why is None:
                continue
            if c.trial is not None:
                self.requeue.remove(c.trial)
                trial = c.trial
            else:
                self.pool.remove(c)
                trial = Trial(self.next_id, c.point)
                self.next_id += 1
            trial.started = None
            self.in_flight[trial.id] = trial
            if self.schedule is not None and trial.target is None:
                trial.target = 0
            self.record(trial.id, [{"error": f"it fits no block of this job: {why}", "code": 1}] * self.n_fold,
                        block, now)
            gone = True
        return gone

    def _token(self, now: float) -> tuple[Any, ...]:
        """Changes whenever a hand-out, result, re-run, proposal, observation or the deadline could change a
        choice, and every second (a running job passes its first checkpoint, or overruns its prediction)."""
        return (self._version, len(self.pool), len(self.costs), self.next_id, self.deadline, int(now))

    def _situation(self, block: int, now: float, remaining: int | None) -> Situation:
        busy = {t.block for t in self.in_flight.values()}
        return Situation(now, tuple(b for b in range(self.blocks) if b not in busy and b != block),
                         tuple(Running(int(t.block), t.params, float(t.started or now), self._work(t, t.target))
                               for t in self.in_flight.values() if t.block is not None),
                         remaining, self.deadline)

    # -- schedules -----------------------------------------------------------------------------------
    @property
    def staged(self) -> bool:
        return self.schedule is not None

    def schedule_spec(self) -> ScheduleSpec:
        return self.schedule.spec if self.schedule is not None else ScheduleSpec()

    def job_epochs(self, trial: Trial) -> int | None:
        """The epochs ``trial``'s job trains to (in total); None under ``full`` (the options' --epochs)."""
        if self.schedule is None or trial.target is None:
            return None
        return self.schedule.budgets[trial.target]

    def ledger(self) -> Ledger:
        """Every trial as the schedule sees it (running ones with the rung they train toward)."""
        return self._ledger

    def _touch(self, trial: Trial) -> None:
        """``trial`` changed (started, reported, re-queued): update its view in the ledger."""
        if self.schedule is None:
            return
        from nnlo.optimize.schedules.ledger import view

        running = trial.target if trial.id in self.in_flight or any(t is trial for t in self.requeue) else None
        self._ledger.update(view(trial, self.objective, running))

    def _rebuild_ledger(self) -> None:
        from nnlo.optimize.schedules.ledger import ledger

        jobs = [*self.in_flight.values(), *self.requeue]
        self._ledger = ledger([*self.finished.values(), *jobs], self.objective, {t.id: t.target for t in jobs})

    def _new_allowed(self) -> bool:
        return self.next_id < self.num_iterations and not self.target_reached() and self.broken() is None

    def _job(self) -> Job | None:
        """The schedule's next job now (a pure question: asking twice gives the same job, so it is asked once
        per state of the trials)."""
        assert self.schedule is not None
        if self._asked[0] != self._version:
            job = self.schedule.next_job(self.ledger(), new=self._new_allowed(), rng=self._rng(self.next_id))
            self._asked = (self._version, job)
        return self._asked[1]

    def changed(self) -> None:
        """The trials changed (a hand-out, a result, a re-run, or another participant's records)."""
        self._version += 1

    def _rng(self, tid: int) -> np.random.Generator:
        """The stream of the schedule's draws for the job that may become trial ``tid``: the same state gives
        the same job (a peek and the hand-out agree; a restored search draws as the uninterrupted one)."""
        return np.random.default_rng([self.engine.seed, 0x5C4, tid, self._results.total])

    def _start(self, job: Job, tid: int, block: int, point: dict[str, Any] | None = None) -> Trial:
        """The trial ``job`` trains: an existing one to a higher rung, or a new one (id ``tid``; its point the
        schedule's, else ``point``)."""
        if job.trial is not None:
            trial = self.finished[job.trial]
            trial.target = job.rung
            return trial
        params = dict(job.params) if job.params is not None else dict(point or {})
        trial = self._new_trial(job, tid, params)
        self.next_id = max(self.next_id, tid + 1)
        return trial

    def _new_trial(self, job: Job, tid: int, params: dict[str, Any]) -> Trial:
        """Trial ``tid`` of ``job``; PBT's child gets its parent's checkpoint copied into its folder first."""
        trial = Trial(tid, params, bracket=job.bracket, parent=job.parent, replaces=job.replaces, target=job.rung)
        if job.parent is not None and self.schedule is not None:
            from nnlo.optimize.trial_files import inherit

            budgets = self.schedule.budgets
            # the donor's checkpoint at the step it was compared (it may have trained on since)
            start = inherit(self.out_dir, job.parent, tid, self.n_fold, budgets[max(0, job.rung - 1)], params)
            trial.start_epochs = start
            if start is not None and start >= budgets[job.rung]:  # the copy is further along: its next step
                trial.target = next((k for k, b in enumerate(budgets) if b > start), len(budgets) - 1)
            log.info("trial %d starts from trial %d's checkpoint (epoch %s) with %s, in the place of trial %s",
                     tid, job.parent, start, params, job.replaces)
        return trial

    def _trial(self, tid: int) -> Trial | None:
        return self.finished.get(tid) or self.in_flight.get(tid)

    def _completed(self, trial: Trial) -> bool:
        if self.schedule is None:
            return True
        from nnlo.optimize.schedules.ledger import view

        return self.schedule.completed(view(trial, self.objective))

    def _feed(self) -> None:
        """Tell the engine the results of the rung its model learns from (a schedule's search)."""
        self._results.feed(self.engine)

    def _rebuild_results(self) -> None:
        """What is kept up to date result by result, from the trial records (a restored or shared search)."""
        self._results = RungResults.of(self.finished.values(), self.objective, min_results(self.engine))
        self._stages = sorted(float(r["duration_s"]) for t in self.finished.values() for r in t.rungs
                              if r.get("duration_s"))

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
        """Tell the assignment policy every cost observation (once per new one; FIFO learns nothing)."""
        if self._learned == len(self.costs) or isinstance(self.assign, Fifo):
            return
        self._learned = len(self.costs)
        self.assign.learn(self.observations())

    def observations(self) -> list[tuple[CostObservation, dict[str, Any] | None]]:
        """The cost observations with their trials' parameters (None where the trial is not known here)."""
        known = {**{t.id: t for t in self.requeue}, **self.in_flight, **self.finished}
        return [(o, known[o.trial].params if o.trial in known else None) for o in self.costs]

    # -- cost observations ---------------------------------------------------------------------------
    def block_type(self, block: int) -> BlockType:
        return self.block_types[block] if block < len(self.block_types) else BlockType(1)

    def traits(self, params: dict[str, Any]) -> Traits:
        return self.traits_of(params)

    def observe(self, trial: Trial, block: int, seconds: float, outcome: str, work: float = 1.0) -> CostObservation:
        """Keep what the job cost (:attr:`costs`; a shared search appends it to its journal)."""
        traits = self.traits(trial.params)
        obs = CostObservation(trial.id, traits.cls, traits.size, self.block_type(block), max(0.0, seconds),
                              outcome, work, traits.memory_gb)
        self._keep(obs)
        return obs

    def observe_job(self, trial: Trial, block: int, outcome: str) -> None:
        """Keep what the job that just finished ``trial`` (or, under a schedule, its last stage) cost."""
        if not trial.rungs:
            if trial.duration_s is not None:
                self.observe(trial, block, trial.duration_s, outcome)
            return
        last = trial.rungs[-1]
        before = trial.rungs[-2].get("epochs") if len(trial.rungs) > 1 else trial.start_epochs
        trained = int(last.get("epochs") or 0) - int(before or 0)
        if last.get("duration_s") and trained > 0 and self.schedule is not None:
            self.observe(trial, block, float(last["duration_s"]), outcome, trained / self.schedule.budgets[-1])

    def _keep(self, obs: CostObservation) -> None:
        self.costs.append(obs)

    def out_of_memory(self, trial_id: int, fold_results: list[dict[str, Any]], block: int,
                      now: float | None = None) -> str | None:
        """A fold of the trial ran out of memory on ``block``: if the policy may place it on another block,
        re-queue it there and say where it cannot go (the caller then saves); else None (the trial is then
        recorded as failed, as any other)."""
        if not any(f.get("oom") for f in fold_results) or isinstance(self.assign, Fifo):
            return None
        trial = self.in_flight[trial_id]
        now = time.time() if now is None else now
        self.observe(trial, block, now - (now if trial.started is None else trial.started), "oom",
                     self._work(trial, trial.target))
        self._learn()
        if self.assign.placeable(trial.params) is not None:
            return None
        self.interrupted(trial_id)
        return f"it re-runs on another block type than {self.block_type(block)}"

    def pending(self) -> list[dict[str, Any]]:
        """Points proposed and not finished: running, to re-run, pooled (told to the engine as lies)."""
        return self._pending()

    def _pending(self) -> list[dict[str, Any]]:
        """Every trial handed out that the engine does not observe (:func:`~.schedules.ledger.pending`: under a
        schedule paused ones too), and pooled points."""
        return pending([*self.in_flight.values(), *self.requeue, *self.finished.values()], self._results) + [
            c.point for c in self.pool]

    def typical_trial_s(self) -> float | None:
        """The median duration of a job: a whole trial, or under a schedule one stage of one."""
        if self.schedule is not None:
            stages = self._stages
            if not stages:
                return None
            mid = len(stages) // 2
            return stages[mid] if len(stages) % 2 else (stages[mid - 1] + stages[mid]) / 2
        durations = [t.duration_s for t in self.finished.values() if t.duration_s]
        return statistics.median(durations) if durations else None

    def _ask_ahead(self) -> None:
        """Start proposing the next point now, if another trial will be handed out and asks are slow."""
        if self.propose is not None or self._ahead.running or self.requeue:
            return  # proposer ranks propose
        typical = self.typical_trial_s()
        if not worth_it(self.ask_s, typical, self.blocks) or not self.can_hand_out():
            return  # asks are cheap; or the budget is handed out
        if self.schedule is not None:
            job = self._job()
            if job is None or not job.new or job.params is not None:
                return  # the next job trains a trial on, or its point is the schedule's
        if not self._ahead_announced:
            log.info(describe(self.ask_s, typical))  # type: ignore[arg-type]
            self._ahead_announced = True
        self._ahead.start(self._pending())

    def close(self) -> None:
        """Wait for a proposal still under way (none is left running when the coordinator ends)."""
        self._ahead.discard()

    # -- results -------------------------------------------------------------------------------------
    def record(self, trial_id: int, fold_results: list[dict[str, Any]], block: int, now: float | None = None) -> Trial:
        """Finish a trial (under a schedule: its rung) from its folds' results; tell the engine; caller then
        :meth:`save`."""
        trial = self.in_flight.pop(trial_id)
        before = trial.status if trial.id in self.finished else None
        self._tally()
        self.changed()
        self._counted = (self._version, self._counted[1])
        if self.schedule is not None:
            assert trial.target is not None, f"trial {trial_id} ran without a rung"
            trial.finish_stage(fold_results, self.objective, block, trial.target,
                               self.schedule.budgets[trial.target], now)
            self.finished[trial.id] = trial
            self._recount(before, trial.status)
            self._touch(trial)
            last = trial.rungs[-1]
            value = None if trial.fom is None else self.objective.value(trial.fom)
            self._results.add(trial.params, int(trial.rung or 0), value,
                              mean_variance(last["fom"], last["fom_std"], last["fold_foms"]))
            if last.get("duration_s"):
                bisect.insort(self._stages, float(last["duration_s"]))
            self.observe_job(trial, block, trial.status)
            self._feed()
            return trial
        trial.finish(fold_results, self.objective, block, now)
        self.finished[trial.id] = trial
        self._recount(before, trial.status)
        self.observe_job(trial, block, trial.status)
        self.engine.tell(trial.params, None if trial.fom is None else self.objective.value(trial.fom),
                         fold_variance(trial))
        return trial

    def interrupted(self, trial_id: int) -> None:
        """A trial stopped by the deadline: it is neither finished nor lost; it re-runs after resubmission
        (under a schedule: the same job, toward the same rung, from its checkpoint)."""
        trial = self.in_flight.pop(trial_id)
        self.changed()
        if not trial.rungs:
            trial.status = "pending"
        trial.block, trial.started = None, None
        self.requeue.append(trial)
        self._touch(trial)

    def best(self) -> Trial | None:
        return best_trial(list(self.finished.values()), self.objective)

    # -- persistence ---------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        staged = {"schedule": self.schedule.spec.to_dict()} if self.schedule is not None else {}
        return {
            **staged,
            "space": self.engine.space.to_dict(),
            "engine_options": engine_options(self.engine),
            "engine_state": self.engine.state_dict(),
            "objective": {"name": self.objective.name, "direction": self.objective.direction},
            "n_fold": self.n_fold,
            "next_id": self.next_id,
            "finished": [t.fields() for t in sorted(self.finished.values(), key=lambda t: t.id)],
            # in-flight and re-queued trials are stored as "to re-run": their results never arrived
            "rerun": [self._rerun_entry(t) for t in sorted([*self.in_flight.values(), *self.requeue],
                                                           key=lambda t: t.id)],
            "costs": [o.to_record() for o in self.costs],
        }

    def _rerun_entry(self, trial: Trial) -> dict[str, Any]:
        """:func:`rerun_entry`, and for a running trial where it runs (to learn from a rank the OOM killer
        takes: :meth:`_rank_death`)."""
        entry = rerun_entry(trial)
        if trial.id in self.in_flight and trial.block is not None:
            traits = self.traits(trial.params)
            entry["running_on"] = {"block": trial.block, "type": self.block_type(trial.block).to_dict(),
                                   "class": traits.cls, "size": traits.size, "memory_gb": traits.memory_gb,
                                   "work": self._work(trial, trial.target)}
        return entry

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
        if _identity(state["engine_options"]) != _identity(engine_options(self.engine)):
            mismatch.append(f"engine ({state['engine_options']})")
        if state["objective"] != {"name": self.objective.name, "direction": self.objective.direction}:
            mismatch.append(f"--fom ({state['objective']['name']}:{state['objective']['direction']})")
        if state["n_fold"] != self.n_fold:
            mismatch.append(f"--n-fold ({state['n_fold']})")
        saved = ScheduleSpec.from_dict(state.get("schedule"))
        if saved != self.schedule_spec():
            mismatch.append(f"schedule ({describe_schedule(saved)})")
        if mismatch:
            raise ConfigError(
                f"{path} was written by a search with a different {', '.join(mismatch)}; "
                "rerun with the same options, or use a new --output directory"
            )
        self.engine.load_state_dict(state["engine_state"])
        self.next_id = int(state["next_id"])
        self.finished = {t.id: t for t in (Trial.from_dict(d) for d in state["finished"])}
        for t in self.finished.values():
            t.target = None  # jobs under way when the state was saved are the "rerun" entries
        self.requeue = [rerun_trial(d, self.finished, self.engine.space) for d in state["rerun"]]
        self.in_flight = {}
        try:
            self.costs = [CostObservation.from_record(d) for d in state.get("costs", [])]
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"{path} holds a malformed cost observation ({e}); restore the file, or use a new "
                              "--output directory") from None
        self._rank_death(state["rerun"])
        self.changed()
        if self.schedule is not None:
            self._rebuild_ledger()
            self._rebuild_results()
            self._feed()
        return True

    def _rank_death(self, rerun: list[dict[str, Any]]) -> None:
        """The last job ended because a block's rank was killed (the fate :mod:`nnlo.rankfate` kept): by
        SIGKILL, the OOM killer's signal, the trial that block ran ran out of memory on its type."""
        from nnlo.contract import RANKS_DIR
        from nnlo.optimize.block import block_of_label
        from nnlo.optimize.placement.memory import killed_out_of_memory
        from nnlo.rankfate import take_fate

        fate = take_fate(self.out_dir / RANKS_DIR)
        if fate is None:
            return
        block = block_of_label(fate.role)
        for obs in killed_out_of_memory(fate.signal, block, rerun):
            self.costs.append(obs)
            log.warning("trial %s was running on block %d when %s: taken as out of memory on blocks of %s",
                        obs.trial, block, fate.line().split(";")[0], obs.block_type)


def rerun_entry(trial: Trial) -> dict[str, Any]:
    """A job to re-run, as the state stores it: the trial's id and parameters, and under a schedule the rung
    it trains toward and where it comes from."""
    entry: dict[str, Any] = {"id": trial.id, "params": trial.params}
    if trial.target is not None:
        entry.update(target=trial.target, bracket=trial.bracket, parent=trial.parent, replaces=trial.replaces,
                     start_epochs=trial.start_epochs)
    return entry


def rerun_trial(entry: dict[str, Any], finished: dict[int, Trial], space: Any) -> Trial:
    """The trial a stored :func:`rerun_entry` re-runs (the finished record itself when it has results)."""
    tid = int(entry["id"])
    trial = finished.get(tid) or Trial(tid, space.point(entry["params"]), bracket=entry.get("bracket"),
                                       parent=entry.get("parent"), replaces=entry.get("replaces"),
                                       start_epochs=entry.get("start_epochs"))
    trial.target = entry.get("target")
    return trial


def describe_schedule(spec: ScheduleSpec) -> str:
    """``asha, epochs 1..27, eta 3`` (for messages)."""
    if spec.name == "full":
        return f"full, {spec.max_epochs} epochs" if spec.max_epochs > 1 else "full"
    if spec.name == "pbt":
        return (f"pbt, population {spec.population}, every {spec.interval} of {spec.max_epochs} epochs")
    return f"{spec.name}, epochs {spec.min_epochs}..{spec.max_epochs}, eta {spec.eta:g}"
