"""A synthetic objective with learning curves, for searches that stop bad trials early (``--schedule``).

Each trial "trains" a loss from 2.3 down toward a ``floor`` over a time scale ``tau`` (epochs), both set by the
hyperparameters in force during each epoch: ``lr`` in [1e-3, 1] (log-uniform), ``width`` in [16, 512]
(integer, log-uniform), ``momentum`` in [0, 0.99]::

    floor = 0.05 + k * lr + 0.3 * (16 / width) ** 0.7 + 0.5 * (momentum - 0.9) ** 2
    tau   = slow * 3 * (0.01 / lr) ** 0.5 / (0.75 + 0.5 * momentum)

A larger learning rate learns faster but levels off higher (the noise floor of SGD), a wider model levels off
lower. The reported ``val_loss`` is the loss plus a small noise (standard deviation 0.005, drawn from the
parameters, the epoch and the fold, so a rerun reports the same). Three members of the family
(``CURVES_FAMILY``):

* ``default`` (k = 0.3, slow = 1): a power-law tail, ``loss(e) = floor + (2.3 - floor) / (1 + e / tau)`` at
  constant hyperparameters: **crossing curves, imperfect early rankings**. Over random configurations the
  Spearman correlation of the loss after 1, 3 and 9 epochs with the loss after 27 is ~0.61, 0.72 and 0.89
  (``bench/fidelity.py`` prints them). The best 1 % after 27 epochs are all in the best third after 1 epoch,
  but among the leaders the curves cross: keeping the best third after 1, then after 3, then after 9 epochs
  keeps only ~2/3 of them (a high learning rate leads early and levels off above a lower one).
* ``schedule`` (k = 3, slow = 5): each epoch moves the loss a fraction ``rate = 1 - exp(-1 / tau)`` (at most
  0.9) of the way to the floor: **a schedule pays**. A high learning rate learns fast and levels off high, a
  low one would level off low but is too slow for 27 epochs, so starting high and lowering it later (what
  PBT can find) ends ~12 % below the best any constant configuration reaches in 27 epochs (~0.19 against
  ~0.22, the best (wide, momentum ~0.95) trial with ``lr`` 0.1 for 9 epochs, then 0.02).

* ``crossing`` (k = 2, slow = 2): the power law of ``default`` with a learning rate that costs more at the end
  and learns slower: **early ranks mislead** (a model on noisy labels). Over random configurations the Spearman
  correlation of the loss after 1, 3 and 9 epochs with the loss after 27 is ~0.40, 0.62 and 0.87: a fast
  start levels off high, so ASHA's first rung stops many of the eventual best.

All are stateful: the hyperparameters may change between epochs (PBT), the loss carries on from where it is
(the power law through its equivalent epoch). It follows the staged objective-hook contract
(docs/optimization.md, "Stopping bad trials early"): ``evaluate(params, *, fold, n_fold, epochs, state)`` trains
from ``state`` (what it returned last time, None at first) up to ``epochs`` epochs in total and returns its
metrics with the new ``"state"``. Without ``epochs`` (``--schedule full``) it trains ``CURVES_EPOCHS``
(default 27) epochs at once.

    nnlo optimize -n 5 --block-size 2 --mode allreduce --model examples/curves.py --schedule asha --epochs 27 \\
        --num-iterations 60

Environment knobs for tests, demos and benchmarks (all optional): ``CURVES_FAMILY=default|schedule|crossing``;
``CURVES_EPOCH_S=s`` sleeps s seconds per epoch trained (a trial's cost); ``CURVES_LOG=path`` appends one JSON
line per epoch trained (trial parameters, epoch, fold: proves that no epoch is trained twice);
``CURVES_FOLD_SHIFT=s`` adds ``s * fold``; ``CURVES_EPOCHS=E`` the epochs of an unstaged call.
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
#: each member of the family: the floor's learning-rate coefficient ``k``, how much slower it learns ``slow``
FAMILIES = {"default": {"k": 0.3, "slow": 1.0}, "schedule": {"k": 3.0, "slow": 5.0},
            "crossing": {"k": 2.0, "slow": 2.0}}


def family() -> str:
    name = os.environ.get("CURVES_FAMILY", "default") or "default"
    if name not in FAMILIES:
        raise ValueError(f"CURVES_FAMILY={name!r} is not one of {', '.join(FAMILIES)}")
    return name


def floor(p: dict[str, Any]) -> float:
    return (0.05 + FAMILIES[family()]["k"] * p["lr"] + 0.3 * (16 / p["width"]) ** 0.7
            + 0.5 * (p["momentum"] - 0.9) ** 2)


def tau(p: dict[str, Any]) -> float:
    return FAMILIES[family()]["slow"] * 3 * (0.01 / p["lr"]) ** 0.5 / (0.75 + 0.5 * p["momentum"])


def step(loss: float, p: dict[str, Any]) -> float:
    """One epoch of training under the hyperparameters ``p``, from ``loss``."""
    f, t = floor(p), tau(p)
    if family() == "schedule":
        return f + (loss - f) * (1 - min(0.9, 1 - math.exp(-1 / t)))
    if loss <= f:
        return loss + (f - loss) * 0.5  # above its floor already (the hyperparameters changed): drift to it
    done = t * ((START - f) / (loss - f) - 1)  # the epochs at which the power law stands at ``loss``
    return f + (START - f) / (1 + (done + 1) / t)


def loss_after(p: dict[str, Any], epochs: int, start: float = START) -> float:
    """The loss after ``epochs`` epochs at constant ``p``."""
    loss = start
    for _ in range(epochs):
        loss = step(loss, p)
    return loss


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
