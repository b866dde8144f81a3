"""Schedules that stop bad trials early (``--schedule asha|hyperband|pbt``), and ``full`` (:mod:`.full`), which
trains every trial to ``--epochs`` at once: a schedule object like the others, never a missing one.

The rung and promotion logic (:mod:`.asha`, :mod:`.hyperband`) and PBT's exploit and explore (:mod:`.pbt`)
are pure functions of the trials (:mod:`.base`: :class:`TrialView` in, :class:`Job` out); :mod:`.ledger`
turns the search's trial records into views and feeds the engine the results of one rung. The search
(:class:`nnlo.optimize.search.Search`, and its shared form) asks :meth:`Schedule.next_job` whenever a block
is free, starts or resumes the trial the job names, and records each rung's result; a resumed trial trains
on from its own checkpoint (the training's ``--restore auto`` in its folder), so no epoch is trained twice.
"""
from __future__ import annotations

from typing import Any

from nnlo.optimize.schedules.asha import Asha
from nnlo.optimize.schedules.base import (
    DEFAULT_ETA,
    DEFAULT_MIN_EPOCHS,
    PBT_POPULATION,
    PBT_STEPS,
    SCHEDULES,
    Job,
    Ledger,
    Schedule,
    ScheduleError,
    ScheduleSpec,
    TrialView,
    pbt_interval,
    rung_of,
)
from nnlo.optimize.schedules.full import Full
from nnlo.optimize.schedules.hyperband import Hyperband
from nnlo.optimize.schedules.pbt import Pbt

__all__ = ["DEFAULT_ETA", "DEFAULT_MIN_EPOCHS", "Full", "PBT_POPULATION", "PBT_STEPS", "SCHEDULES", "Job", "Ledger",
           "Schedule", "ScheduleError", "ScheduleSpec", "TrialView", "make_schedule", "pbt_interval", "rung_of"]


def make_schedule(spec: ScheduleSpec, space: Any) -> Schedule:
    """The schedule ``spec`` names over ``space`` (PBT perturbs points of it)."""
    if spec.name == "asha":
        return Asha(spec)
    if spec.name == "hyperband":
        return Hyperband(spec)
    if spec.name == "pbt":
        return Pbt(spec, space)
    return Full(spec.max_epochs)
