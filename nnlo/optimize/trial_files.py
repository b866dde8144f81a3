"""A trial's folder and the checkpoints in it: where each fold trains, and PBT's copy of another trial's.

Every trial and fold trains into ``<out>/trials/<id>/fold-<f>/`` and checkpoints there (``checkpoints/``, the
training's own complete, atomic checkpoints); an objective hook that can resume keeps its state in
``hook-state.json`` there instead. A trial that trains on (a promotion, the next PBT step, a re-run after a
deadline or a lost lease) resumes from that folder (``--restore auto``).

PBT's exploit (:func:`inherit`) copies the donor's checkpoint into a new trial's folder before the new trial
is handed out: the copy goes to a hidden temporary name and is renamed into place, so a kill leaves the
checkpoint whole or absent; the donor's checkpoint at the epochs of its result is preferred (the donor may
have trained on meanwhile), else its newest. A donor that is pruning its old checkpoints while we copy is
retried on the next one.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import socket
from pathlib import Path
from typing import Any

from nnlo import checkpoint as ckpt
from nnlo.atomic import write_json
from nnlo.contract import CHECKPOINT_DIR
from nnlo.errors import TrainingError

log = logging.getLogger("nnlo.optimize.trial_files")

#: an objective hook's resumable state (``evaluate(..., state=)``) in a fold's folder
HOOK_STATE = "hook-state.json"
_COPY_TRIES = 5


#: the folder of a search's trials, ``<out>/trials/<trial-id>/fold-<f>/``
TRIALS_DIR = "trials"


def trial_dir(out_dir: Path | str, trial_id: int, fold: int) -> Path:
    return Path(out_dir) / TRIALS_DIR / f"{trial_id:04d}" / f"fold-{fold}"


# -- an objective hook's state -----------------------------------------------------------------------------
def read_hook_state(folder: Path, epochs: int | None = None) -> tuple[Any, int]:
    """(the hook's state, the epochs it holds) in ``folder``: the newest, or the one at ``epochs`` if it is
    kept (the newest two are, as a training keeps two checkpoints under PBT); (None, 0) when there is none."""
    try:
        data = json.loads((folder / HOOK_STATE).read_text())
    except FileNotFoundError:
        return None, 0
    except (OSError, ValueError) as e:
        raise TrainingError(f"{folder / HOOK_STATE} is unreadable ({e}); remove it to train the trial afresh") from None
    previous = data.get("previous")
    if epochs is not None and isinstance(previous, dict) and int(previous.get("epochs") or 0) == epochs:
        data = previous
    return data.get("state"), int(data.get("epochs") or 0)


def write_hook_state(folder: Path, state: Any, epochs: int) -> None:
    """Keep the hook's new state (and the one before it) in ``folder``, atomically."""
    old, done = read_hook_state(folder)
    folder.mkdir(parents=True, exist_ok=True)
    previous = {"epochs": done, "state": old} if done and done < epochs else None
    write_json(folder / HOOK_STATE, {"epochs": int(epochs), "state": state, "previous": previous})


# -- a block's result, kept until the coordinator has it ---------------------------------------------------------
#: the result a block computed for a trial, written before it is sent: a coordinator that dies before it records
#: it loses nothing, the next job takes it from here instead of re-running the trial
BLOCK_RESULT = "block-result.json"


def write_block_result(out_dir: Path | str, trial_id: int, params: dict[str, Any], epochs: int | None,
                       result: dict[str, Any]) -> None:
    """Keep a block's merged result of trial ``trial_id`` (trained to ``epochs``; None: the run's own)."""
    folder = Path(out_dir) / "trials" / f"{trial_id:04d}"
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / BLOCK_RESULT, {"trial": trial_id, "params": params, "epochs": epochs, "result": result})


def read_block_result(out_dir: Path | str, trial_id: int, params: dict[str, Any],
                      epochs: int | None) -> dict[str, Any] | None:
    """The result a block kept for exactly this trial (same parameters, same stage), or None."""
    path = Path(out_dir) / "trials" / f"{trial_id:04d}" / BLOCK_RESULT
    try:
        kept = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(kept, dict) or kept.get("trial") != trial_id or kept.get("epochs") != epochs:
        return None
    if json.loads(json.dumps(params)) != kept.get("params") or not isinstance(kept.get("result"), dict):
        return None
    return dict(kept["result"])


# -- PBT's exploit --------------------------------------------------------------------------------------------
def inherit(out_dir: Path | str, parent: int, child: int, n_fold: int, epochs: int | None = None) -> int | None:
    """Copy ``parent``'s checkpoint of every fold into ``child``'s folders (emptied first: an id is new, so
    anything there is a leftover of a job killed before it handed the trial out). Returns the epochs the
    child starts from (the fewest over folds), or None when the parent has no checkpoint (the child then
    trains from scratch, which is logged)."""
    start: list[int] = []
    for fold in range(n_fold):
        src, dst = trial_dir(out_dir, parent, fold), trial_dir(out_dir, child, fold)
        if dst.exists():
            shutil.rmtree(dst)
        got = _copy_checkpoint(src, dst, epochs)
        if got is None:
            if src.exists():
                log.warning("trial %d: trial %d's folder %s holds no checkpoint to start from; it trains from "
                            "scratch", child, parent, src)
            return None
        start.append(got)
    return min(start) if start else None


def _copy_checkpoint(src: Path, dst: Path, epochs: int | None) -> int | None:
    if (src / HOOK_STATE).is_file():
        state, got = read_hook_state(src, epochs)
        write_hook_state(dst, state, got)
        return got
    for _ in range(_COPY_TRIES):
        found = ckpt.list_checkpoints(src / CHECKPOINT_DIR)
        if not found:
            return None
        chosen = next((c for c in found if epochs is not None and _epoch(c) == epochs), found[-1])
        target = dst / CHECKPOINT_DIR / chosen.name
        tmp = target.with_name(f".tmp-{chosen.name}-{socket.gethostname()}-{os.getpid()}")  # a writer's leftover
        try:
            shutil.copytree(chosen, tmp)
        except (FileNotFoundError, shutil.Error):  # pruned by the donor's training meanwhile: take the next one
            shutil.rmtree(tmp, ignore_errors=True)
            continue
        os.replace(tmp, target)
        return _epoch(chosen)
    return None


def _epoch(checkpoint: Path) -> int:
    return int(ckpt.read_manifest(checkpoint)["epoch"])
