"""Atomic files and the search checkpoint (``optimizer-state.json``).

Every write goes to a temporary file in the same directory, is flushed to disk, then renamed over the old
file: on a POSIX filesystem the rename is atomic, so a crash (or a walltime SIGKILL) leaves either the old
or the new complete file, never half of one. The state is plain JSON (engine observations, finished
trials, in-flight trials, options) - no pickles - so it survives library upgrades and can be inspected.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nnlo.atomic import write_json
from nnlo.contract import OPTIMIZER_STATE_FILE as STATE_FILE
from nnlo.errors import ConfigError
from nnlo.job import search_saved

STATE_VERSION = 1


def atomic_write_json(path: Path, data: Any, *, compact: bool = False) -> None:
    """Strict JSON (no NaN: a failed trial's fom must not make the file unreadable to other tools).
    ``compact``: one line, written by the C encoder (~10x faster than an indented file: the search's state and
    trials table are rewritten after every result, and hold thousands of trials under a schedule)."""
    write_json(path, data, allow_nan=False, indent=None if compact else 1)


def save_state(out_dir: Path, state: dict[str, Any]) -> None:
    path = Path(out_dir) / STATE_FILE
    atomic_write_json(path, {"version": STATE_VERSION, **state}, compact=True)
    # the search's checkpoint, and its progress: a submitted run's chain goes on after this job only if the
    # job added a trial result or a stage (a save at the job's start is none)
    search_saved(path, results_recorded(state))


def results_recorded(state: dict[str, Any]) -> int:
    """How many trial results and schedule stages ``state`` holds: one per finished trial, one per rung of a
    trial under a schedule (a failed trial counts: it is spent budget)."""
    return sum(max(1, len(t.get("rungs") or ())) for t in state.get("finished", ()))


def load_state(out_dir: Path) -> dict[str, Any] | None:
    """The saved search state in ``out_dir``, or None if there is none. A corrupt file is a clear error."""
    path = Path(out_dir) / STATE_FILE
    if not path.exists():
        return None
    try:
        state = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(f"{path} is unreadable ({e}); move it away to start a new search") from None
    if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
        raise ConfigError(f"{path} is not an nnlo optimizer state (version {STATE_VERSION}); use another --output")
    return state
