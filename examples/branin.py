"""A synthetic objective for benchmarking the search itself: the Branin-Hoo function.

Branin has three global minima of 0.397887 at (-pi, 12.275), (pi, 2.275) and (9.42478, 2.475) on
x1 in [-5, 10], x2 in [0, 15]; it is the usual yardstick of Bayesian optimisation. Instead of training,
``nnlo optimize`` calls :func:`evaluate` on each fold group's top rank (the objective hook, see
docs/optimization.md), so a search of dozens of trials takes seconds and tests the coordinator, blocks,
folds, restore and engines for real, with MPI, without a model to train.

    nnlo optimize -n 5 --block-size 2 --model examples/branin.py --num-iterations 30 --output branin-run

Environment knobs for tests and demos (all optional):
``BRANIN_FAIL_ABOVE=v`` makes points with x1 > v raise (failed trials);
``BRANIN_FOLD_SHIFT=s`` adds ``s * fold`` to the value (so k-fold means are checkable);
``BRANIN_CHOICE=1`` adds a categorical dimension ``shift`` in {"none", "up"} (+5 when "up") and an integer
dimension ``k`` in [0, 3] (+k), to exercise mixed spaces;
``BRANIN_SLEEP=s`` sleeps s seconds per evaluation (to kill a search mid-way in tests);
``BRANIN_LOG=path`` appends one JSON line per evaluation (to prove what was, and was not, re-evaluated);
``BRANIN_HOLD_FIRST=n`` (with ``BRANIN_LOG``) holds the run's first evaluation until n others are logged:
a coordinator that waited for all blocks would never see them (the hold gives up after 120 s);
``BRANIN_HOLD_AFTER=n`` (with ``BRANIN_LOG``) holds every evaluation that starts once n are logged (for up
to 120 s): the search cannot end by itself, so a test kills it mid-run on a machine of any speed.
"""
from __future__ import annotations

import json
import math
import os
import time

from nnlo.optimize.space import Categorical, Integer, Real


def branin(x1: float, x2: float) -> float:
    b, c, t = 5.1 / (4 * math.pi**2), 5 / math.pi, 1 / (8 * math.pi)
    return (x2 - b * x1**2 + c * x1 - 6) ** 2 + 10 * (1 - t) * math.cos(x1) + 10


def get_name() -> str:
    return "branin"


def get_model(x1: float = 0.0, x2: float = 0.0, shift: str = "none", k: int = 0) -> None:
    """Not trainable: the hook below replaces training. Present for the model-module contract."""
    raise NotImplementedError("branin is a synthetic objective; nnlo optimize calls evaluate() instead")


get_model.parameter_range = [Real(-5.0, 10.0, name="x1"), Real(0.0, 15.0, name="x2")]  # type: ignore[attr-defined]
if os.environ.get("BRANIN_CHOICE"):
    get_model.parameter_range += [  # type: ignore[attr-defined]
        Categorical(["none", "up"], name="shift"),
        Integer(0, 3, name="k"),
    ]


def _hold_if_first(log: str, others: int, params: dict) -> None:
    try:  # whoever creates the marker first is "the first evaluation"; it names itself in it
        fd = os.open(log + ".first", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(params))
    give_up = time.monotonic() + 120
    while time.monotonic() < give_up:
        if os.path.exists(log) and len(open(log).read().splitlines()) >= others:
            return
        time.sleep(0.05)
    raise TimeoutError(f"held the first evaluation 120 s and only saw fewer than {others} others")


def _logged(log: str) -> int:
    try:
        with open(log) as f:
            return len(f.read().splitlines())
    except FileNotFoundError:
        return 0


def evaluate(params: dict, *, fold: int = 0, n_fold: int = 1) -> dict:
    """The objective hook: metrics of one fold for one parameter set."""
    hold = os.environ.get("BRANIN_HOLD_FIRST")
    if hold:
        _hold_if_first(os.environ["BRANIN_LOG"], int(hold), params)
    after = os.environ.get("BRANIN_HOLD_AFTER")
    if after and _logged(os.environ["BRANIN_LOG"]) >= int(after):
        time.sleep(120)
    sleep = float(os.environ.get("BRANIN_SLEEP", "0") or 0)
    if sleep:
        time.sleep(sleep)
    fail_above = os.environ.get("BRANIN_FAIL_ABOVE")
    if fail_above is not None and params["x1"] > float(fail_above):
        raise ValueError(f"x1={params['x1']:.3f} is above {fail_above} (a simulated model failure)")
    value = branin(params["x1"], params["x2"])
    value += 5.0 * (params.get("shift") == "up") + params.get("k", 0)
    value += float(os.environ.get("BRANIN_FOLD_SHIFT", "0") or 0) * fold
    log = os.environ.get("BRANIN_LOG")
    if log:
        with open(log, "a") as f:
            f.write(json.dumps({"params": params, "fold": fold, "value": value}) + "\n")
    return {"val_loss": value, "fold": fold}
