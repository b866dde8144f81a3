"""Launchers: one small class per MPI launcher, each turning a :class:`LaunchPlan` into an argv."""
from __future__ import annotations

from nnlo_sched.launchers.aprun import Aprun
from nnlo_sched.launchers.base import LaunchPlan, Launcher
from nnlo_sched.launchers.flux import FluxRun
from nnlo_sched.launchers.jsrun import Jsrun
from nnlo_sched.launchers.mpiexec import Mpiexec
from nnlo_sched.launchers.mpirun import Mpirun
from nnlo_sched.launchers.srun import Srun
from nnlo_sched.profiles.schema import Profile

LAUNCHERS: dict[str, type[Launcher]] = {c.name: c for c in (Srun, Jsrun, Aprun, Mpiexec, FluxRun, Mpirun)}


def launcher_for(profile: Profile) -> Launcher:
    return LAUNCHERS[profile.launcher](profile)


__all__ = ["LAUNCHERS", "LaunchPlan", "Launcher", "launcher_for", "Aprun", "FluxRun", "Jsrun", "Mpiexec", "Mpirun",
           "Srun"]
