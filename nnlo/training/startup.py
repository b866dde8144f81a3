"""Start-up milestones of a rank, for the resume-time breakdown (``startup.json`` in the run directory).

Why: a resubmitted job of a chain must train again within seconds of its predecessor's end; to know where
those seconds go, each phase of a rank's start is stamped here (wall-clock, comparable with the chain's
``state.json`` times) and the master (the top of a parameter-server tree) writes them once, when the
first update of this process arrives (training has resumed).
The record is advisory: failing to write it never affects the training.

Stamps: ``process_start`` (the interpreter started, from ``/proc``; absent elsewhere), then what
:func:`mark` recorded: ``train_called`` (CLI and library imports and MPI initialisation done), ``checked``
(configuration and roles), ``model_source`` (session started, model module loaded), ``built`` (model, backend
and data opened), ``restore_found``, ``role_ready`` (checkpoint parts loaded), ``weights_shared`` (initial
broadcast), ``first_update``.
"""
from __future__ import annotations

import itertools
import json
import os
import time
from pathlib import Path
from typing import Any

from nnlo.contract import STARTUP_FILE

_MARKS: dict[str, float] = {}


def mark(name: str) -> None:
    """Stamp milestone ``name`` now (the first stamp of a name wins)."""
    _MARKS.setdefault(name, time.time())


def process_start() -> float | None:
    """Unix time at which this process started (Linux ``/proc``; None where unknown)."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime, in clock ticks
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def record() -> dict[str, Any]:
    """The stamps so far, in order, with the seconds between consecutive ones."""
    stamps: dict[str, float] = {}
    start = process_start()
    if start is not None:
        stamps["process_start"] = start
    stamps.update(sorted(_MARKS.items(), key=lambda kv: kv[1]))
    names = list(stamps)
    steps = {b: round(stamps[b] - stamps[a], 4) for a, b in itertools.pairwise(names)}
    return {"pid": os.getpid(), "stamps": stamps, "seconds": steps}


def write(out_dir: Path | None) -> None:
    """Write :func:`record` to ``out_dir/startup.json`` (nothing without a folder; errors ignored)."""
    if out_dir is None:
        return
    try:
        path = Path(out_dir) / STARTUP_FILE
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(record(), indent=1) + "\n")
        os.replace(tmp, path)
    except OSError:
        pass
