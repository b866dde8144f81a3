"""A block: ``block_size`` ranks that evaluate one parameter set at a time, split into fold groups.

Every rank of a block runs :func:`run_block`. The block leader (its first rank) receives a trial from the
coordinator, makes the trial's folder this (id, parameters) trial's (:func:`claim_task`: another trial's files
under a reused id are moved aside before any rank resumes from them) and broadcasts it over the block
communicator; each fold group evaluates it with the runner on
its own communicator (the fold groups of a block run concurrently); the outcomes are gathered on the
leader and sent back as one result. Exceptions are caught on every rank and reported as the fold's error,
so a trial whose model raises is recorded as failed and the block takes the next trial. A rank that dies
hard (segfault, MPI abort) ends the MPI job: that cannot be survived inside one job, and the chain's
resubmission restarts the search from the coordinator's state.

Waiting ranks sleep instead of spinning in MPI (:func:`nnlo.transport.wait_for_all`): between trials, and
while a fold group or the leader is still evaluating, a block's idle ranks leave their cores to those that
work (and to the ``-n`` launcher's watcher, which must see a killed rank vanish before the teardown).
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from nnlo.optimize.protocol import TAG_RESULT, TAG_TASK
from nnlo.optimize.runners import FoldOutcome, Runner, outcome_of_exception
from nnlo.optimize.trial_files import claim, write_block_result
from nnlo.roles import Hierarchy
from nnlo.transport import wait_for_all, wait_for_message

log = logging.getLogger("nnlo.optimize.block")



def run_block(world: Any, hierarchy: Hierarchy, block_comm: Any, group_comm: Any, runner: Runner,
              out_dir: Path) -> int:
    """Serve trials until the coordinator says stop; returns the exit code it sends."""
    rank = world.Get_rank()
    info = hierarchy[rank]
    coordinator = hierarchy.coordinator
    assert coordinator is not None, "blocks exist only in optimization runs, which have a coordinator"
    n_fold = hierarchy.shape.n_fold
    leader = block_comm.Get_rank() == 0
    while True:
        # between trials every rank sleeps rather than spins (the coordinator may take seconds to propose)
        if leader:
            wait_for_message(world, coordinator, TAG_TASK)
        msg = world.recv(source=coordinator, tag=TAG_TASK) if leader else None
        if msg is not None and not msg.get("stop"):
            msg = claim_task(out_dir, msg)  # before any rank of the block reads or writes the trial's folder
        wait_for_all(block_comm)
        msg = block_comm.bcast(msg, root=0)
        if msg.get("stop"):
            return int(msg.get("code", 0))
        trial_id, params = int(msg["trial"]), dict(msg["params"])
        epochs = msg.get("epochs")  # a schedule's stage: train to this many epochs (None: --epochs)
        t0 = time.monotonic()  # an interval: a step of the wall clock must not enter the trial's time
        outcome: FoldOutcome | None
        try:
            if msg.get("unclaimed"):
                raise OSError(msg["unclaimed"])
            outcome = runner.run(group_comm, trial_id, params, int(info.fold or 0), n_fold, out_dir,
                                 epochs=None if epochs is None else int(epochs))
        except Exception as e:  # noqa: BLE001 - a trial may fail in any way; the search must go on
            outcome = outcome_of_exception(e, log)
            # the coordinator prints the failed trial (one line); this rank's record of it is not for the screen
            log.info("trial %d fold %s failed on rank %d: %s", trial_id, info.fold, rank, outcome.error)
        is_top = group_comm.Get_rank() == 0
        report = (int(info.fold or 0), is_top, None if outcome is None else outcome.to_dict())
        wait_for_all(block_comm)  # ranks done early (other folds, hook evaluations) sleep meanwhile
        gathered = block_comm.gather(report, root=0)
        if leader:
            folds = merge_folds(gathered, n_fold)
            result = {"trial": trial_id, "block": info.block, "folds": folds, "elapsed": time.monotonic() - t0}
            # a coordinator's death loses nothing; a result that sends the trial elsewhere (interrupted: the next
            # job; out of memory: a larger block) is no result to take again
            if not any(f.get("interrupted") or f.get("oom") for f in folds):
                write_block_result(out_dir, trial_id, params, None if epochs is None else int(epochs), result)
            world.send(result, dest=coordinator, tag=TAG_RESULT)


def claim_task(out_dir: Path, msg: dict[str, Any]) -> dict[str, Any]:
    """The task, after its trial's folder is made this (id, parameters) trial's (:func:`claim`); a folder that
    cannot be claimed fails the trial on every rank (``unclaimed``), rather than the leader alone."""
    try:
        epochs = msg.get("epochs")
        claim(out_dir, int(msg["trial"]), dict(msg["params"]), None if epochs is None else int(epochs))
    except OSError as e:
        return {**msg, "unclaimed": f"trial {msg['trial']}'s folder cannot be claimed: {e}"}
    return msg


def merge_folds(reports: list[tuple[int, bool, dict[str, Any] | None]], n_fold: int) -> list[dict[str, Any]]:
    """One outcome per fold: the top rank's, unless any rank of the fold group reported an error (and whether
    it ran out of memory)."""
    folds: list[dict[str, Any]] = [{"metrics": None, "error": "no result from the fold group", "interrupted": False}
                                   for _ in range(n_fold)]
    for fold, is_top, outcome in reports:
        if is_top and outcome is not None:
            folds[fold] = dict(outcome)
    for fold, is_top, outcome in reports:
        if not is_top and outcome is not None and outcome.get("error") and not folds[fold].get("error"):
            folds[fold] = {**folds[fold], "error": outcome["error"], "code": outcome.get("code", 1)}
        if outcome is not None and outcome.get("oom"):
            folds[fold] = {**folds[fold], "oom": True}
    return folds
