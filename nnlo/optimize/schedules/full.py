"""``--schedule full``: every trial trains ``--epochs`` in one job, and its one result is the trial's.

The null schedule: a search under it is a plain search (no rungs, no stages, the budget counts finished
trials), and the search tells it from the others by its spec (``spec.staged`` is False), never by a missing
schedule. Its spec is the default :class:`ScheduleSpec` whatever ``--epochs`` says, as a full search's state
and journal identity have always recorded it (none).
"""
from __future__ import annotations

import numpy as np

from nnlo.optimize.schedules.base import Job, Ledger, ScheduleSpec, TrialView


class Full:
    """Every trial to ``epochs`` at once (``budgets``: that one rung)."""

    def __init__(self, epochs: int = 1) -> None:
        self.spec = ScheduleSpec()
        self.budgets: tuple[int, ...] = (max(1, int(epochs)),)

    def next_job(self, trials: Ledger, *, new: bool, rng: np.random.Generator) -> Job | None:
        """A new trial trained to the end while new ones may start (the search counts its budget itself)."""
        return Job(0, self.budgets[0]) if new else None

    def completed(self, trial: TrialView) -> bool:
        """A finished trial trained its whole budget: there is no other stage."""
        return True
