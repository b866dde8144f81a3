"""A submitted job as the code inside it sees it: its run folder, its deadline, and the record of its progress.

``nnlo submit ... script FILE.py`` runs FILE.py on every rank of each job of a checkpoint-restart chain, with
the chain's contract in the environment (:mod:`nnlo.contract`): the run folder ``$NNLO_RUN_DIR`` and the job's
deadline ``$NNLO_DEADLINE``. Inside such a job ``nnlo.train`` and ``nnlo.optimize`` follow the contract without
a word from the script:

* a training without ``checkpoint=`` writes into ``<run folder>/<its name>`` and checkpoints there; without
  ``restore=`` it restores its newest checkpoint (``"auto"``) - :func:`chained_config`;
* before the deadline, or on a stop signal, it writes a complete checkpoint and ends the process with exit 75
  (:data:`~nnlo.contract.EXIT_RESUMABLE`): the chain's next job runs the script again, and the training goes on
  where it stopped (:func:`end_if_resumable`). A search does the same with its state (its output folder is the
  run folder, resumed by every later job).

Every complete checkpoint is noted in the run folder's progress record (:data:`~nnlo.contract.PROGRESS_FILE`,
:func:`checkpointed`): a job that stopped at its walltime is followed by the next only when it saved something,
so a script that never saves its state cannot burn allocations in a loop. Code that trains by itself honours
the contract with the same few names, public as ``nnlo.deadline()``, ``nnlo.seconds_left()``,
``nnlo.checkpointed(path)`` and ``nnlo.EXIT_RESUMABLE`` (docs/python-api.md shows a loop).

Outside a submitted run (no ``$NNLO_RUN_DIR``) nothing here changes anything: a script started with ``mpirun``
by hand gets the Python API as documented, and :func:`checkpointed` records nothing.
"""
from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nnlo.atomic import write_json
from nnlo.config import TrainConfig, deadline_from_env
from nnlo.contract import ENV_RUN_DIR, EXIT_RESUMABLE, PROGRESS_FILE, PROGRESS_RESULTS

__all__ = ["EXIT_RESUMABLE", "asked", "chained_config", "checkpointed", "deadline", "end_if_resumable",
           "forget_question", "on_first_question", "progress", "progress_marker", "run_dir", "search_saved",
           "seconds_left", "working_in"]

#: what waits for the code of the job to ask about it first (a script's stop handler: nnlo.script_stop)
_first_question: list[Callable[[], None]] = []


def on_first_question(hook: Callable[[], None]) -> None:
    """Call ``hook`` (once) when this process's code first asks about its job: :func:`deadline`,
    :func:`seconds_left`, :func:`checkpointed` or ``nnlo.stop_requested()``."""
    _first_question.append(hook)


def forget_question(hook: Callable[[], None]) -> None:
    """Drop ``hook`` if it has not run yet."""
    if hook in _first_question:
        _first_question.remove(hook)


def asked() -> None:
    """This process's code asked about its job: run the hooks that waited for it (once)."""
    while _first_question:
        _first_question.pop(0)()


def run_dir() -> Path | None:
    """The folder of the submitted run this process is a job of (``$NNLO_RUN_DIR``), or None outside one."""
    value = os.environ.get(ENV_RUN_DIR, "").strip()
    return Path(value) if value else None


def deadline() -> float | None:
    """Unix seconds by which this job must have saved its state and stopped (``$NNLO_DEADLINE``), or None.

    The batch system ends the job soon after; a malformed value is a one-line :class:`~nnlo.errors.ConfigError`.
    """
    asked()
    return deadline_from_env()


def seconds_left(now: float | None = None) -> float | None:
    """Seconds until :func:`deadline` (negative once it has passed), or None when the job has none."""
    end = deadline()
    return None if end is None else end - (time.time() if now is None else now)


# -- the progress record ---------------------------------------------------------------------------------------
def progress(folder: str | Path) -> dict[str, Any]:
    """The progress record of the run ``folder`` (``{}`` when there is none or it cannot be read)."""
    try:
        data = json.loads((Path(folder) / PROGRESS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def progress_marker(folder: str | Path) -> str | None:
    """A string that changes whenever a job of the run ``folder`` makes progress (None: none yet).

    A training's or a script's progress is a saved state (its checkpoint, noted with its time). A search's is
    its count of trial results and schedule stages (:data:`~nnlo.contract.PROGRESS_RESULTS`, noted by
    :func:`search_saved`): a search saves its state at every job's start, so a save alone is no progress, and a
    search that has recorded no result has none at all.
    """
    record = progress(folder)
    results = record.get(PROGRESS_RESULTS)
    if isinstance(results, int) and not isinstance(results, bool):
        return f"{results} results" if results > 0 else None
    saved = record.get("checkpoint")
    return f"{saved}@{record.get('saved_at')}" if saved else None


def _update(changes: dict[str, Any]) -> None:
    """Change the record's ``changes`` keys, the rest as it is: under a lock, since every rank of a job may
    write it (a search's coordinator its count, the trials' trainings their checkpoints) and an update made
    from a stale read would undo another's."""
    folder = run_dir()
    if folder is None or not folder.is_dir():
        return
    with open(folder / f"{PROGRESS_FILE}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        write_json(folder / PROGRESS_FILE, {**progress(folder), **changes})


def checkpointed(path: str | Path) -> None:
    """Note that this job saved its state in ``path`` (a file or a folder): a stop of the job from now on
    (exit 75, or the batch system's signal at the walltime) is followed by the chain's next job. nnlo's
    trainings and searches call it for every checkpoint; a script that saves its own state calls it after each
    save. Outside a submitted run it does nothing. In a search's job the trials' trainings checkpoint too: that
    leaves the search's count (:func:`search_saved`) the job's only measure of progress, whichever process
    wrote last."""
    asked()
    _update({"checkpoint": str(Path(path).absolute()), "saved_at": time.time()})


def search_saved(path: str | Path, results: int) -> None:
    """Note that this job's search saved its state in ``path`` holding ``results`` trial results and schedule
    stages (:data:`~nnlo.contract.PROGRESS_RESULTS`): the chain goes on after a stop of this job only if the
    count grew during it. Outside a submitted run it does nothing."""
    _update({"checkpoint": str(Path(path).absolute()), "saved_at": time.time(), PROGRESS_RESULTS: int(results)})


def working_in(folder: str | Path) -> None:
    """Note the folder of the training or search this job's script runs (``nnlo status`` shows its progress)."""
    _update({"folder": str(Path(folder).absolute())})


# -- what nnlo.train and nnlo.optimize do inside a job ------------------------------------------------------
def chained_config(config: TrainConfig, default_dir: str) -> TrainConfig:
    """``config`` as a job of a submitted run trains it: checkpoints in ``default_dir`` unless the script named a
    folder, restored from the newest one there unless it said otherwise. Unchanged outside a submitted run."""
    if run_dir() is None:
        return config
    return config.replace(checkpoint=config.checkpoint or default_dir, restore=config.restore or "auto")


def end_if_resumable(resumable: bool) -> None:
    """Inside a submitted run, a training or search that stopped before its deadline (or on a stop signal) with
    its state saved ends the process with exit 75, so that the chain runs the script again in its next job
    (where the code after the call would then run once, with the finished result)."""
    if resumable and run_dir() is not None:
        raise SystemExit(EXIT_RESUMABLE)

