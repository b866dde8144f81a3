"""Messages between the coordinator (world rank 0) and the block leaders.

They are small control objects, so they travel pickled with lowercase mpi4py calls; no tensor ever goes
through the coordinator. ``TASK`` goes to a block leader: ``{"trial": id, "params": {...}}`` (under a
schedule also ``"epochs": E``: train, resuming the trial's checkpoint, until E epochs in total) or
``{"stop": True, "code": rc}``. ``RESULT``
comes back: ``{"trial": id, "block": b, "folds": [outcome, ...]}`` with one outcome per fold
(``FoldOutcome.to_dict()``: metrics or error, and the epochs trained and the checkpoint written).
"""
from __future__ import annotations

TAG_TASK = 0x0B1
TAG_RESULT = 0x0B2
