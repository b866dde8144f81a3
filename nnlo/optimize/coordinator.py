"""The coordinator (world rank 0): hands trials to blocks as they free up and records their results.

No block ever waits for another: the coordinator sends a trial to every idle block, then takes whichever
result arrives first (``Iprobe`` on any source), records it, gives that block its next trial - proposed with
the still-running trials as pending points - and saves the state and the tables atomically. A save rewrites
every trial, which under a schedule means thousands (~0.3 s at 3,000), and blocks must not queue behind
saves: results that arrive together are recorded (and their blocks served) before one save covers them all,
and saves take at most :data:`SAVE_SHARE` of the coordinator's time (after a save of d seconds the next waits
d / SAVE_SHARE; a few milliseconds for hundreds of trials). A kill loses at most the results since the last
save: their jobs re-run, a schedule's stage from the checkpoint it ended with (at once).

Stopping: at ``--deadline``/``NNLO_DEADLINE`` or on a stop signal (:mod:`nnlo.stop`) it stops handing out
trials (also when the typical trial would not finish before the deadline), collects running trials for up to
``grace`` seconds (trainings stop themselves at the deadline and report "interrupted": they re-run after
resubmission), saves, stops the blocks and returns 75. If blocks are still busy after the grace period the
state is already saved, so it aborts the MPI job with code 75.

Heterogeneous blocks and parallel proposals: an assignment policy (:mod:`nnlo.optimize.assign`, ``--assign``)
picks which pooled proposal an idle block gets, or has it wait (the hardware-aware policy checks each job against
the deadline itself, instead of the median rule above); a trial that ran out of memory re-runs on a block it
may fit. With proposer ranks (``--proposers P`` > 1, :mod:`nnlo.optimize.proposers`) the points come from them,
and the coordinator keeps them busy between results.
"""
from __future__ import annotations

import logging
import sys
import time
from typing import Any

from nnlo.abort import abort_job
from nnlo.contract import ENV_TEST_SIGNAL_AT_TRIAL, EXIT_BAD_INPUT, EXIT_DONE, EXIT_FAILED, EXIT_RESUMABLE, TRIALS_CSV
from nnlo.errors import NnloError
from nnlo.optimize.protocol import TAG_RESULT, TAG_TASK
from nnlo.optimize.search import Search
from nnlo.optimize.tracking import SearchTracking
from nnlo.optimize.trial_files import read_block_result
from nnlo.roles import Hierarchy
from nnlo.stop import InjectedSignal, Stop
from nnlo.training.failure import RankFailure

log = logging.getLogger("nnlo.optimize.coordinator")

#: the most of its time the coordinator spends saving the search (see the module's docstring)
SAVE_SHARE = 0.05

class Coordinator:
    def __init__(self, world: Any, hierarchy: Hierarchy, search: Search, stop: Stop, *,
                 grace_s: float = 60.0, poll_s: float = 0.02, progress: Any = None, proposers: Any = None,
                 tracking: SearchTracking | None = None):
        """``search`` was made for this job (its blocks, placement, deadline and proposers given to it);
        ``proposers``: the :class:`nnlo.optimize.proposers.MpiProposers` whose ``propose`` the search was
        given (the coordinator keeps them busy between results and stops them at the end)."""
        self.world = world
        self.tracking = tracking  # --tensorboard/--mlflow: told every trial recorded
        self.hierarchy = hierarchy
        self.search = search
        self.stop = stop
        self.grace_s = grace_s
        self.poll_s = poll_s
        self.progress = progress
        self.busy: dict[int, int] = {}  # block -> trial id
        self.idle: list[int] = list(range(len(hierarchy.blocks)))
        self.injected = InjectedSignal(ENV_TEST_SIGNAL_AT_TRIAL)  # test hook: the real signal path
        self._unsaved = False  # results or hand-outs since the last save
        self._save_after = 0.0  # monotonic time before which saving waits (SAVE_SHARE)
        self.proposers = proposers

    def run(self) -> int:
        try:
            return self._run()
        except RankFailure as e:  # a proposer rank failed: one line, the state kept, no rank left waiting
            self.search.save()
            self._close_progress()
            print(f"nnlo: error: {e}; the search state is saved in {self.search.out_dir}: resubmit with "
                  "--opt-restore once the cause is fixed (or use --proposers 1)", file=sys.stderr, flush=True)
            abort_job(self.world, EXIT_FAILED)
        except NnloError as e:  # bad input found while the blocks wait (a model's placement hook): no rank hangs
            self.search.save()
            self._close_progress()
            print(f"nnlo: error: {e}", file=sys.stderr, flush=True)
            abort_job(self.world, e.exit_code)

    def _run(self) -> int:
        from mpi4py import MPI  # lazy: mpi4py

        search = self.search
        search.save()  # the run directory shows the search from its first second (and after a restore)
        stop_reason: str | None = None
        give_up_at: float | None = None
        while True:
            now = time.time()
            if stop_reason is None:
                stop_reason = self.stop.reason(now)
                if stop_reason is not None:
                    give_up_at = now + self.grace_s
                    log.warning("stopping (%s): waiting for %d running trial(s)", stop_reason, len(self.busy))
            if stop_reason is None and (search.assign.fits_deadline
                                        or not self.stop.no_time_for(self._typical_s(), now)):
                self._dispatch(now)
                if self.proposers is not None and search.can_hand_out():
                    self.proposers.pump(search.pending())  # proposers work while the blocks train
            if self._unsaved and (not self.busy or stop_reason is not None
                                  or (time.monotonic() >= self._save_after and not self._result_waiting())):
                self._save()  # every result and hand-out so far: a kill now re-runs exactly the running trials
            if not self.busy:
                break
            if give_up_at is not None and now > give_up_at:
                log.error("trials still running %ds after the stop; state saved, aborting with %d",
                          self.grace_s, EXIT_RESUMABLE)
                search.save()
                self._close_progress()
                abort_job(self.world, EXIT_RESUMABLE)
            status = MPI.Status()
            if self.world.Iprobe(source=MPI.ANY_SOURCE, tag=TAG_RESULT, status=status):
                msg = self.world.recv(source=status.Get_source(), tag=TAG_RESULT)
                self._on_result(msg)
            else:
                time.sleep(self.poll_s)
        search.close()
        code = self._exit_code(stop_reason)
        if self.tracking is not None:
            self.tracking.close(code == EXIT_DONE)
        if self.proposers is not None:
            self.proposers.stop(code)
        for b in range(len(self.hierarchy.blocks)):
            self.world.send({"stop": True, "code": code}, dest=self.hierarchy.block_leader(b), tag=TAG_TASK)
        self._close_progress()
        self._summary(code)
        return code

    # -- steps ---------------------------------------------------------------------------------------
    def _dispatch(self, now: float) -> None:
        handed_out = False
        blocks = list(self.idle)  # a block the policy has wait does not hold up the others
        while blocks:
            block = blocks.pop(0)
            trial = self.search.next_trial(block, now)
            if trial is None:
                if not self.search.can_hand_out():
                    break
                continue
            self.idle.remove(block)
            self.busy[block] = trial.id
            task: dict[str, Any] = {"trial": trial.id, "params": trial.params}
            epochs = self.search.job_epochs(trial)
            kept = read_block_result(self.search.out_dir, trial.id, trial.params, epochs)
            if kept is not None:  # computed by a block of a job whose coordinator died before recording it
                log.warning("trial %d: taking the result its block kept before the last job ended (not re-run)",
                            trial.id)
                trial.started = time.time() - max(0.0, float(kept.get("elapsed") or 0.0))  # it took what it took
                self._on_result({**kept, "block": block})
                handed_out = True
                blocks.append(block)  # idle again at once: it takes the next trial in this round
                continue
            if epochs is not None:  # a schedule's stage: train (on) to this many epochs in total
                task["epochs"] = epochs
            self.world.send(task, dest=self.hierarchy.block_leader(block), tag=TAG_TASK)
            log.debug("trial %d -> block %d: %s%s", trial.id, block, trial.params,
                      "" if epochs is None else f" to epoch {epochs}")
            handed_out = True
        if handed_out:  # persisted by the next save: a kill then re-runs exactly these trials
            self._unsaved = True

    def _save(self) -> None:
        t0 = time.monotonic()
        self.search.save()
        self._unsaved = False
        self._save_after = time.monotonic() + (time.monotonic() - t0) / SAVE_SHARE

    def _result_waiting(self) -> bool:
        from mpi4py import MPI  # lazy: mpi4py

        return bool(self.world.Iprobe(source=MPI.ANY_SOURCE, tag=TAG_RESULT))

    def _on_result(self, msg: dict[str, Any]) -> None:
        block, trial_id = int(msg["block"]), int(msg["trial"])
        self.busy.pop(block, None)
        self.idle.append(block)
        folds = msg["folds"]
        if any(f.get("interrupted") for f in folds) and not any(f.get("error") for f in folds):
            self.search.interrupted(trial_id)
            log.warning("trial %d was interrupted by the deadline; it re-runs after resubmission", trial_id)
            # a training stops early only on a deadline or a signal: the whole job is ending, even if the
            # coordinator's own clock or signal has not said so yet - never hand the trial out again now
            self.stop.request("a training was interrupted (deadline or signal)")
            self.search.save()
            return
        elsewhere = self.search.out_of_memory(trial_id, folds, block)
        if elsewhere is not None:
            log.warning("trial %d ran out of memory on block %d: %s", trial_id, block, elsewhere)
            self.search.save()
            return
        trial = self.search.record(trial_id, folds, block)
        self._unsaved = True
        self._report(trial)
        self.injected.tick()

    def _report(self, trial: Any) -> None:
        search = self.search
        best = search.best()
        fom = f"{search.objective.name}={trial.fom:.6g}" if trial.fom is not None else f"FAILED ({trial.error})"
        if trial.fom is not None and search.n_fold > 1:
            fom += f" ±{trial.fom_std:.3g}"
        stage = "" if trial.rung is None else f" rung {trial.rung} ({trial.epochs} epochs)"
        log.info("trial %d [block %d]%s %s %s", trial.id, trial.block, stage, fom, trial.params)
        if self.tracking is not None:
            self.tracking.trial(trial, best, search.objective.name)
        if self.progress is not None:
            self.progress.update(trial=len(search.finished), fom=trial.fom, running=len(self.busy),
                                 failed=search.n_failed or None,
                                 best_fom=best.fom if best else None, best_trial=best.id if best else None)

    def _typical_s(self) -> float | None:
        return self.search.typical_trial_s()

    def _exit_code(self, stop_reason: str | None) -> int:
        search = self.search
        broken = search.broken()
        if broken is not None:
            rule = search.failures
            print(f"nnlo: error: the search stopped: {search.n_failed} of {len(search.finished)} finished trial(s) "
                  f"failed (it stops when {rule.describe()}: --max-failures {rule.option}; 1 never stops); "
                  f"first error: {broken.error}", file=sys.stderr)
            return EXIT_BAD_INPUT if broken.error_code == EXIT_BAD_INPUT else EXIT_FAILED
        if search.complete():
            return EXIT_DONE
        log.warning("search stopped (%s) with %d/%d trials done; state saved in %s - resubmit to resume",
                    stop_reason or "deadline", len(search.finished), search.num_iterations, search.out_dir)
        return EXIT_RESUMABLE

    def _summary(self, code: int) -> None:
        search = self.search
        best = search.best()
        what = "finished" if code == EXIT_DONE else "stopped"
        line = f"search {what}: {len(search.finished)} trial(s), {search.n_failed} failed"
        if best is not None:
            line += f"; best {search.objective.name} {best.fom:.6g} (trial {best.id}) {best.params}"
        log.info("%s; results: %s", line, search.out_dir / TRIALS_CSV)

    def _close_progress(self) -> None:
        if self.progress is not None:
            self.progress.close()
