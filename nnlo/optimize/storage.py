"""Where a search's trials live: the :class:`Storage` interface and the single job's :class:`LocalStorage`.

A :class:`~nnlo.optimize.search.Search` (the orchestrator: what a block does next, what a result means) is
given its storage at construction. The storage owns the trials' records (finished trials, cost observations,
the next trial id) and what depends on where they are kept: restoring and saving them, where a job comes
from (a trial to re-run or a new proposal; a lease on a shared journal), recording a result, giving a
trial back, and catching up with what others recorded. Two implementations:

* :class:`LocalStorage`: a search of its own; its state is ``optimizer-state.json`` in ``--output``
  (:mod:`nnlo.optimize.state`), saved by the coordinator, restored by the next job of its chain;
* :class:`nnlo.optimize.shared.JournalStorage`: one search across many jobs (``--shared``, ``--jobs``,
  ``--join``); the state is the append-only journal (:mod:`nnlo.optimize.journal`), and trials are leased.

So a shared search is a search with another storage, not another kind of search.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from nnlo.contract import OPTIMIZER_STATE_FILE, RANKS_DIR
from nnlo.errors import ConfigError
from nnlo.optimize.assign import MORE, Candidate, Fifo
from nnlo.optimize.engines import engine_options
from nnlo.optimize.placement import CostObservation
from nnlo.optimize.placement.memory import killed_out_of_memory
from nnlo.optimize.protocol import block_of_label
from nnlo.optimize.results import Trial, mean_variance, write_results
from nnlo.optimize.schedules import Ledger, ScheduleSpec
from nnlo.optimize.schedules.ledger import ledger, pending, view
from nnlo.optimize.state import load_state, save_state
from nnlo.rankfate import take_fate

if TYPE_CHECKING:
    from nnlo.optimize.search import Search

log = logging.getLogger("nnlo.optimize.search")


class Storage(Protocol):
    """What a search asks of the place its trials live (one instance per search, bound at its construction)."""

    @property
    def finished(self) -> dict[int, Trial]:
        """Trials with a result (under a schedule: paused ones too)."""

    @property
    def costs(self) -> list[CostObservation]:
        """Every job a block ran, in order (the placement policy learns from them)."""

    next_id: int  # the id the next new trial gets
    requeue: list[Trial]  # trials to re-run here first (same id and parameters)
    pool: list[Candidate]  # proposals not handed out yet (pending for the engine)

    def bind(self, search: Search) -> None:
        """The search this storage keeps (called once, by the search's constructor)."""

    def restore(self) -> bool:
        """Load what was kept (refusing another search's state); True if there was something."""

    def save(self) -> None:
        """Write the state and the tables derived from it."""

    def close(self) -> None:
        """The search ends here: let go of what this job holds."""

    def last_words(self) -> None:
        """A rank of this job died (:mod:`nnlo.liveness`): keep what can be kept, from another thread."""

    def complete(self) -> bool:
        """The search has ended for good (budget, target, broken model; nothing runs anywhere)."""

    def can_hand_out(self) -> bool:
        """Whether a block may still get a job now or later."""

    def next_trial(self, block: int, now: float | None) -> Trial | None:
        """The job for an idle block, or None (wait, or nothing is left)."""

    def record(self, trial_id: int, fold_results: list[dict[str, Any]], block: int, now: float | None) -> Trial:
        """A running trial's result (under a schedule: its stage's)."""

    def interrupted(self, trial_id: int) -> None:
        """A running trial stopped by the deadline: it re-runs later, from its checkpoint."""

    def out_of_memory(self, trial_id: int, fold_results: list[dict[str, Any]], block: int,
                      now: float | None) -> str | None:
        """The trial ran out of memory on ``block``: where it re-runs (None: it fails as any other)."""

    def keep(self, obs: CostObservation) -> None:
        """One job's cost observation."""

    def pending(self) -> list[dict[str, Any]]:
        """Points proposed and without a result (told to the engine as lies)."""

    def ledger(self) -> Ledger:
        """Every trial as the schedule sees it."""

    def state_dict(self, state: dict[str, Any]) -> dict[str, Any]:
        """The search's ``state`` as this storage writes it (the jobs still open, where they are)."""


def _identity(options: dict[str, Any]) -> dict[str, Any]:
    """The engine options that make a search what it is: all but the size of its initial random design, which
    a continued search may change (``--n-initial-points``; a larger budget keeps the design it started with)."""
    return {k: v for k, v in options.items() if k != "n_initial_points"}


class BoundToSearch:
    """A storage's link to the search it keeps, made once by the search's constructor (:meth:`Storage.bind`)."""

    _search: Search | None = None

    def bind(self, search: Search) -> None:
        self._search = search

    @property
    def s(self) -> Search:
        assert self._search is not None, "a storage is bound to its search by the search's constructor"
        return self._search


class LocalStorage(BoundToSearch):
    """A search of its own: trials handed out from its re-runs and proposal pool, its state in ``out_dir``."""

    def __init__(self) -> None:
        self.finished: dict[int, Trial] = {}
        self.costs: list[CostObservation] = []
        self.next_id = 0
        self.requeue: list[Trial] = []  # restored in-flight trials: re-run first, same id and parameters
        self.pool: list[Candidate] = []  # proposals not handed out yet (pending for the engine)
        self._waiting: dict[int, tuple[Any, ...]] = {}  # block -> the state in which the policy said wait
        self._ledger = Ledger()  # the schedule's view of every trial, updated trial by trial (_touch)

    # -- the end ---------------------------------------------------------------------------------------
    def complete(self) -> bool:
        s = self.s
        if s.target_reached() or s.broken() is not None:
            return True
        if not s.staged:
            return len(self.finished) >= s.num_iterations and not self.requeue
        return not s.in_flight and not self.requeue and s._job() is None

    def can_hand_out(self) -> bool:
        s = self.s
        if s.target_reached() or s.broken():
            return False
        if s.staged:
            return bool(self.requeue) or s._job() is not None
        return len(self.finished) + len(s.in_flight) < s.num_iterations

    def close(self) -> None:
        pass

    def last_words(self) -> None:
        """Save: the running trials are stored as to re-run, and the next job of the chain re-runs them."""
        self.save()

    # -- hand-out ------------------------------------------------------------------------------------
    def next_trial(self, block: int, now: float | None) -> Trial | None:
        with self.s.lock:
            return self._next_trial(block, now)

    def _next_trial(self, block: int, now: float | None) -> Trial | None:
        s = self.s
        if not self.can_hand_out():
            s.discard_ahead()
            return None
        now = time.time() if now is None else now
        if self._waiting.get(block) == self._token(now):
            return None  # nothing changed since the policy said wait
        if self._give_up_unplaceable(block, now):
            return self._next_trial(block, now)  # the budget and the candidates changed
        trial = self._placed(block, now)
        if trial is None:
            if self._give_up_unplaceable(block, now):  # a new proposal fits no block
                return self._next_trial(block, now)
            self._waiting[block] = self._token(now)
            return None
        if not trial.rungs:  # a trial with results keeps its status (ok) while it trains on
            trial.status = "running"
        trial.block, trial.started = block, now
        s.in_flight[trial.id] = trial
        self._touch(trial)
        s.handed_out()
        s._ask_ahead()
        return trial

    def _placed(self, block: int, now: float) -> Trial | None:
        """The job the policy gives ``block``: a trial to re-run or a pooled point (under a schedule: the
        schedule's job, checked to fit the block), or None (the block waits)."""
        s = self.s
        s._learn()
        if not s.staged:
            remaining = s.num_iterations - len(self.finished) - len(s.in_flight)
            chosen = self._choose(block, now, self.requeue, remaining)
        elif self.requeue:
            chosen = self._choose(block, now, self.requeue, None, new=False)
        else:
            job = s._job()
            assert job is not None  # can_hand_out() said so
            if job.trial is not None or job.params is not None:  # the schedule's own point: it must fit
                trial = self.finished.get(job.trial) if job.trial is not None else None
                params = trial.params if trial is not None else dict(job.params or {})
                fits = s.assign.choose(block, [Candidate(params, age=1 << 30, work=s._work(trial, job.rung))],
                                       s._situation(block, now, None)) >= 0
                return s._start(job, self.next_id, block) if fits else None
            chosen = self._choose(block, now, [], None, work=s._work(None, job.rung))
            return None if chosen is None else s._start(job, self.next_id, block, chosen.point)
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
        s = self.s
        fresh = None if remaining is None else remaining - len(self.requeue)  # proposals that may still come
        situation = s._situation(block, now, remaining)
        reran = [Candidate(t.params, age=1 << 30, trial=t, work=s._work(t, t.target)) for t in reruns]
        filled = not new or not reran  # a trial to re-run that the block takes needs no new proposal first
        while True:
            if not filled:
                pick = s.assign.choose(block, reran, situation)
                if pick >= 0:
                    candidates = reran
                    break
                filled = True
            want = max(1, s.assign.pool_size(s.blocks, remaining)) if new else 0
            while len(self.pool) < (want if fresh is None else min(want, fresh)):
                self.pool.append(Candidate(s._proposal()))
            for c in self.pool:
                c.work = work
            candidates = reran + (self.pool if new else [])
            pick = s.assign.choose(block, candidates, situation)
            if pick != MORE or not new or (fresh is not None and len(self.pool) >= fresh):
                break
            self.pool.append(Candidate(s._proposal()))
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

    def _give_up_unplaceable(self, block: int, now: float) -> bool:
        """Record as failed every trial to re-run and pooled point no block of this job can hold (it ran out
        of memory on every type here, or declares more memory than any has); True if there was one."""
        s = self.s
        gone = False
        for c in [*(Candidate(t.params, trial=t) for t in self.requeue), *self.pool]:
            why = s.assign.placeable(c.point)
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
            s.in_flight[trial.id] = trial
            if s.staged and trial.target is None:
                trial.target = 0
            self.record(trial.id, [{"error": f"it fits no block of this job: {why}", "code": 1}] * s.n_fold,
                        block, now)
            gone = True
        return gone

    def _token(self, now: float) -> tuple[Any, ...]:
        """Changes whenever a hand-out, result, re-run, proposal, observation or the deadline could change a
        choice, and every second (a running job passes its first checkpoint, or overruns its prediction)."""
        s = self.s
        return (s.version, len(self.pool), len(self.costs), self.next_id, s.deadline, int(now))

    def pending(self) -> list[dict[str, Any]]:
        """Every trial handed out that the engine does not observe (:func:`~.schedules.ledger.pending`: under a
        schedule paused ones too), and pooled points."""
        s = self.s
        return pending([*s.in_flight.values(), *self.requeue, *self.finished.values()], s._results) + [
            c.point for c in self.pool]

    # -- the schedule's view -------------------------------------------------------------------------
    def ledger(self) -> Ledger:
        return self._ledger

    def _touch(self, trial: Trial) -> None:
        """``trial`` changed (started, reported, re-queued): update its view in the ledger."""
        s = self.s
        if not s.staged:
            return
        running = trial.target if trial.id in s.in_flight or any(t is trial for t in self.requeue) else None
        self._ledger.update(view(trial, s.objective, running))

    def _rebuild_ledger(self) -> None:
        jobs = [*self.s.in_flight.values(), *self.requeue]
        self._ledger = ledger([*self.finished.values(), *jobs], self.s.objective, {t.id: t.target for t in jobs})

    # -- results -------------------------------------------------------------------------------------
    def record(self, trial_id: int, fold_results: list[dict[str, Any]], block: int, now: float | None) -> Trial:
        """Finish a trial (under a schedule: its rung) from its folds' results; tell the engine; caller then
        :meth:`save`."""
        s = self.s
        trial = s.in_flight.pop(trial_id)
        before = trial.status if trial.id in self.finished else None
        s.results_change()
        if s.staged:
            assert trial.target is not None, f"trial {trial_id} ran without a rung"
            trial.finish_stage(fold_results, s.objective, block, trial.target, s.schedule.budgets[trial.target], now)
            self.finished[trial.id] = trial
            s._recount(before, trial.status)
            self._touch(trial)
            last = trial.rungs[-1]
            s.learn_stage(trial, mean_variance(last["fom"], last["fom_std"], last["fold_foms"]))
            s.observe_job(trial, block, trial.status)
            s._feed()
            return trial
        trial.finish(fold_results, s.objective, block, now)
        self.finished[trial.id] = trial
        s._recount(before, trial.status)
        s.observe_job(trial, block, trial.status)
        s.tell(trial)
        return trial

    def interrupted(self, trial_id: int) -> None:
        """A trial stopped by the deadline: it is neither finished nor lost; it re-runs after resubmission
        (under a schedule: the same job, toward the same rung, from its checkpoint)."""
        s = self.s
        trial = s.in_flight.pop(trial_id)
        s.changed()
        if not trial.rungs:
            trial.status = "pending"
        trial.block, trial.started = None, None
        self.requeue.append(trial)
        self._touch(trial)

    def keep(self, obs: CostObservation) -> None:
        self.costs.append(obs)

    def out_of_memory(self, trial_id: int, fold_results: list[dict[str, Any]], block: int,
                      now: float | None) -> str | None:
        """A fold of the trial ran out of memory on ``block``: if the policy may place it on another block,
        re-queue it there and say where it cannot go (the caller then saves); else None (the trial is then
        recorded as failed, as any other)."""
        s = self.s
        if not any(f.get("oom") for f in fold_results) or isinstance(s.assign, Fifo):
            return None
        trial = s.in_flight[trial_id]
        now = time.time() if now is None else now
        s.observe(trial, block, now - (now if trial.started is None else trial.started), "oom",
                  s._work(trial, trial.target))
        s._learn()
        if s.assign.placeable(trial.params) is not None:
            return None
        self.interrupted(trial_id)
        return f"it re-runs on another block type than {s.block_type(block)}"

    # -- persistence ---------------------------------------------------------------------------------
    def state_dict(self, state: dict[str, Any]) -> dict[str, Any]:
        # in-flight and re-queued trials are stored as "to re-run": their results never arrived
        s = self.s
        jobs = sorted([*s.in_flight.values(), *self.requeue], key=lambda t: t.id)
        return {**state, "rerun": [self._rerun_entry(t) for t in jobs]}

    def _rerun_entry(self, trial: Trial) -> dict[str, Any]:
        """:func:`rerun_entry`, and for a running trial where it runs (to learn from a rank the OOM killer
        takes: :meth:`_rank_death`)."""
        s = self.s
        entry = rerun_entry(trial)
        if trial.id in s.in_flight and trial.block is not None:
            traits = s.traits(trial.params)
            entry["running_on"] = {"block": trial.block, "type": s.block_type(trial.block).to_dict(),
                                   "class": traits.cls, "size": traits.size, "memory_gb": traits.memory_gb,
                                   "work": s._work(trial, trial.target)}
        return entry

    def save(self) -> None:
        """State first, then the tables: the state is the checkpoint, the tables are derived from it."""
        s = self.s
        save_state(s.out_dir, s.state_dict())
        write_results(s.out_dir, list(self.finished.values()), s.objective, s.engine.space.names, s.n_fold,
                      s.num_iterations)

    def restore(self) -> bool:
        """Load the state in ``out_dir`` if there is one; refuse one made for a different search."""
        s = self.s
        state = load_state(s.out_dir)
        if state is None:
            return False
        path = s.out_dir / OPTIMIZER_STATE_FILE
        mismatch = []
        if state["space"] != s.engine.space.to_dict():
            mismatch.append("search space")
        if _identity(state["engine_options"]) != _identity(engine_options(s.engine)):
            mismatch.append(f"engine ({state['engine_options']})")
        if state["objective"] != {"name": s.objective.name, "direction": s.objective.direction}:
            mismatch.append(f"--fom ({state['objective']['name']}:{state['objective']['direction']})")
        if state["n_fold"] != s.n_fold:
            mismatch.append(f"--n-fold ({state['n_fold']})")
        saved = ScheduleSpec.from_dict(state.get("schedule"))
        if saved != s.schedule_spec():
            mismatch.append(f"schedule ({describe_schedule(saved)})")
        if mismatch:
            raise ConfigError(
                f"{path} was written by a search with a different {', '.join(mismatch)}; "
                "rerun with the same options, or use a new --output directory"
            )
        s.engine.load_state_dict(state["engine_state"])
        self.next_id = int(state["next_id"])
        self.finished = {t.id: t for t in (Trial.from_dict(d) for d in state["finished"])}
        for t in self.finished.values():
            t.target = None  # jobs under way when the state was saved are the "rerun" entries
        self.requeue = [rerun_trial(d, self.finished, s.engine.space) for d in state["rerun"]]
        s.in_flight.clear()
        try:
            self.costs = [CostObservation.from_record(d) for d in state.get("costs", [])]
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"{path} holds a malformed cost observation ({e}); restore the file, or use a new "
                              "--output directory") from None
        self._rank_death(s.out_dir, state["rerun"])
        s.changed()
        if s.staged:
            self._rebuild_ledger()
            s._rebuild_results()
            s._feed()
        return True

    def _rank_death(self, out_dir: Path, rerun: list[dict[str, Any]]) -> None:
        """The last job ended because a block's rank was killed (the fate :mod:`nnlo.rankfate` kept): by
        SIGKILL, the OOM killer's signal, the trial that block ran ran out of memory on its type."""
        fate = take_fate(out_dir / RANKS_DIR)
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
