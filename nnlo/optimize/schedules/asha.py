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

from nnlo.optimize.schedules.base import Job, ScheduleSpec, TrialView


def geometric_budgets(min_epochs: int, max_epochs: int, eta: float) -> tuple[int, ...]:
    """``min_epochs * eta**k`` (rounded, increasing) below ``max_epochs``, then ``max_epochs``."""
    out: list[int] = []
    k = 0
    while True:
        b = round(min_epochs * eta ** k)
        if b >= max_epochs:
            break
        if not out or b > out[-1]:
            out.append(b)
        k += 1
    return (*out, max_epochs)


def keep(n: int, eta: float) -> int:
    """How many of the ``n`` trials of a rung may go on: the top ``floor(n / eta)``."""
    return math.floor(n / eta + 1e-9)


def ranked(trials: Sequence[TrialView], rung: int) -> list[TrialView]:
    """The trials with a result at ``rung``, best first (failed last; ties by id)."""
    at = [t for t in trials if rung in t.results]
    return sorted(at, key=lambda t: (math.inf if t.results[rung] is None else t.results[rung], t.id))


def promotable(trials: Sequence[TrialView], rung: int, eta: float) -> TrialView | None:
    """The best trial of ``rung``'s top ``1/eta`` that is still there (not promoted, not running), or None."""
    order = ranked(trials, rung)
    for t in order[:keep(len(order), eta)]:
        if t.results[rung] is not None and not t.reached(rung) and t.running is None:
            return t
    return None


def promotion(trials: Sequence[TrialView], rungs: Sequence[int], eta: float) -> tuple[TrialView, int] | None:
    """(trial, the rung it goes to) from the highest of ``rungs`` (indices, the top one excluded) that has a
    promotable trial; None if none has."""
    for rung in sorted(rungs, reverse=True):
        t = promotable(trials, rung, eta)
        if t is not None:
            return t, rung + 1
    return None


@dataclass
class Asha:
    """``--schedule asha``: one ladder of rungs, promotions first, then new trials at rung 0."""

    spec: ScheduleSpec

    def __post_init__(self) -> None:
        self.budgets = geometric_budgets(self.spec.min_epochs, self.spec.max_epochs, self.spec.eta)

    def next_job(self, trials: Sequence[TrialView], *, new: bool, rng: np.random.Generator) -> Job | None:
        up = promotion(trials, range(len(self.budgets) - 1), self.spec.eta)
        if up is not None:
            t, rung = up
            return Job(rung=rung, epochs=self.budgets[rung], trial=t.id, bracket=t.bracket)
        if new:
            return Job(rung=0, epochs=self.budgets[0])
        return None

    def completed(self, trial: TrialView) -> bool:
        return trial.top == len(self.budgets) - 1
