"""ASHA: asynchronous successive halving (Li et al., "A System for Massively Parallel Hyperparameter Tuning",
MLSys 2020). Pure: no MPI, no clock, no files.

Rungs: a trial's budget grows geometrically, ``min_epochs * eta**k`` epochs at rung ``k`` (rounded), up to
``--epochs``, which is always the top rung (``min 1, max 27, eta 3`` gives 1, 3, 9, 27; ``max 10`` gives 1, 3,
9, 10). A free block takes, in order:

1. a *promotion*: from the highest rung that has one, the best trial among the top ``floor(n / eta)`` of the
   ``n`` trials that reached that rung, if it has not left the rung yet; it trains on to the next rung,
   resuming from its own checkpoint (no epoch is trained twice);
2. otherwise a *new trial* at the lowest rung (while the budget of trials lasts).

No block ever waits for a rung to fill (there is no barrier): a rung's top ``1/eta`` grows as its results
arrive, so a trial that is not promotable now may be later. A trial that fails is never promoted. When the
budget of trials is spent, promotions go on until no rung has a promotable trial: the trials then left
below the top rung are the ones ASHA stopped early (*pruned*).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from nnlo.optimize.schedules.base import Job, Ledger, ScheduleSpec, TrialView


def geometric_budgets(min_epochs: int, max_epochs: int, eta: float) -> tuple[int, ...]:
    """``min_epochs * eta**k`` (rounded half up: 2.5 is 3, not Python's 2; increasing) below ``max_epochs``,
    then ``max_epochs``."""
    out: list[int] = []
    k = 0
    while True:
        b = math.floor(min_epochs * eta ** k + 0.5)
        if b >= max_epochs:
            break
        if not out or b > out[-1]:
            out.append(b)
        k += 1
    return (*out, max_epochs)


def keep(n: int, eta: float) -> int:
    """How many of the ``n`` trials of a rung may go on: the top ``floor(n / eta)``."""
    return math.floor(n / eta + 1e-9)


def promotable(trials: Ledger, rung: int, eta: float, bracket: int | None = None) -> TrialView | None:
    """The best trial of ``rung``'s top ``1/eta`` (of ``bracket``'s trials, if given) that is still there
    (not promoted, not running), or None: the best trial idle at the rung, if it ranks in the top."""
    found = trials.best_idle(rung, bracket)
    if found is None:
        return None
    trial, rank = found
    return trial if rank < keep(trials.count(rung, bracket), eta) else None


def promotion(trials: Ledger, rungs: Sequence[int], eta: float, bracket: int | None = None
              ) -> tuple[TrialView, int] | None:
    """(trial, the rung it goes to) from the highest of ``rungs`` (indices, the top one excluded) that has a
    promotable trial; None if none has."""
    for rung in sorted(rungs, reverse=True):
        t = promotable(trials, rung, eta, bracket)
        if t is not None:
            return t, rung + 1
    return None


@dataclass
class Asha:
    """``--schedule asha``: one ladder of rungs, promotions first, then new trials at rung 0."""

    spec: ScheduleSpec

    def __post_init__(self) -> None:
        self.budgets = geometric_budgets(self.spec.min_epochs, self.spec.max_epochs, self.spec.eta)

    def next_job(self, trials: Ledger, *, new: bool, rng: np.random.Generator) -> Job | None:
        up = promotion(trials, range(len(self.budgets) - 1), self.spec.eta)
        if up is not None:
            t, rung = up
            return Job(rung=rung, epochs=self.budgets[rung], trial=t.id, bracket=t.bracket)
        if new:
            return Job(rung=0, epochs=self.budgets[0])
        return None

    def completed(self, trial: TrialView) -> bool:
        return trial.top == len(self.budgets) - 1
