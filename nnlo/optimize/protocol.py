"""Messages between the coordinator (world rank 0) and the block leaders.

They are small control objects, so they travel pickled with lowercase mpi4py calls; no tensor ever goes
through the coordinator. ``TASK`` goes to a block leader: ``{"trial": id, "params": {...}}`` (under a
schedule also ``"epochs": E``: train, resuming the trial's checkpoint, until E epochs in total) or
``{"stop": True, "code": rc}``. ``RESULT``
comes back: ``{"trial": id, "block": b, "folds": [outcome, ...]}`` with one outcome per fold
(``FoldOutcome.to_dict()``: metrics or error, and the epochs trained and the checkpoint written).

A block's ranks name themselves ``block B <role>`` in their rank records (:func:`rank_label`), so that a search
can tell which block a killed rank belonged to (:func:`block_of_label`).
"""
from __future__ import annotations

import re

TAG_TASK = 0x0B1
TAG_RESULT = 0x0B2

_LABEL = re.compile(r"^block (\d+)\b")


def rank_label(block: int, role: str) -> str:
    """How a block's rank names itself in its rank record (:mod:`nnlo.rankfate`): ``block 1 worker:w0``."""
    return f"block {block} {role}"


def block_of_label(label: str | None) -> int | None:
    """The block a rank record's label names (:func:`rank_label`), or None (the coordinator, a proposer)."""
    m = _LABEL.match(label or "")
    return None if m is None else int(m.group(1))
