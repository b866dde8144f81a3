"""A trial's folder and the checkpoints in it: where each fold trains, and PBT's copy of another trial's.

Every trial and fold trains into ``<out>/trials/<id>/fold-<f>/`` and checkpoints there (``checkpoints/``, the
training's own complete, atomic checkpoints); an objective hook that can resume keeps its state in
``hook-state.json`` there instead. A trial that trains on (a promotion, the next PBT step, a re-run after a
deadline or a lost lease) resumes from that folder (``--restore auto``).

PBT's exploit (:func:`inherit`) copies the donor's checkpoint into a new trial's folder before the new trial
is handed out: the copy goes to a hidden temporary name and is renamed into place, so a kill leaves the
checkpoint whole or absent; the donor's checkpoint at the epochs of its result is preferred (the donor may
have trained on meanwhile), else its newest, then older ones. A checkpoint the donor prunes while we copy it,
or one that cannot be read, is passed over for the next; a donor with none that can be read (a damaged hook
state, every manifest corrupt) gives a fresh start with one warning, never an error that ends the search.

**A trial's identity** (:func:`claim`): the folder ``trials/<id>/`` - its checkpoints, hook state and kept block
result - belongs to one (id, parameters) pair, recorded in ``trial.json`` (atomically) when the trial first
starts and checked before anything in the folder is read. An id can be handed out twice: a job that dies after
a hand-out but before the next save restores an older ``next_id``, and the engine proposes that id again,
perhaps with other parameters. The new trial must not resume the old one's checkpoint (or, at ``--epochs``,
report its metrics as its own): a folder that belongs to other parameters is moved aside to
``trials/<id>.stale-<n>/`` (never deleted) with one warning, and the trial starts afresh.
"""
from __future__ import annotations

import contextlib
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
from nnlo.errors import ConfigError, NnloError, TrainingError

log = logging.getLogger("nnlo.optimize.trial_files")

#: an objective hook's resumable state (``evaluate(..., state=)``) in a fold's folder
HOOK_STATE = "hook-state.json"
_COPY_TRIES = 5


#: the folder of a search's trials, ``<out>/trials/<trial-id>/fold-<f>/``
TRIALS_DIR = "trials"


def trial_dir(out_dir: Path | str, trial_id: int, fold: int) -> Path:
    return trial_root(out_dir, trial_id) / f"fold-{fold}"


def trial_root(out_dir: Path | str, trial_id: int) -> Path:
    """``<out>/trials/<id>/``: every fold's folder and the kept block result of one trial."""
    return Path(out_dir) / TRIALS_DIR / f"{trial_id:04d}"


# -- a trial's identity -----------------------------------------------------------------------------------------
#: the (id, parameters) pair a trial's folder belongs to
IDENTITY = "trial.json"


def _normal(params: dict[str, Any]) -> Any:
    """Parameters as JSON gives them back (tuples become lists, ints stay ints), for comparison."""
    return json.loads(json.dumps(params, sort_keys=True))


def owner(out_dir: Path | str, trial_id: int) -> dict[str, Any] | None:
    """The identity recorded in trial ``trial_id``'s folder (``{"trial", "params"}``), or None when it holds
    none (no folder yet, or an unreadable record: both mean no one's data can be trusted to it)."""
    try:
        data = json.loads((trial_root(out_dir, trial_id) / IDENTITY).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def claim(out_dir: Path | str, trial_id: int, params: dict[str, Any], epochs: int | None = None) -> Path | None:
    """Make trial ``trial_id``'s folder this (id, ``params``) trial's before anything in it is read or written;
    ``epochs``: the job trains to this many epochs in total (a schedule's stage; None: ``--epochs``).

    The folder is this trial's when its identity record says so (nothing is touched: a re-run, a promotion, a
    resumed stage, a second fold group checking) and it holds no checkpoint or hook state beyond ``epochs`` (a
    trial only trains forward: a folder ahead of its job is an earlier hand-out's of the same id and point, one
    the restored search does not know, and resuming it would report a later epoch's figure as this stage's). A
    folder holding anything else - another parameter set's record, or files without a record (a job killed
    between creating it and recording, or a folder of an earlier nnlo whose owner cannot be known) - is moved
    aside to ``trials/<id>.stale-<n>/`` with one warning, and the record is written (atomically) into a new,
    empty folder. Returns where a stale folder went, or None.
    """
    root = trial_root(out_dir, trial_id)
    want = {"trial": int(trial_id), "params": _normal(params)}
    kept = owner(out_dir, trial_id)
    mine = kept is not None and kept.get("trial") == want["trial"] and kept.get("params") == want["params"]
    ahead = _epochs_held(root) if mine and epochs is not None else 0
    if mine and (epochs is None or ahead <= epochs):
        return None
    moved = None
    if root.exists() and (kept is not None or any(not p.name.startswith(".") for p in root.iterdir())):
        moved = _set_aside(root)
        whose = (f"parameters {kept.get('params')}" if kept is not None and "params" in kept
                 else "no identity record")
        if mine:
            whose = f"this point trained to epoch {ahead}, beyond this job's {epochs}: an earlier hand-out's"
        log.warning("trial %d: its folder held another trial's files (%s), not those of %s; moved to %s - "
                    "trial %d starts afresh", trial_id, whose, want["params"], moved, trial_id)
    root.mkdir(parents=True, exist_ok=True)
    write_json(root / IDENTITY, want)
    return moved


def _epochs_held(root: Path) -> int:
    """The most epochs any fold's checkpoint or hook state in ``root`` holds (0: none, or none readable)."""
    held = 0
    for folder in root.glob("fold-*"):
        with contextlib.suppress(NnloError):  # an unreadable state is the runner's to report, not the claim's
            held = max(held, read_hook_state(folder)[1])
        for checkpoint in ckpt.list_checkpoints(folder / CHECKPOINT_DIR):
            try:
                held = max(held, _epoch(checkpoint))
            except (OSError, ValueError, KeyError, TypeError, NnloError):
                continue
    return held


def _set_aside(root: Path) -> Path:
    n = 1
    while root.with_name(f"{root.name}.stale-{n}").exists():
        n += 1
    target = root.with_name(f"{root.name}.stale-{n}")
    os.rename(root, target)
    return target


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
    folder = trial_root(out_dir, trial_id)
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / BLOCK_RESULT, {"trial": trial_id, "params": params, "epochs": epochs, "result": result})


def read_block_result(out_dir: Path | str, trial_id: int, params: dict[str, Any],
                      epochs: int | None) -> dict[str, Any] | None:
    """The result a block kept for exactly this trial (same parameters, same stage), or None."""
    path = trial_root(out_dir, trial_id) / BLOCK_RESULT
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
def inherit(out_dir: Path | str, parent: int, child: int, n_fold: int, epochs: int | None = None,
            params: dict[str, Any] | None = None) -> int | None:
    """Copy ``parent``'s checkpoint of every fold into ``child``'s folders (emptied first: an id is new, so
    anything there is a leftover of a job killed before it handed the trial out; with the child's ``params``
    the folder is :func:`claim`-ed for it first, so another parameter set's files are moved aside, not lost).
    Returns the epochs the child starts from (the fewest over folds), or None when it trains from scratch: the
    parent has no checkpoint, or none that can be read (a damaged hook state or manifest; one warning names it).
    A fresh start leaves no fold with a copy, so every fold starts alike."""
    if params is not None:
        claim(out_dir, child, params)
    start: list[int] = []
    for fold in range(n_fold):
        src, dst = trial_dir(out_dir, parent, fold), trial_dir(out_dir, child, fold)
        if dst.exists():
            shutil.rmtree(dst)
        try:
            got = _copy_checkpoint(src, dst, epochs)
        except (ConfigError, TrainingError, OSError) as e:  # a damaged donor must not end the search
            log.warning("trial %d: trial %d's checkpoint in %s cannot be copied (%s); it trains from scratch",
                        child, parent, src, e)
            got = None
        else:
            if got is None and src.exists():
                log.warning("trial %d: trial %d's folder %s holds no checkpoint to start from; it trains from "
                            "scratch", child, parent, src)
        if got is None:
            for f in range(fold + 1):  # no fold keeps a copy when another starts from scratch
                shutil.rmtree(trial_dir(out_dir, child, f), ignore_errors=True)
            return None
        start.append(got)
    return min(start) if start else None


def _copy_checkpoint(src: Path, dst: Path, epochs: int | None) -> int | None:
    """The epochs of the checkpoint copied from ``src`` to ``dst`` (None: ``src`` holds none that can be read).

    The one at ``epochs`` is preferred, else the newest, then older ones: the epochs are read from the *copy*,
    so a checkpoint the donor's training prunes meanwhile, or one whose copy is torn, is simply passed over."""
    if (src / HOOK_STATE).is_file():
        state, got = read_hook_state(src, epochs)
        write_hook_state(dst, state, got)
        return got
    for _ in range(_COPY_TRIES):
        found = ckpt.list_checkpoints(src / CHECKPOINT_DIR)
        if not found:
            return None
        preferred = [c for c in found if epochs is not None and _named_epoch(c) == epochs]
        for chosen in [*preferred, *reversed([c for c in found if c not in preferred])]:
            target = dst / CHECKPOINT_DIR / chosen.name
            tmp = target.with_name(f".tmp-{chosen.name}-{socket.gethostname()}-{os.getpid()}")  # a writer's leftover
            try:
                shutil.copytree(chosen, tmp)
                got = _epoch(tmp)
            except (FileNotFoundError, shutil.Error, ConfigError):  # pruned meanwhile, or damaged: the next one
                shutil.rmtree(tmp, ignore_errors=True)
                continue
            os.replace(tmp, target)
            return got
    return None


def _named_epoch(checkpoint: Path) -> int | None:
    """The epoch a checkpoint's name says (``ckpt-e0004-u...``), without reading it."""
    try:
        return int(checkpoint.name.split("-")[1].lstrip("e"))
    except (IndexError, ValueError):
        return None


def _epoch(checkpoint: Path) -> int:
    return int(ckpt.read_manifest(checkpoint)["epoch"])
