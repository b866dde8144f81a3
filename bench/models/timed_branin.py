"""Branin behind ``nnlo optimize``'s objective hook, logging when each evaluation ran (bench/search.py).

Each evaluation sleeps ``BENCH_SLEEP`` seconds (a stand-in for training, default 0.3) and appends
``{"pid", "t0", "t1", "value"}`` to ``BENCH_EVAL_LOG``: the benchmark sums each block's busy time from it, so
"idle" is measured on the blocks themselves, not inferred from the coordinator's bookkeeping.
"""
from __future__ import annotations

import json
import math
import os
import time

from nnlo.optimize.space import Real


def branin(x1: float, x2: float) -> float:
    b, c, t = 5.1 / (4 * math.pi**2), 5 / math.pi, 1 / (8 * math.pi)
    return (x2 - b * x1**2 + c * x1 - 6) ** 2 + 10 * (1 - t) * math.cos(x1) + 10


def get_name() -> str:
    return "timed_branin"


def get_model(x1: float = 0.0, x2: float = 0.0) -> None:
    raise NotImplementedError("a synthetic objective: nnlo optimize calls evaluate() instead of training")


get_model.parameter_range = [Real(-5.0, 10.0, name="x1"), Real(0.0, 15.0, name="x2")]  # type: ignore[attr-defined]


def evaluate(params: dict, *, fold: int = 0, n_fold: int = 1) -> dict:
    t0 = time.time()
    time.sleep(float(os.environ.get("BENCH_SLEEP", "0.3")))
    value = branin(params["x1"], params["x2"])
    log = os.environ.get("BENCH_EVAL_LOG")
    if log:
        with open(log, "a") as f:
            f.write(json.dumps({"pid": os.getpid(), "t0": t0, "t1": time.time(), "value": value}) + "\n")
    return {"val_loss": value}
