"""Hyperband as brackets of ASHA (Li et al., JMLR 2018; asynchronous as in the ASHA paper). Pure.

The rungs are ASHA's (:func:`~nnlo.optimize.schedules.asha.geometric_budgets`), ``K + 1`` of them. Bracket
``b`` (0..K) starts its trials at rung ``b`` and promotes them with ASHA's rule among *its own* trials only:
bracket 0 is ASHA itself (the most aggressive), bracket K trains every trial to ``--epochs`` (no pruning).
Hyperband hedges between them because how early a curve's ranking can be trusted is not known in advance.

New trials go to the brackets in Hyperband's proportions: bracket ``b`` (with ``s = K - b`` halvings) gets
``n_b = ceil((K + 1) / (s + 1) * eta**s)`` of every ``sum(n)`` trials, handed out so that each bracket's share
of the trials started so far stays closest to its proportion (the bracket furthest behind goes next; ties to
the more aggressive bracket). Promotions come first, from the highest rung of any bracket.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from nnlo.optimize.schedules.asha import geometric_budgets, promotion
from nnlo.optimize.schedules.base import Job, Ledger, ScheduleSpec, TrialView


def bracket_sizes(n_rungs: int, eta: float) -> list[int]:
    """Hyperband's ``n`` for each bracket ``b`` of ``n_rungs`` rungs (bracket b starts at rung b)."""
    k = n_rungs - 1
    return [math.ceil((k + 1) / (k - b + 1) * eta ** (k - b)) for b in range(n_rungs)]


def next_bracket(started: Sequence[int], sizes: Sequence[int]) -> int:
    """The bracket a new trial goes to: the one whose share of the trials started lags its proportion most."""
    total = sum(started) + 1
    weight = sum(sizes)
    return min(range(len(sizes)), key=lambda b: (started[b] - total * sizes[b] / weight, b))


@dataclass
class Hyperband:
    """``--schedule hyperband``: ASHA brackets over one ladder of rungs."""

    spec: ScheduleSpec

    def __post_init__(self) -> None:
        self.budgets = geometric_budgets(self.spec.min_epochs, self.spec.max_epochs, self.spec.eta)
        self.sizes = bracket_sizes(len(self.budgets), self.spec.eta)

    def next_job(self, trials: Ledger, *, new: bool, rng: np.random.Generator) -> Job | None:
        top = len(self.budgets) - 1
        best: tuple[int, int, TrialView] | None = None  # (rung it goes to, bracket, trial): highest rung first
        for b in range(top):
            up = promotion(trials, range(b, top), self.spec.eta, bracket=b)
            if up is not None and (best is None or up[1] > best[0]):
                best = (up[1], b, up[0])
        if best is not None:
            rung, b, t = best
            return Job(rung=rung, epochs=self.budgets[rung], trial=t.id, bracket=b)
        if not new:
            return None
        started = [trials.started(b) for b in range(len(self.sizes))]
        b = next_bracket(started, self.sizes)
        return Job(rung=b, epochs=self.budgets[b], bracket=b)

    def completed(self, trial: TrialView) -> bool:
        return trial.top == len(self.budgets) - 1
