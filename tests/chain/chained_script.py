"""A user's own training script, as ``nnlo submit ... script`` runs it: an ArraySource, a model built in code,
no checkpoint or deadline handling of its own (nnlo.train does it inside a submitted job).

argv: RESULT_JSON [WORDS...]: rank 0 writes the final history and its argv there once the training is done.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

import nnlo

from tests.runtime.models import tiny  # noqa: E402 - the checkout is on this program's PYTHONPATH

rng = np.random.default_rng(0)
x = rng.normal(size=(96, 8)).astype("float32")
y = (x[:, 0] > 0).astype("int64") + (x[:, 1] > 1).astype("int64")
result = nnlo.train(model=tiny.get_model, data=nnlo.ArraySource(x, y), val_data=nnlo.ArraySource(x[:32], y[:32]),
                    mode="downpour", synchronous=True, worker_optimizer="sgd:lr=0.1,momentum=0.9",
                    optimizer="adam:lr=0.5", epochs=4, batch=8, checkpoint_interval=1, seed=3)
if result.is_master:
    Path(sys.argv[1]).write_text(json.dumps({"history": result.history, "argv": sys.argv[1:],
                                             "run_dir": str(result.run_dir)}))
