"""Messages between the coordinator (world rank 0) and the block leaders.

They are small control objects, so they travel pickled with lowercase mpi4py calls; no tensor ever goes
through the coordinator. ``TASK`` goes to a block leader: ``{"trial": id, "params": {...}}`` or
``{"stop": True, "code": rc}``. ``RESULT`` comes back: ``{"trial": id, "block": b, "folds": [outcome, ...]}``
with one outcome per fold (``FoldOutcome.to_dict()``).
"""
from __future__ import annotations

TAG_TASK = 0x0B1
TAG_RESULT = 0x0B2
