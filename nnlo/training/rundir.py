"""A training's output folder: what an earlier run left there, refusing to write over it, clearing it.

A second ``nnlo train --checkpoint DIR`` (or ``nnlo.train(checkpoint=DIR)``) into a folder that holds a
finished or checkpointed run would start at epoch 1 and replace that run's history, model and checkpoints
without a word. So the training's top rank looks first, before any rank writes (:func:`claim`): such a folder
is refused in one line that names the ways on, unless this run continues it (``--restore auto``, or a
checkpoint inside it), or ``--overwrite`` asks for a fresh start, which first deletes what the earlier run
wrote (its checkpoints would otherwise be taken for this run's by a later ``--restore auto``).

A job of a submitted chain (``$NNLO_RUN_DIR`` set) is exempt: its folder is the chain's own, which resubmitted
jobs continue by design.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from nnlo import checkpoint as ckpt
from nnlo.backends.native_model import MODEL_BASENAME
from nnlo.config import TrainConfig
from nnlo.contract import CHECKPOINT_DIR, CONFIG_FILE, HISTORY_FILE, LOG_DIR, RANKS_DIR, STARTUP_FILE, TIMELINE_FILE
from nnlo.errors import ConfigError
from nnlo.observe.session import SUMMARY_DIR, SUMMARY_NAME
from nnlo.observe.tracefile import TRACE_DIR

#: the final model's files (torch, Keras): :data:`MODEL_BASENAME` with each backend's suffix
MODEL_FILES = tuple(MODEL_BASENAME + suffix for suffix in (".pt", ".keras", ".h5"))


def _written(out: Path) -> list[Path]:
    """Everything a training writes into its folder (what ``--overwrite`` deletes), where it exists."""
    names = (CHECKPOINT_DIR, HISTORY_FILE, CONFIG_FILE, STARTUP_FILE, *MODEL_FILES, LOG_DIR, RANKS_DIR,
             TIMELINE_FILE, TRACE_DIR, SUMMARY_DIR, SUMMARY_NAME)
    return [out / n for n in names if (out / n).exists() or (out / n).is_symlink()]


def earlier_run(out: Path) -> str | None:
    """What in ``out`` shows a finished or checkpointed run (its newest checkpoint, history or final model),
    or None when it holds none."""
    newest = ckpt.find_latest(out) if out.is_dir() else None
    if newest is not None:
        return f"checkpoint {newest.name}"
    shown = [n for n in (HISTORY_FILE, *MODEL_FILES) if (out / n).is_file()]
    return ", ".join(shown) if shown else None


def _continues(out: Path, config: TrainConfig) -> bool:
    """This run continues the one in ``out``: ``--restore auto``, or a checkpoint inside ``out``."""
    if not config.restore:
        return False
    if config.restore == ckpt.RESTORE_AUTO:
        return True
    found = ckpt.restore_point(config.restore, out)
    if found is None:
        return False
    inside = Path(found).resolve()
    return inside == out.resolve() or out.resolve() in inside.parents


def claim(out: Path, config: TrainConfig, *, chained: bool = False, python: bool = False) -> None:
    """Make ``out`` this training's folder: refuse it (:class:`ConfigError`, one line) when it holds an earlier
    run this one neither continues nor overwrites; with ``--overwrite`` delete that run's files first.

    chained: the folder belongs to a submitted chain, whose jobs continue it (no check).
    python: the caller is the Python API (``nnlo.train``): the ways on are said as its keyword arguments.
    """
    if config.overwrite:
        for path in _written(out):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        return
    if chained or _continues(out, config):
        return
    found = earlier_run(out)
    if found is not None:
        restore, checkpoint, overwrite = (('restore="auto"', "checkpoint=", "overwrite=True") if python
                                          else ("--restore auto", "--checkpoint", "--overwrite"))
        raise ConfigError(
            f"{out} already holds a run ({found}); continue it with {restore}, write this one to another "
            f"{checkpoint} folder, or pass {overwrite} to start afresh (deleting its history, model and "
            f"checkpoints)")
