"""A synthetic objective with learning curves, for searches that stop bad trials early (``--schedule``).

Each trial "trains" a loss that moves, every epoch, a fraction ``rate`` of the way toward a ``floor``, both set
by the hyperparameters in force during that epoch::

    loss(0) = 2.3                   loss(e + 1) = floor + (loss(e) - floor) * (1 - rate)
    rate  = min(0.9, 0.08 * sqrt(lr / 0.01) * (64 / width) ** 0.3 * (1 + momentum))
    floor = 0.05 + 0.08 * (log10(lr) + 2) ** 2 + 0.25 * (16 / width) ** 0.7 + 0.1 * (momentum - 0.9) ** 2

with ``lr`` in [1e-3, 1] (log-uniform), ``width`` in [16, 512] (integer, log-uniform) and ``momentum`` in
[0, 0.99]. The reported ``val_loss`` is the loss plus a small noise (standard deviation 0.005, drawn from
the parameters, the epoch and the fold, so a rerun reports the same). What it is like:

* **crossing curves**: a high learning rate or a narrow width learns fast but levels off high; a low rate or a
  wide model starts slowly and ends lower. After 1 epoch, ``lr=0.3`` (loss ~1.0) looks far better than
  ``lr=0.01`` (~2.0); after 27 epochs it is worse (~0.35 against ~0.2). Early rankings predict the final one
  imperfectly, as in real training (Spearman correlation of the epoch-1 and epoch-27 values over random
  configurations ~0.5; epoch 3 ~0.7, epoch 9 ~0.9: ``bench/fidelity.py`` prints them);
* **a schedule pays**: the floor follows the learning rate in force, so starting high and lowering it later
  (what PBT can find) beats every constant rate.

It follows the staged objective-hook contract (docs/optimization.md, "Stopping bad trials early"):
``evaluate(params, *, fold, n_fold, epochs, state)`` trains from ``state`` (what it returned last time, None at
first) up to ``epochs`` epochs in total and returns its metrics with the new ``"state"``. Without ``epochs``
(``--schedule full``) it trains ``CURVES_EPOCHS`` (default 27) epochs at once.

    nnlo optimize -n 5 --block-size 2 --model examples/curves.py --schedule asha --epochs 27 --num-iterations 60

Environment knobs for tests, demos and benchmarks (all optional): ``CURVES_EPOCH_S=s`` sleeps s seconds per
epoch trained (a trial's cost); ``CURVES_LOG=path`` appends one JSON line per epoch trained (trial
parameters, epoch, fold: proves that no epoch is trained twice); ``CURVES_FOLD_SHIFT=s`` adds ``s * fold``;
``CURVES_EPOCHS=E`` the epochs of an unstaged call.
"""
from __future__ import annotations

import json
import math
import os
import time
import zlib
from typing import Any

from nnlo.optimize.space import Integer, Real

START = 2.3
NOISE = 0.005


def rate(p: dict[str, Any]) -> float:
    return min(0.9, 0.08 * math.sqrt(p["lr"] / 0.01) * (64 / p["width"]) ** 0.3 * (1 + p["momentum"]))


def floor(p: dict[str, Any]) -> float:
    return (0.05 + 0.08 * (math.log10(p["lr"]) + 2) ** 2 + 0.25 * (16 / p["width"]) ** 0.7
            + 0.1 * (p["momentum"] - 0.9) ** 2)


def step(loss: float, p: dict[str, Any]) -> float:
    """One epoch of training under the hyperparameters ``p``."""
    f = floor(p)
    return f + (loss - f) * (1 - rate(p))


def loss_after(p: dict[str, Any], epochs: int, start: float = START) -> float:
    """The loss after ``epochs`` epochs at constant ``p`` (closed form of :func:`step`)."""
    f = floor(p)
    return f + (start - f) * (1 - rate(p)) ** epochs


def noise(p: dict[str, Any], epoch: int, fold: int = 0) -> float:
    """A reproducible N(0, 0.005) draw for this point, epoch and fold."""
    seed = zlib.crc32(json.dumps([sorted((k, repr(v)) for k, v in p.items()), epoch, fold]).encode())
    u1, u2 = ((seed % 65521) + 0.5) / 65521, (((seed >> 16) % 65519) + 0.5) / 65519
    return NOISE * math.sqrt(-2 * math.log(u1)) * math.cos(2 * math.pi * u2)


def get_name() -> str:
    return "curves"


def get_model(lr: float = 0.01, width: int = 64, momentum: float = 0.5) -> None:
    """Not trainable: the hook below replaces training. Present for the model-module contract."""
    raise NotImplementedError("curves is a synthetic objective; nnlo optimize calls evaluate() instead")


get_model.parameter_range = [  # type: ignore[attr-defined]
    Real(1e-3, 1.0, prior="log-uniform", name="lr"),
    Integer(16, 512, prior="log-uniform", name="width"),
    Real(0.0, 0.99, name="momentum"),
]


def evaluate(params: dict, *, fold: int = 0, n_fold: int = 1, epochs: int | None = None,
             state: dict | None = None) -> dict:
    """Train from ``state`` to ``epochs`` epochs in total; the metrics and the state to resume from."""
    target = int(epochs if epochs is not None else os.environ.get("CURVES_EPOCHS", "27"))
    done, loss = (int(state["epoch"]), float(state["loss"])) if state else (0, START)
    sleep = float(os.environ.get("CURVES_EPOCH_S", "0") or 0)
    log = os.environ.get("CURVES_LOG")
    for epoch in range(done + 1, target + 1):
        if sleep:
            time.sleep(sleep)
        loss = step(loss, params)
        if log:
            with open(log, "a") as f:
                f.write(json.dumps({"params": params, "epoch": epoch, "fold": fold, "pid": os.getpid()}) + "\n")
    value = loss + noise(params, max(done, target), fold) + float(os.environ.get("CURVES_FOLD_SHIFT", "0") or 0) * fold
    return {"val_loss": value, "state": {"epoch": max(done, target), "loss": loss}}
