"""Summit's ``jsrun``: resource sets (``-n`` sets, ``-r`` per host, ``-a`` tasks, ``-c`` cores, ``-g`` GPUs, ``-b``).

Three forms, in order of preference:

* one rank per resource set with its own GPU(s): ``jsrun -n R -r T -a 1 -c C -g G -b rs`` (the OLCF
  one-rank-per-GPU idiom);
* ranks sharing a GPU: one resource set per GPU holding ``k`` ranks, ``-a k -g 1 -b packed:C`` (the batch
  script adds ``-alloc_flags gpumps``);
* more ranks on a node than GPU slots (a single node whose masters sit on spare cores): one resource set
  per node with all its cores and GPUs, ``-b packed:C``; each rank picks its device from the layout.
"""
from __future__ import annotations

from nnlo_sched.launchers.base import LaunchError, LaunchPlan, Launcher


class Jsrun(Launcher):
    name = "jsrun"
    binds_gpus = True  # a resource set's GPUs are the only ones its ranks see (CUDA_VISIBLE_DEVICES)

    def _form(self, plan: LaunchPlan) -> tuple[int, int, int, int, int, str]:
        """(sets, sets per host, tasks per set, cores per set, GPUs per set, bind)."""
        c = plan.cores_per_rank
        if plan.unbound:
            t = plan.ranks_per_node
            return plan.nodes, 1, t, t * c, self.profile.gpus_per_node, f"packed:{c}"
        if plan.gpus_per_rank >= 1 or plan.gpus_per_rank == 0:
            return plan.ranks, plan.ranks_per_node, 1, c, int(plan.gpus_per_rank), "rs"
        k = plan.ranks_per_gpu
        return plan.ranks // k, plan.ranks_per_node // k, k, k * c, 1, f"packed:{c}"

    def check(self, plan: LaunchPlan) -> None:
        sets, per_host, tasks, _, _, _ = self._form(plan)
        if sets * tasks != plan.ranks or (per_host * tasks != plan.ranks_per_node and plan.nodes > 1):
            raise LaunchError(
                f"jsrun resource sets of {tasks} rank(s) cannot start exactly {plan.ranks} ranks at "
                f"{plan.ranks_per_node} per node; make the rank count a multiple of {tasks} (change the "
                "number of workers, --n-masters or --n-processes) or use --gpus-per-worker 1"
            )

    def argv(self, plan: LaunchPlan) -> list[str]:
        sets, per_host, tasks, cores, gpus, bind = self._form(plan)
        return [
            self.program(),
            *self.profile.launcher_flags,
            "-n", str(sets),
            "-r", str(per_host),
            "-a", str(tasks),
            "-c", str(cores),
            "-g", str(gpus),
            "-b", bind,
        ]
