"""One search across many jobs: a :class:`~nnlo.optimize.search.Search` whose storage is the shared journal.

``nnlo optimize --shared --output DIR`` makes this job a *participant* of the search kept in
``DIR/search-journal.jsonl`` (:mod:`nnlo.optimize.journal`). Any number of participants - separate MPI jobs,
each with its own coordinator and blocks - may run the same command at the same time or one after another.
The search is the same :class:`Search` as any other, given a :class:`JournalStorage` (:func:`shared_search`);
the coordinator cannot tell. Underneath:

* **Hand-out** (:meth:`JournalStorage.next_trial`), decided under the journal's lock after reading the
  records the others appended (what is slow - the engine's ask, a PBT child's checkpoint copy - runs outside
  it): first a trial in the pool (released at a deadline), one leased by this participant's own
  name but not running here (a resubmitted job of the same chain takes its trials back at once), or one
  whose lease expired (its participant died); else, while fewer than ``--num-iterations`` trials exist, a
  new proposal - the engine told every finished result in journal order, with every open trial of every
  participant pending - with the next trial id. A trial taken over keeps its id and parameters.
* **Leases.** A trial handed out is leased to this participant for ``--lease-timeout`` seconds; a heartbeat
  thread renews the leases of its running trials every quarter of that. A job that dies stops renewing, and
  after the timeout any other participant re-runs the trial (from the trial's own checkpoints, which live in
  ``DIR/trials/<id>``). The first result of a trial counts; a later one (a participant that lost its lease
  but finished anyway) is logged and dropped. So ``--num-iterations`` counts finished trials across all
  participants exactly: no trial lost, none counted twice.
* **Results** are appended to the journal, and ``trials.json``/``trials.csv``/``best.json``/
  ``optimizer-state.json`` are rewritten from the journal's state under the lock by whoever records, so
  ``nnlo status`` and ``nnlo plot`` read them as for any search.
* **Waiting.** A participant with every block idle and nothing to claim (the remaining trials run elsewhere)
  waits, re-reading the journal every second, until the search is done (exit 0), a lease expires (it takes
  that trial over) or its deadline/stop signal comes (exit 75).
* **Placement.** Every job's cost goes into the journal (``cost`` records), so every participant's policy
  learns from every block of every job. A participant takes the first trial open to it that fits the free
  block (memory, deadline); a new proposal that does not fit goes to the pool for another block or
  participant. A trial that ran out of memory re-runs on a block of this job it may fit, else goes to the pool
  for a participant that has run on a block type it may fit, else fails. A shared search keeps no pool of
  proposals (they would be leases nobody runs), so it does not reorder new proposals by speed or plan a tail.
* **Restore.** The journal is the state: every participant rebuilds the search from it when it starts
  (``--opt-restore`` is implied); ``optimizer-state.json`` is only derived from it.
* **Schedules** (``--schedule asha|hyperband|pbt``): after the claimable jobs, a participant asks the schedule
  for the next job with the journal's trials (every participant decides from the same state, under the lock):
  a ``resume`` record takes a paused trial on to a higher rung (from its own checkpoint, whichever job wrote
  it), a ``propose`` starts a new trial (PBT's child is proposed with a ``copy`` mark, its donor's checkpoint
  copied in outside the lock, then a ``start`` record gives the epoch it starts from and its target). A job's
  result is a ``result`` at its rung. A trial paused by one job is resumed by another; a job that dies goes
  back to the pool after its lease, with the trial's last checkpoint.
"""
from __future__ import annotations

import contextlib
import copy
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nnlo.contract import ENV_PARTICIPANT, LEASE_TIMEOUT_S, SEARCH_JOURNAL
from nnlo.errors import ConfigError
from nnlo.optimize.assign import Candidate, Fifo
from nnlo.optimize.engines import Engine, engine_options, make_engine
from nnlo.optimize.journal import COPY, JOB_FIELDS, Journal, Lease, SharedState, read_journal, rebuild
from nnlo.optimize.placement import CostObservation
from nnlo.optimize.results import Objective, Trial, fold_variance, write_results
from nnlo.optimize.schedules import Job, Ledger
from nnlo.optimize.schedules.ledger import feed, ledger, pending
from nnlo.optimize.search import Search
from nnlo.optimize.space import Space
from nnlo.optimize.state import save_state
from nnlo.optimize.storage import BoundToSearch, rerun_entry

log = logging.getLogger("nnlo.optimize.shared")

#: the shortest lease accepted (the heartbeat renews every quarter of it)
MIN_LEASE_S = 1.0


def participant_name(explicit: str | None = None, environ: dict[str, str] | None = None) -> str:
    """``--participant``, else ``$NNLO_PARTICIPANT``, else ``<hostname>-<pid>``; refused if unprintable."""
    env = os.environ if environ is None else environ
    name = (explicit or env.get(ENV_PARTICIPANT, "") or f"{socket.gethostname()}-{os.getpid()}").strip()
    if not name or len(name) > 200 or not name.isprintable():
        raise ConfigError(f"participant name {name!r} is not a short printable name; pass --participant NAME "
                          f"(or set {ENV_PARTICIPANT})")
    return name


#: how often one claim asks the engine again when another participant proposed the id it asked for meanwhile
_CLAIM_TRIES = 8


@dataclass(frozen=True)
class _Ask:
    """Slow work a claim needs: the engine's proposal for trial ``tid`` (``job``: the schedule's, or None)."""

    tid: int
    pending: list[dict[str, Any]]
    job: Job | None


@dataclass(frozen=True)
class _Asked:
    """The proposal an :class:`_Ask` got, offered to the next decision (used if it is still the same one)."""

    tid: int
    job: Job | None
    point: dict[str, Any]


@dataclass(frozen=True)
class _Copy:
    """Slow work a claim needs: ``trial`` (a PBT child, proposed and leased here) gets its donor's checkpoint."""

    trial: Trial


def shared_search(engine: Engine, objective: Objective, *, out_dir: Path, participant: str,
                  lease_s: float = LEASE_TIMEOUT_S, clock: Callable[[], float] = time.time, heartbeat: bool = True,
                  stop: Any = None, monotonic: Callable[[], float] = time.monotonic, **search: Any) -> Search:
    """A :class:`Search` of ``engine`` and ``objective`` whose storage is the journal in ``out_dir``, this job
    taking part as ``participant`` (``search``: the other arguments of :class:`Search`)."""
    storage = JournalStorage(out_dir, participant=participant, lease_s=lease_s, clock=clock, heartbeat=heartbeat,
                             stop=stop, monotonic=monotonic)
    return Search(engine, objective, out_dir=out_dir, storage=storage, **search)


class JournalStorage(BoundToSearch):
    """The storage of a shared search: its trials, leases and results live in the journal in ``folder``."""

    requeue: list[Trial]  # always empty: a trial to re-run is an open lease of the journal
    pool: list[Candidate]  # always empty: a shared search keeps no pool of proposals

    def __init__(self, folder: Path, *, participant: str, lease_s: float = LEASE_TIMEOUT_S,
                 clock: Callable[[], float] = time.time, heartbeat: bool = True, stop: Any = None,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        """``clock``: wall time, as the journal records it (lease ends, compared across nodes); ``monotonic``:
        this process's intervals (the quiet period after a claim found nothing); ``stop`` (a
        :class:`nnlo.stop.Stop`): ends the wait for trials running elsewhere."""
        if not lease_s >= MIN_LEASE_S:
            raise ConfigError(f"--lease-timeout {lease_s} is too short; use at least {MIN_LEASE_S:g} seconds "
                              f"(default {LEASE_TIMEOUT_S:g})")
        self.participant = participant
        self.lease_s = float(lease_s)
        self.clock = clock
        self.monotonic = monotonic
        self.poll_s = min(1.0, self.lease_s / 4)  # how often an idle participant re-reads the journal
        self.folder = Path(folder)
        self.journal = Journal(folder)
        self.shared = SharedState()
        self.next_id = 0
        self.requeue = []
        self.pool = []
        self.stop = stop
        self._heartbeat = heartbeat
        self._beat: threading.Thread | None = None
        self._quit = threading.Event()
        self._told = 0  # results of shared.order told to the engine
        self._quiet_until = 0.0  # no claim before this monotonic time (the last attempt found nothing)
        # the heartbeat's side: the ids whose leases it renews (published by the coordinator's thread), and the
        # records it read on its way to append, folded in by the coordinator's thread (both under the journal's
        # lock): the heartbeat never changes what the coordinator's thread reads
        self._renewing: frozenset[int] = frozenset()
        self._inbox: list[dict[str, Any]] = []
        self._refused = False  # the last claim found something, but placement kept it off that block
        self._lost: set[int] = set()
        self._joined = False
        self._built: tuple[int, Ledger] = (-1, Ledger())

    @property
    def finished(self) -> dict[int, Trial]:
        return self.shared.finished

    @property
    def costs(self) -> list[CostObservation]:
        return self.shared.costs

    # -- the journal -----------------------------------------------------------------------------------
    def _identity(self) -> dict[str, Any]:
        staged = {"schedule": self.s.schedule.spec.to_dict()} if self.s.staged else {}
        return {"space": self.s.engine.space.to_dict(), "engine_options": engine_options(self.s.engine),
                "seed": self.s.engine.seed,
                "objective": {"name": self.s.objective.name, "direction": self.s.objective.direction},
                "n_fold": self.s.n_fold, "num_iterations": self.s.num_iterations, "target": self.s.target, **staged}

    def _catch_up(self) -> None:
        """Fold the records appended since the last read, the heartbeat's first (call under the lock, in the
        coordinator's thread)."""
        records, skipped = self.journal.read_new()
        for s in skipped:
            log.warning("%s", s.describe(self.journal.path))
        inbox, self._inbox = self._inbox, []
        for rec in [*inbox, *records]:
            self.shared.apply(rec)
        self._sync()

    def catch_up(self) -> None:
        """Fold in what the other participants (and this job's heartbeat) appended (the coordinator's thread)."""
        with self.s.lock, self._locked():
            pass

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """The journal's lock, caught up on entry; the leases to renew published on exit."""
        with self.journal.locked():
            self._catch_up()
            try:
                yield
            finally:
                self._renewing = frozenset(tid for tid in self.s.in_flight if self._holds(tid))

    def _append(self, rec: dict[str, Any]) -> None:
        self.journal.append(rec)
        self.shared.apply(rec)
        self._sync()

    def _record(self, kind: str, **fields: Any) -> None:
        self._append({"kind": kind, "p": self.participant, "t": self.clock(), **fields})

    def _sync(self) -> None:
        """Tell the engine the results it has not seen, in journal order (under a schedule: feed it the
        results of its model's rung); follow the trial ids."""
        order = self.shared.order
        self.s.changed()
        if self.s.staged:  # the journal's trials, as any participant reads them
            self.s._rebuild_results()
            self.s._feed()
        else:
            for tid in order[self._told:]:
                t = self.shared.finished[tid]
                self.s.engine.tell(t.params, None if t.fom is None else self.s.objective.value(t.fom), fold_variance(t))
        self._told = len(order)
        self.next_id = self.shared.next_id
        self.s.engine.n_asked = self.next_id  # trial i is proposed with the random stream (seed, i)
        for tid in list(self.s.in_flight):
            lease = self.shared.open.get(tid)
            holder = "nobody" if lease is None else lease.holder
            if holder != self.participant and tid not in self._lost:
                self._lost.add(tid)
                by = "finished by another participant" if tid in self.shared.finished else f"taken over by {holder}"
                log.warning("trial %d was %s: its lease expired here (was this job paused, or its file "
                            "system slow?); it keeps running, the first result counts", tid, by)

    # -- start and stop --------------------------------------------------------------------------------
    def restore(self) -> bool:
        """Join the search: rebuild it from the journal (refusing one made for a different search), record
        this participant and start the lease heartbeat. True if the journal already held trials."""
        with self.s.lock, self._locked():
            had = self.shared.n_trials > 0
            header = self.shared.header
            if header is None:
                self._record("search", spec=self._identity())
            else:
                mine = self._identity()
                keys = [*mine, *(["schedule"] if "schedule" not in mine else [])]  # a full search has none
                diff = [k for k in keys if header.get(k) != mine.get(k)]
                if diff:
                    raise ConfigError(
                        f"{self.journal.path} belongs to a search with a different {', '.join(diff)} "
                        f"({'; '.join(f'{k} {header.get(k)}, this job {mine.get(k)}' for k in diff)}); join it "
                        "with the same options, or use a new --output directory")
            self._record("join", host=socket.gethostname(), pid=os.getpid())
        self._joined = True
        if self._heartbeat and self._beat is None:
            self._beat = threading.Thread(target=self._beat_loop, name="nnlo-lease-heartbeat", daemon=True)
            self._beat.start()
        if had:
            log.info("joined the shared search in %s as %s: %d trial(s) done, %d open, next id %d",
                     self.s.out_dir, self.participant, len(self.finished), len(self.shared.open), self.next_id)
        return had

    def close(self) -> None:
        """Stop the heartbeat and give back any lease still held (the pool gets those trials at once)."""
        self.give_back(leave=True)
        self.journal.close()

    def last_words(self) -> None:
        """A rank of this job died: give the running trials back to the pool at once (never renewing a dead
        trial's lease)."""
        self.give_back()

    def give_back(self, leave: bool = False) -> None:
        """Stop renewing and release every trial this job runs: the pool gets them at once (with their last
        checkpoints), for any participant. Also what the coordinator does when a rank of its job died
        (:func:`nnlo.liveness.last_words`): a lease is never renewed for a trial whose ranks are gone."""
        self._quit.set()
        if self._beat is not None and self._beat is not threading.current_thread():
            self._beat.join()
            self._beat = None
        if self._joined:
            with self.s.lock, self._locked():  # after whatever the coordinator's thread is doing
                for tid in sorted(self.s.in_flight):
                    del self.s.in_flight[tid]
                    if self._holds(tid):
                        self._record("release", id=tid)
                if leave:
                    self._record("leave")
            self._joined = not leave

    def _holds(self, tid: int) -> bool:
        lease = self.shared.open.get(tid)
        return lease is not None and lease.holder == self.participant

    def renew(self) -> list[int]:
        """Extend the leases of this participant's running trials (the heartbeat calls it); their ids.

        It waits for nothing but the journal's lock, which nobody holds while proposing or copying, and
        changes nothing the coordinator's thread reads: the records it reads on its way are kept for that
        thread's next catch-up, the ids it renews are the ones that thread published."""
        with self.journal.locked():
            records, skipped = self.journal.read_new()
            self._inbox.extend(records)
            for s in skipped:
                log.warning("%s", s.describe(self.journal.path))
            ids = sorted(self._renewing)
            if ids:
                rec = {"kind": "renew", "p": self.participant, "t": self.clock(), "ids": ids,
                       "until": self.clock() + self.lease_s}
                self.journal.append(rec)
                self._inbox.append(rec)
            return ids

    def _beat_loop(self) -> None:
        while not self._quit.wait(self.lease_s / 4):
            try:
                self.renew()
            except Exception as e:  # noqa: BLE001 - a missed beat is retried; the lease outlives several
                log.error("could not renew the leases in %s: %s", self.journal.path, e)

    # -- hand-out --------------------------------------------------------------------------------------
    def _over(self) -> bool:
        """Nothing more will be handed out by anyone: budget finished, target reached or model broken (under
        a schedule: no job runs anywhere and the schedule has none left)."""
        if self.s.target_reached() or self.s.broken() is not None:
            return True
        if self.s.staged:
            return not self.shared.open and self.s._job() is None
        return len(self.finished) >= self.s.num_iterations

    def complete(self) -> bool:
        return self._over()

    def can_hand_out(self) -> bool:
        if self.s.target_reached() or self.s.broken():
            return False
        if self.shared.claimable(self.clock(), self.participant, self.s.in_flight):
            return True
        if self.s.staged:
            return self.s._job() is not None
        return self.shared.n_trials < self.s.num_iterations

    # -- the schedule's view of the journal --------------------------------------------------------------
    def ledger(self) -> Ledger:
        """Every trial of the journal (open jobs with the rung they train toward, wherever they run), rebuilt
        when the journal brought something new."""
        if self._built[0] != self.s.version:
            opened = [self._lease_trial(lease) for lease in self.shared.open.values()
                      if lease.id not in self.shared.finished]
            self._built = (self.s.version, ledger([*self.shared.finished.values(), *opened], self.s.objective,
                                                 {lease.id: lease.target for lease in self.shared.open.values()}))
        return self._built[1]

    def _lease_trial(self, lease: Lease) -> Trial:
        """The trial an open job trains: a copy of its paused record (so this job's result is folded in by
        the journal, not by hand), or a new trial with the job's fields."""
        paused = self.shared.finished.get(lease.id)
        if paused is not None:
            trial = copy.deepcopy(paused)
        else:
            job = lease.job
            trial = Trial(lease.id, self.s.engine.space.point(lease.params), bracket=job.get("bracket"),
                          parent=job.get("parent"), replaces=job.get("replaces"), start_epochs=job.get("start_epochs"))
        trial.target = lease.target
        return trial

    def next_trial(self, block: int, now: float | None) -> Trial | None:
        """A trial for an idle block, or None. With every block idle and trials still running elsewhere,
        waits (re-reading the journal) until one can be claimed, the search is over or :attr:`stop` says
        stop."""
        trial = self._claim(block, now)
        if trial is not None or self.s.in_flight or self.stop is None:
            return trial
        announced = False
        while True:
            with self.s.lock:  # the last words may catch up meanwhile (from their own thread)
                if self._over():
                    break
            now = self.clock()
            if self.stop.reason(now) is not None or self.stop.no_time_for(self.s.typical_trial_s(), now):
                return None
            trial = self._claim(block, None)
            if trial is not None:
                return trial
            if not announced:
                with self.s.lock:
                    others = self.shared.held_by_others(self.clock(), self.participant)
                who = sorted({str(lease.holder) for lease in others})
                log.info("waiting for %d trial(s) running in %s; an expired lease (%gs) is taken over here",
                         len(others), ", ".join(who) or "other participants", self.lease_s)
                announced = True
            time.sleep(self.poll_s)
        return None

    def _claim(self, block: int, now: float | None) -> Trial | None:
        """A trial for ``block`` from the journal, or None. The decision is taken under the journal's lock;
        what is slow - the engine's proposal, a PBT child's checkpoint copy - runs outside every lock (other
        participants append, this job's heartbeat renews meanwhile): a proposal is asked with the state the
        decision saw and used if nobody proposed that id meanwhile (else the decision is taken again); a child
        is proposed first (its lease renewed while it is copied), copied, then started with a ``start`` record."""
        if self.monotonic() < self._quiet_until:
            return None
        asked: _Asked | None = None
        for _ in range(_CLAIM_TRIES):
            with self.s.lock, self._locked():
                t = self.clock() if now is None else now
                step = self._claim_locked(block, t, asked)
                if step is None or isinstance(step, Trial):
                    return self._claimed(step, block, t)
                if isinstance(step, _Copy):  # proposed (or taken over) and leased to this job: running here
                    self._running(step.trial, block, t)
            if isinstance(step, _Ask):
                asked = _Asked(step.tid, step.job, self.s.ask(step.tid, step.pending))  # outside the locks
                continue
            self.s.inherit_checkpoint(step.trial)  # outside the locks: the heartbeat renews its lease meanwhile
            with self.s.lock, self._locked():
                return self._started(step.trial)
        return None

    def _claimed(self, trial: Trial | None, block: int, now: float) -> Trial | None:
        if trial is None:
            if not self._refused:  # another block may still take what this one was refused
                self._quiet_until = self.monotonic() + self.poll_s
            return None
        self._running(trial, block, now)
        return trial

    def _running(self, trial: Trial, block: int, now: float) -> None:
        trial.status, trial.block, trial.started = "running", block, now
        self.s.in_flight[trial.id] = trial

    def _started(self, trial: Trial) -> Trial | None:
        """A child's copy is done: record where it starts (its target moved on when the copy is further along),
        unless its lease was lost meanwhile (given back by a dying job, or taken over)."""
        if trial.id not in self.s.in_flight or not self._holds(trial.id):
            self.s.in_flight.pop(trial.id, None)
            return None
        self._record("start", id=trial.id, target=trial.target, start_epochs=trial.start_epochs)
        started = self._lease_trial(self.shared.open[trial.id])
        self._running(started, int(trial.block or 0), float(trial.started or self.clock()))
        return started

    def _claim_locked(self, block: int, now: float, asked: _Asked | None) -> Trial | _Ask | _Copy | None:
        self._refused = False
        if self._over():
            return None
        until = now + self.lease_s
        free = [lease for lease in self.shared.claimable(now, self.participant, self.s.in_flight)
                if not self._fail_if_nowhere(lease, block, now)]
        work = [self.s._work(self.shared.finished.get(lease.id), lease.target) for lease in free]
        pick = self.s.place(block, [lease.params for lease in free], now, work) if free else -1
        self._refused = bool(free) and pick < 0
        if pick >= 0:
            lease = free[pick]
            why = ("from the pool" if lease.holder is None else "back (this participant's lease)"
                   if lease.holder == self.participant else f"over from {lease.holder} (lease expired)")
            self._record("lease", id=lease.id, until=until, **({"from": lease.holder} if lease.holder else {}))
            log.info("trial %d taken %s: re-run with the same parameters%s", lease.id, why,
                     "" if lease.target is None else f", on from its last checkpoint toward rung {lease.target}")
            trial = self._lease_trial(lease)
            return _Copy(trial) if lease.job.get(COPY) else trial  # a child whose copy never completed
        if self.s.staged:
            job = self.s._job()
            if job is None:
                return None
            paused = self.shared.finished.get(job.trial) if job.trial is not None else None
            if paused is not None or job.params is not None:  # the schedule's own point: it must fit this block
                params = paused.params if paused is not None else dict(job.params or {})
                if self.s.place(block, [params], now, [self.s._work(paused, job.rung)]) < 0:
                    self._refused = True
                    return None
            return self._start_locked(job, until, asked)
        if self.shared.n_trials >= self.s.num_iterations:
            return None
        tid = self.shared.next_id
        point = asked.point if asked is not None and asked.tid == tid and asked.job is None else None
        if point is None:
            return _Ask(tid, self.pending(), None)
        self._record("propose", id=tid, params=point, until=until)
        if self.s.place(block, [point], now) < 0:  # it does not fit this block: another block or job takes it
            self._refused = True
            self._record("release", id=tid)
            log.info("trial %d does not fit block %d (%s) now: left in the pool", tid, block, self.s.block_type(block))
            return None
        return Trial(tid, point)

    def _start_locked(self, job: Job, until: float, asked: _Asked | None) -> Trial | _Ask | _Copy:
        """Append the schedule's job: a paused trial resumed, or a new trial proposed (its point from the
        schedule, or the engine's asked outside the lock; a PBT child proposed before its checkpoint copy, which
        runs outside the lock)."""
        if job.trial is not None:
            self._record("resume", id=job.trial, until=until, job={"target": job.rung})
            return self._lease_trial(self.shared.open[job.trial])
        tid = self.shared.next_id
        if job.params is not None:
            point = dict(job.params)
        elif asked is not None and asked.tid == tid and asked.job == job:
            point = asked.point
        else:
            return _Ask(tid, self.pending(), job)
        trial = self.s.new_trial(job, tid, point)
        fields = {k: getattr(trial, k) for k in JOB_FIELDS if getattr(trial, k) is not None}
        marked = {COPY: True} if trial.parent is not None else {}
        self._record("propose", id=tid, params=point, until=until, **fields, **marked)
        leased = self._lease_trial(self.shared.open[tid])
        return _Copy(leased) if marked else leased

    def _elsewhere(self, params: dict[str, Any]) -> list[str]:
        """Other participants still in the search that ran on a block type ``params`` may fit."""
        return sorted(p for p, types in self.shared.types.items()
                      if p != self.participant and self.shared.participants.get(p, {}).get("state") == "join"
                      and any(self.s.assign.fits_type(params, t) for t in types))

    def _fail_if_nowhere(self, lease: Lease, block: int, now: float) -> bool:
        """Record the lease's trial failed if no block here and no other participant's may hold it (call
        locked; under a schedule, the stage it was to train)."""
        why = self.s.assign.placeable(lease.params)
        if why is None or self._elsewhere(lease.params):
            return False
        trial = self._lease_trial(lease)
        folds = [{"error": f"it fits no block of any participant: {why}", "code": 1}] * self.s.n_fold
        rung = trial.target
        if self.s.staged and rung is not None:
            trial.finish_stage(folds, self.s.objective, block, rung, self.s.schedule.budgets[rung], now)
        else:
            trial.finish(folds, self.s.objective, block, now)
        self._record("result", id=lease.id, trial=trial.to_dict(), **({} if rung is None else {"rung": rung}))
        return True

    def pending(self) -> list[dict[str, Any]]:
        """Every open job's point, and every trial with results the engine does not observe (paused ones)."""
        return pending(self.shared.finished.values(), self.s._results) + [
            lease.params for lease in sorted(self.shared.open.values(), key=lambda lease: lease.id)
            if lease.id not in self.shared.finished]

    # -- results ---------------------------------------------------------------------------------------
    def record(self, trial_id: int, fold_results: list[dict[str, Any]], block: int, now: float | None) -> Trial:
        """Append the trial's result to the journal (unless another participant's result came first)."""
        trial = self.s.in_flight[trial_id]
        rung = trial.target
        now = self.clock() if now is None else now
        if self.s.staged and rung is not None:
            trial.finish_stage(fold_results, self.s.objective, block, rung, self.s.schedule.budgets[rung], now)
        else:
            trial.finish(fold_results, self.s.objective, block, now)
        with self.s.lock, self._locked():
            del self.s.in_flight[trial_id]
            self._quiet_until = 0.0
            have = self.shared.finished.get(trial_id)
            if have is not None and (rung is None or (have.rung is not None and have.rung >= rung)):
                log.warning("trial %d: a result from another participant came first; this one is dropped "
                            "(a trial counts once%s)", trial_id, "" if rung is None else " per rung")
                return trial
            self.s.observe_job(trial, block, "ok" if trial.status != "failed" else "failed")
            self._record("result", id=trial_id, trial=trial.to_dict(), **({} if rung is None else {"rung": rung}))
        return self.shared.finished[trial_id]

    def keep(self, obs: CostObservation) -> None:
        """A job's cost goes into the journal, for every participant's placement."""
        with self.s.lock, self._locked():
            self._record("cost", **obs.to_record())

    def out_of_memory(self, trial_id: int, fold_results: list[dict[str, Any]], block: int,
                      now: float | None) -> str | None:
        """Out of memory on ``block``: a block here it may fit takes it back (the lease stays here), else a
        participant that ran on a block type it may fit (the pool); else None (it fails)."""
        if not any(f.get("oom") for f in fold_results) or isinstance(self.s.assign, Fifo):
            return None
        trial = self.s.in_flight[trial_id]
        now = self.clock() if now is None else now
        with self.s.lock, self._locked():
            self.s.observe(trial, block, now - (now if trial.started is None else trial.started), "oom")
            self.s._learn()
            if self.s.assign.placeable(trial.params) is None:
                del self.s.in_flight[trial_id]
                return f"it re-runs on another block type than {self.s.block_type(block)}"
            others = self._elsewhere(trial.params)
            if not others:
                return None
            del self.s.in_flight[trial_id]
            if self._holds(trial_id):
                self._record("release", id=trial_id)
            return f"it fits no block here: back to the pool for {', '.join(others)}"

    def interrupted(self, trial_id: int) -> None:
        """Stopped by the deadline: back to the pool at once, for whichever participant is free first."""
        with self.s.lock, self._locked():
            self.s.in_flight.pop(trial_id, None)
            if self._holds(trial_id):
                self._record("release", id=trial_id)

    # -- persistence -----------------------------------------------------------------------------------
    def state_dict(self, state: dict[str, Any]) -> dict[str, Any]:
        state = dict(state)
        state["rerun"] = [rerun_entry(self._lease_trial(lease))
                          for lease in sorted(self.shared.open.values(), key=lambda lease: lease.id)]
        state["shared"] = {
            "journal": SEARCH_JOURNAL,
            "participants": sorted(self.shared.participants),
            "leases": [{"id": lease.id, "holder": lease.holder, "until": lease.until}
                       for lease in sorted(self.shared.open.values(), key=lambda lease: lease.id)],
        }
        return state

    def save(self) -> None:
        """Rewrite the derived files from the journal's newest state, under the lock (the last writer wins
        with the newest state)."""
        with self.s.lock, self._locked():
            save_state(self.s.out_dir, self.s.state_dict())
            write_results(self.s.out_dir, list(self.finished.values()), self.s.objective, self.s.engine.space.names,
                          self.s.n_fold, self.s.num_iterations)


def rebuilt_engine_state(folder: Path | str) -> dict[str, Any]:
    """The engine state any participant would have after reading the whole journal in ``folder``: the
    search's engine (from the journal's ``search`` record) told every finished result in journal order.
    A participant's final ``optimizer-state.json`` ``engine_state`` equals it."""
    state = rebuild(read_journal(folder)[0])
    if state.header is None:
        raise ConfigError(f"{Path(folder) / SEARCH_JOURNAL} holds no search; is {folder} a shared search's --output?")
    spec, opts = state.header, dict(state.header["engine_options"])
    engine = make_engine(opts.pop("engine"), Space.from_dict(spec["space"]), int(spec["seed"]),
                         estimator=opts.get("estimator", "GP"), n_initial_points=opts.get("n_initial_points", 10),
                         population=opts.get("population", 10))
    objective = Objective(**spec["objective"])
    if spec.get("schedule", {}).get("name", "full") != "full":  # the engine is fed one rung's results
        feed(engine, state.results(), objective)
    else:
        for trial in state.results():
            engine.tell(trial.params, None if trial.fom is None else objective.value(trial.fom),
                        fold_variance(trial))
    engine.n_asked = state.next_id
    return engine.state_dict()

