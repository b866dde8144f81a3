"""Check, before a job is queued, that the HDF5 files of a run hold the datasets it will read.

Why a bounded sample: a list can name tens of thousands of files on a parallel file system. Every listed
file's existence is checked (cheap: one ``stat``), but only a sample of them is opened — the first, the last
and evenly spaced ones between — and the caller says so, so nobody mistakes the check for a full scan.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import h5py

from nnlo.data.h5dataset import parse_fields
from nnlo.errors import ConfigError, DataError

#: Files opened per list at most (the rest are only checked to exist).
SAMPLE_FILES = 8


def sample(files: Sequence[Path], k: int = SAMPLE_FILES) -> list[Path]:
    """At most ``k`` of ``files``: the first, the last and evenly spaced ones between, in order."""
    n = len(files)
    if n <= k:
        return list(files)
    picks = sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})
    return [files[i] for i in picks]


def check_datasets(files: Sequence[Path], names: Sequence[str], where: str, k: int = SAMPLE_FILES) -> str | None:
    """Open a sample of ``files`` and check each holds every dataset (or group) in ``names``.

    ``where`` names the list for messages (``--train data/train.list``). Returns a note when only a sample was
    opened; raises :class:`~nnlo.errors.DataError` (one line: file, missing dataset, what it has) otherwise.
    """
    picked = sample(files, k)
    for path in picked:
        try:
            f = h5py.File(path, "r")
        except OSError as e:
            raise DataError(f"{path} (from {where}) is not a readable HDF5 file ({e}); regenerate it or "
                            f"remove it from the list") from None
        with f:
            missing = [n for n in names if n not in f]
            if missing:
                have = sorted(f.keys())[:8]
                raise DataError(
                    f"{path} (from {where}) has no dataset {missing[0]!r} (it has {', '.join(have) or 'none'}); "
                    f"pass --features-name/--labels-name or fix get_features()/get_labels()"
                )
    if len(picked) < len(files):
        return f"opened {len(picked)} of the {len(files)} files of {where} (all {len(files)} exist)"
    return None


def field_names(source: Any) -> list[str]:
    """Dataset (or group) names of a features/labels source: a name, a (name, adaptor) pair, or a list."""
    fields, _ = parse_fields(source, "features")
    return [f.name for f in fields]


def check_plan(plan: Any, k: int = SAMPLE_FILES) -> list[str]:
    """Check a run's data (a :class:`nnlo.models.DataPlan`) before any rank trains: training files exist
    (from ``--train`` or ``get_train()``), and a sample of each list holds the features and labels. Returns
    the notes of sampled lists; raises a one-line :class:`ConfigError`/:class:`DataError` otherwise."""
    if plan.train is None:
        raise ConfigError("no training data: pass --train LIST (a text file naming HDF5 files) "
                          "or define get_train() in the model module")
    names = field_names(plan.features) + field_names(plan.labels)
    notes: list[str] = []
    for files, where in ((plan.train, plan.train_where), (plan.val, plan.val_where)):
        if files is not None:
            note = check_datasets(files, names, where, k)
            if note:
                notes.append(note)
    return notes
