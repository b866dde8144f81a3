"""Cray ALPS ``aprun -n <ranks> -N <ranks per node> -d <cores per rank>`` (Titan).

aprun has no GPU option: every rank sees every GPU of its node (Titan's one K20X, shared through
``CRAY_CUDA_MPS=1`` when several ranks run on a node), and each rank picks its own by
:func:`nnlo.device.gpu_index`; one rank per GPU is ``-N`` ranks per node, as the layout places them.
"""
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
