"""``mpirun -np <ranks>`` (MPICH hydra / Open MPI); ``-ppn`` only when a job spans several nodes.

MPICH's hydra forwards SIGUSR1 and SIGTERM to its ranks but dies on SIGUSR2, so a pre-walltime SIGUSR2
is relayed to it as SIGUSR1 (the runtime stops cleanly on either).

The local profile uses the submitting environment's mpirun (pip MPICH runs more ranks than cores without
extra flags). Open MPI users add ``--oversubscribe`` or ``--map-by`` through the profile's ``launcher_flags``.
"""
from __future__ import annotations

from nnlo_sched.launchers.base import LaunchPlan, Launcher


class Mpirun(Launcher):
    name = "mpirun"

    def relay(self, signal: str) -> str:
        return "USR1" if signal == "USR2" else signal

    def argv(self, plan: LaunchPlan) -> list[str]:
        out = [self.program(), *self.profile.launcher_flags, "-np", str(plan.ranks)]
        if plan.nodes > 1:
            out += ["-ppn", str(plan.ranks_per_node)]
        return out
