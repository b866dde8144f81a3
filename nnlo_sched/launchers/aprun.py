"""Cray ALPS ``aprun -n <ranks> -N <ranks per node> -d <cores per rank>`` (Titan)."""
from __future__ import annotations

from nnlo_sched.launchers.base import LaunchPlan, Launcher


class Aprun(Launcher):
    name = "aprun"

    def argv(self, plan: LaunchPlan) -> list[str]:
        return [
            self.program(),
            *self.profile.launcher_flags,
            "-n", str(plan.ranks),
            "-N", str(plan.ranks_per_node),
            "-d", str(plan.cores_per_rank),
        ]
