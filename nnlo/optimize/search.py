"""The search's orchestration, free of MPI: budget, hand-out, pending points, failures, results.

The coordinator asks :meth:`Search.next_trial` whenever a block is idle and passes each block's answer to
:meth:`Search.record`; everything else (which points are pending, when the search is over, what goes into
the checkpoint) lives here, so it can be tested without MPI and reused by the serial path of the tests.

A search is given everything it works with when it is made, and nothing is set on it afterwards: its engine
(what to propose), its schedule (:mod:`nnlo.optimize.schedules`; ``full`` is a schedule object too), its
placement (the number of blocks, their types, the trials' traits, the assignment policy and its cost model,
the deadline a job must reach a checkpoint by), the proposer ranks' function, and its storage
(:mod:`nnlo.optimize.storage`): where its trials live - the single job's state file, or the journal a shared
search's participants lease trials from (:class:`nnlo.optimize.shared.JournalStorage`).

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
``--proposers P`` > 1 the points come from the proposer ranks (the ``propose`` function the search is given)
instead of the engine's own ask. Every job a block ran leaves a cost observation (:attr:`Search.costs`, kept
in the state) the policy learns from; a trial that ran out of memory re-runs on a block it may fit
(:meth:`Search.out_of_memory`), else it fails. Under a schedule the schedule picks the job; placement picks a
new trial's point from the pool and checks that a trial trained on fits the block (memory, deadline), its cost
the rest of its stage.

Schedules (``--schedule asha|hyperband|pbt``, :mod:`nnlo.optimize.schedules`): a trial trains in stages.
The schedule picks each free block's job - a new trial at some rung, or an existing trial trained on to a
higher rung (from its own checkpoint) - and every rung's result is recorded in the trial (``rungs``); the
engine is fed the results of one rung (:func:`nnlo.optimize.schedules.ledger.feed`). The budget counts trials
started; the search is complete when the schedule has no job left and nothing runs. Under ``full`` every
trial trains ``--epochs`` in one job and the budget counts finished trials.
"""
from __future__ import annotations

import bisect
import logging
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from nnlo.errors import ConfigError
from nnlo.optimize.ask_ahead import AskAhead, describe, worth_it
from nnlo.optimize.assign import Candidate, Fifo, Policy, Running, Situation
from nnlo.optimize.engines import Engine, engine_options
from nnlo.optimize.failures import FailureRule
from nnlo.optimize.placement import BlockType, CostObservation, Traits, TraitsOf
from nnlo.optimize.results import FAILED, OK, Objective, Trial, best_trial, fold_variance
from nnlo.optimize.schedules import Full, Job, Ledger, Schedule, ScheduleSpec
from nnlo.optimize.schedules.ledger import RungResults, min_results, view
from nnlo.optimize.storage import LocalStorage, Storage, describe_schedule, rerun_entry, rerun_trial
from nnlo.optimize.trial_files import inherit

__all__ = ["Search", "describe_schedule", "rerun_entry", "rerun_trial"]

log = logging.getLogger("nnlo.optimize.search")

#: ``propose(pending points) -> a point``: where new points come from instead of the engine's own ask
Propose = Callable[[list[dict[str, Any]]], dict[str, Any]]


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
        storage: Storage | None = None,
        blocks: int = 1,
        assign: Policy | None = None,
        block_types: Sequence[BlockType] = (),
        traits_of: Callable[[dict[str, Any]], Traits] | None = None,
        deadline: float | None = None,
        propose: Propose | None = None,
        copy_checkpoint: Callable[..., int | None] = inherit,
    ):
        """``schedule``: ``full`` when not given; ``storage``: a search of its own (:class:`LocalStorage`) when
        not given. ``blocks``: how many blocks run trials at once; ``assign``: which pooled proposal an idle
        block gets (FIFO when not given), over ``block_types`` (each block's hardware) with the trials' traits
        from ``traits_of`` (the model module's hooks); ``deadline``: jobs must reach a checkpoint by then;
        ``propose``: with --proposers P > 1, pending points -> a point from a proposer rank;
        ``copy_checkpoint``: PBT's copy of a donor's checkpoint into a child's folder
        (:func:`nnlo.optimize.trial_files.inherit`)."""
        if num_iterations < 1:
            raise ConfigError(f"--num-iterations must be at least 1, got {num_iterations}")
        self.engine = engine
        self.objective = objective
        self.num_iterations = num_iterations
        self.target = target
        self.n_fold = n_fold
        self.out_dir = Path(out_dir)
        self.failures = failures or FailureRule.default()
        self.schedule: Schedule = schedule or Full()
        self.blocks = blocks
        self.assign: Policy = assign or Fifo()
        self.block_types: tuple[BlockType, ...] = tuple(block_types)
        self.traits_of: Callable[[dict[str, Any]], Traits] = traits_of or TraitsOf(engine.space)
        self.deadline = deadline
        self.propose = propose
        self.copy_checkpoint = copy_checkpoint
        # held by the coordinator's thread while it changes the trials, and by the liveness thread's last words
        # (a save, or giving the running trials back) so that they never see a change half made
        self.lock = threading.RLock()
        self.in_flight: dict[int, Trial] = {}
        self.ask_s: float | None = None  # how long the last proposal took
        self._ahead = AskAhead(engine)
        self._ahead_announced = False
        self._learned = -1
        self._version = 0  # bumped by every change of the trials: the schedule's job is asked once per state
        self._asked: tuple[int, Job | None] = (-1, None)
        self._results = RungResults(min_results(engine))  # what the engine is told under a schedule
        self._stages: list[float] = []  # durations of every stage (schedules), sorted: the typical job
        self._counted: tuple[int, tuple[int, int]] = (-1, (0, 0))
        self.storage: Storage = storage or LocalStorage()
        self.storage.bind(self)

    # -- what the storage keeps ------------------------------------------------------------------------
    @property
    def finished(self) -> dict[int, Trial]:
        return self.storage.finished

    @property
    def costs(self) -> list[CostObservation]:
        """Every job a block ran (the policy learns from them; kept in the state or the journal)."""
        return self.storage.costs

    @property
    def next_id(self) -> int:
        return self.storage.next_id

    @property
    def requeue(self) -> list[Trial]:
        """Trials to re-run first, same id and parameters (a search of its own, restored)."""
        return self.storage.requeue

    @property
    def pool(self) -> list[Candidate]:
        """Proposals not handed out yet (pending for the engine)."""
        return self.storage.pool

    @property
    def version(self) -> int:
        """Bumped by every change of the trials."""
        return self._version

    # -- the tally -----------------------------------------------------------------------------------
    @property
    def n_ok(self) -> int:
        return self._tally()[0]

    @property
    def n_failed(self) -> int:
        return self._tally()[1]

    def _tally(self) -> tuple[int, int]:
        """(ok, failed) finished trials (recounted when the trials changed other than by :meth:`record`)."""
        with self.lock:
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

    def handed_out(self) -> None:
        """A trial was handed out (the storage says so): the trials changed, the tally did not."""
        tally = self._tally()
        self.changed()
        self._counted = (self._version, tally)

    def results_change(self) -> None:
        """A result is about to be recorded (the storage then calls :meth:`_recount`)."""
        self._tally()
        self.changed()
        self._counted = (self._version, self._counted[1])

    def broken(self) -> Trial | None:
        """The first failed trial, once the failure rule stops the search (the model, not the point, is bad)."""
        if self.failures.stops(self.n_failed, len(self.finished), self.num_iterations):
            return min((t for t in self.finished.values() if t.status == FAILED), key=lambda t: t.id)
        return None

    def target_reached(self) -> bool:
        if self.target is None:
            return False
        if self.staged:  # only a trial trained to --epochs counts
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
        with self.lock:
            return self.storage.complete()

    def can_hand_out(self) -> bool:
        with self.lock:
            return self.storage.can_hand_out()

    # -- hand-out ------------------------------------------------------------------------------------
    def next_trial(self, block: int, now: float | None = None) -> Trial | None:
        """A trial for an idle block, or None when the budget is spent / the target reached (under a
        schedule: also when nothing can run until a running trial reports), or when the policy has the block
        wait (nothing fits it before the deadline; in the tail, a faster block will). Where the trial comes
        from is the storage's (a re-run, a proposal, a lease)."""
        return self.storage.next_trial(block, now)

    def _work(self, trial: Trial | None, rung: int | None) -> float:
        """The share of a whole trial a job is: 1, or under a schedule the epochs from where the trial stands
        to its rung's budget, over the most epochs a trial trains."""
        if not self.staged or rung is None:
            return 1.0
        budgets = self.schedule.budgets
        done = 0 if trial is None else int(trial.epochs or trial.start_epochs or 0)
        return max(1, budgets[rung] - done) / budgets[-1]

    def _situation(self, block: int, now: float, remaining: int | None) -> Situation:
        busy = {t.block for t in self.in_flight.values()}
        return Situation(now, tuple(b for b in range(self.blocks) if b not in busy and b != block),
                         tuple(Running(int(t.block), t.params, float(t.started or now), self._work(t, t.target))
                               for t in self.in_flight.values() if t.block is not None),
                         remaining, self.deadline)

    def place(self, block: int, points: list[dict[str, Any]], now: float, work: list[float] | None = None) -> int:
        """The first of ``points`` the policy lets ``block`` run now (memory, deadline), or < 0."""
        if isinstance(self.assign, Fifo):
            return 0
        self._learn()
        shares = work or [1.0] * len(points)
        candidates = [Candidate(p, age=1 << 30, work=w) for p, w in zip(points, shares, strict=True)]
        return self.assign.choose(block, candidates, self._situation(block, now, None))

    # -- schedules -----------------------------------------------------------------------------------
    @property
    def staged(self) -> bool:
        """Whether trials train in stages (every schedule but ``full``)."""
        return self.schedule.spec.staged

    def schedule_spec(self) -> ScheduleSpec:
        return self.schedule.spec

    def job_epochs(self, trial: Trial) -> int | None:
        """The epochs ``trial``'s job trains to (in total); None under ``full`` (the options' --epochs)."""
        if not self.staged or trial.target is None:
            return None
        return self.schedule.budgets[trial.target]

    def ledger(self) -> Ledger:
        """Every trial as the schedule sees it (running ones with the rung they train toward)."""
        return self.storage.ledger()

    def _new_allowed(self) -> bool:
        return self.next_id < self.num_iterations and not self.target_reached() and self.broken() is None

    def _job(self) -> Job | None:
        """The schedule's next job now (a pure question: asking twice gives the same job, so it is asked once
        per state of the trials)."""
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
        trial = self.new_trial(job, tid, params)
        self.inherit_checkpoint(trial)
        self.storage.next_id = max(self.next_id, tid + 1)
        return trial

    def new_trial(self, job: Job, tid: int, params: dict[str, Any]) -> Trial:
        """Trial ``tid`` of ``job`` (a PBT child's checkpoint is copied by :meth:`inherit_checkpoint`)."""
        return Trial(tid, params, bracket=job.bracket, parent=job.parent, replaces=job.replaces, target=job.rung)

    def inherit_checkpoint(self, trial: Trial) -> None:
        """PBT's child ``trial`` (training toward its rung): its parent's checkpoint copied into its folder, where
        it starts from; when the copy is further along than the rung, it trains on to the next step (slow on a
        network file system: a shared search runs it outside the journal's lock)."""
        if trial.parent is None or not self.staged or trial.target is None:
            return
        budgets, rung = self.schedule.budgets, trial.target
        # the donor's checkpoint at the step it was compared (it may have trained on since)
        start = self.copy_checkpoint(self.out_dir, trial.parent, trial.id, self.n_fold, budgets[max(0, rung - 1)],
                                     trial.params)
        trial.start_epochs = start
        if start is not None and start >= budgets[rung]:  # the copy is further along: its next step
            trial.target = next((k for k, b in enumerate(budgets) if b > start), len(budgets) - 1)
        log.info("trial %d starts from trial %d's checkpoint (epoch %s) with %s, in the place of trial %s",
                 trial.id, trial.parent, start, trial.params, trial.replaces)

    def _trial(self, tid: int) -> Trial | None:
        return self.finished.get(tid) or self.in_flight.get(tid)

    def _completed(self, trial: Trial) -> bool:
        return self.schedule.completed(view(trial, self.objective))

    def _feed(self) -> None:
        """Tell the engine the results of the rung its model learns from (a schedule's search)."""
        self._results.feed(self.engine)

    def _rebuild_results(self) -> None:
        """What is kept up to date result by result, from the trial records (a restored or shared search)."""
        self._results = RungResults.of(self.finished.values(), self.objective, min_results(self.engine))
        self._stages = sorted(float(r["duration_s"]) for t in self.finished.values() for r in t.rungs
                              if r.get("duration_s"))

    def learn_stage(self, trial: Trial, variance: float | None) -> None:
        """A stage's result, kept for the engine (fed by :meth:`_feed`) and the typical job's duration."""
        value = None if trial.fom is None else self.objective.value(trial.fom)
        self._results.add(trial.params, int(trial.rung or 0), value, variance)
        last = trial.rungs[-1]
        if last.get("duration_s"):
            bisect.insort(self._stages, float(last["duration_s"]))

    def tell(self, trial: Trial) -> None:
        """Tell the engine a whole trial's result (``full``)."""
        self.engine.tell(trial.params, None if trial.fom is None else self.objective.value(trial.fom),
                         fold_variance(trial))

    def ask(self, tid: int, pending: list[dict[str, Any]]) -> dict[str, Any]:
        """The engine's point for trial ``tid`` (its random stream (seed, tid)), ``pending`` told as lies (a
        shared search asks outside the journal's lock, with the open jobs its decision saw)."""
        self.engine.n_asked = tid
        t0 = time.perf_counter()
        point = self.engine.ask(pending)
        self.ask_s = time.perf_counter() - t0
        return point

    def _proposal(self) -> dict[str, Any]:
        """The next proposed point: from a proposer rank, the ask-ahead thread, or the engine now."""
        if self.propose is not None:
            t0 = time.perf_counter()
            point: dict[str, Any] = self.propose(self.pending())
            self.ask_s = time.perf_counter() - t0
        elif self._ahead.running:
            point = self._ahead.take()
            self.ask_s = self._ahead.seconds
        else:
            t0 = time.perf_counter()
            point = self.engine.ask(self.pending())
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
        """Keep what the job cost (:attr:`costs`, through the storage: a state or a journal record)."""
        traits = self.traits(trial.params)
        obs = CostObservation(trial.id, traits.cls, traits.size, self.block_type(block), max(0.0, seconds),
                              outcome, work, traits.memory_gb)
        self.storage.keep(obs)
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
        if last.get("duration_s") and trained > 0 and self.staged:
            self.observe(trial, block, float(last["duration_s"]), outcome, trained / self.schedule.budgets[-1])

    def out_of_memory(self, trial_id: int, fold_results: list[dict[str, Any]], block: int,
                      now: float | None = None) -> str | None:
        """A fold of the trial ran out of memory on ``block``: if it may run elsewhere, where (the caller then
        saves); else None (the trial is then recorded as failed, as any other)."""
        with self.lock:
            return self.storage.out_of_memory(trial_id, fold_results, block, now)

    def pending(self) -> list[dict[str, Any]]:
        """Points proposed and not finished: running, to re-run, pooled (told to the engine as lies)."""
        return self.storage.pending()

    def typical_trial_s(self) -> float | None:
        """The median duration of a job: a whole trial, or under a schedule one stage of one."""
        if self.staged:
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
        if self.staged:
            job = self._job()
            if job is None or not job.new or job.params is not None:
                return  # the next job trains a trial on, or its point is the schedule's
        if not self._ahead_announced:
            log.info(describe(self.ask_s, typical))  # type: ignore[arg-type]
            self._ahead_announced = True
        self._ahead.start(self.pending())

    def discard_ahead(self) -> None:
        """Drop a proposal under way (nothing more is handed out)."""
        self._ahead.discard()

    def close(self) -> None:
        """Wait for a proposal still under way (none is left running when the coordinator ends), and let the
        storage go (a shared search gives back what it holds)."""
        with self.lock:
            self.storage.close()
        self._ahead.discard()

    def last_words(self) -> None:
        """What the coordinator does when a rank of its job died (:mod:`nnlo.liveness`): the storage's (a
        search of its own saves its state, a shared search gives its running trials back)."""
        with self.lock:
            self.storage.last_words()

    # -- results -------------------------------------------------------------------------------------
    def record(self, trial_id: int, fold_results: list[dict[str, Any]], block: int, now: float | None = None) -> Trial:
        """Finish a trial (under a schedule: its rung) from its folds' results; tell the engine; caller then
        :meth:`save`."""
        with self.lock:
            return self.storage.record(trial_id, fold_results, block, now)

    def interrupted(self, trial_id: int) -> None:
        """A trial stopped by the deadline: it is neither finished nor lost; it re-runs after resubmission
        (under a schedule: the same job, toward the same rung, from its checkpoint)."""
        with self.lock:
            self.storage.interrupted(trial_id)

    def best(self) -> Trial | None:
        with self.lock:
            return best_trial(list(self.finished.values()), self.objective)

    # -- persistence ---------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        staged = {"schedule": self.schedule.spec.to_dict()} if self.staged else {}
        return self.storage.state_dict({
            **staged,
            "space": self.engine.space.to_dict(),
            "engine_options": engine_options(self.engine),
            "engine_state": self.engine.state_dict(),
            "objective": {"name": self.objective.name, "direction": self.objective.direction},
            "n_fold": self.n_fold,
            "next_id": self.next_id,
            "finished": [t.fields() for t in sorted(self.finished.values(), key=lambda t: t.id)],
            "rerun": [],
            "costs": [o.to_record() for o in self.costs],
        })

    def save(self) -> None:
        """Write the state (the checkpoint) and the tables derived from it."""
        with self.lock:
            self.storage.save()

    def restore(self) -> bool:
        """Load the kept state if there is one (a shared search: join the journal); refuse another search's."""
        with self.lock:
            return self.storage.restore()
