"""Slurm's ``srun``: ``-n --nodes --ntasks-per-node --cpus-per-task --wait [--gpus-per-task --gpu-bind]``
plus site MPI flags.

GPU binding is spelled out rather than left to Slurm's defaults, which differ between versions (some bind
``--gpus-per-task`` GPUs to each task, older ones only count them): ``--gpu-bind=map_gpu:0,1,2,...`` gives
local task ``i`` the GPU of rank slot ``i`` (:func:`~nnlo_sched.launchers.base.slot_gpus`; ``0,0,1,1,...`` when
two ranks share one), ``mask_gpu:0x3,0xc,...`` several GPUs per task. Slurm then sets each task's
``CUDA_VISIBLE_DEVICES`` to its own GPUs (``ROCR_VISIBLE_DEVICES`` on AMD nodes: Frontier), and the rank
computes on the first (:mod:`nnlo.device`).

A profile with ``gpu_bind = "wrapper"`` (LUMI-G) asks Slurm for no per-task GPUs: every task sees the node's
GPUs and a wrapper sets the vendor's variable from ``SLURM_LOCALID``, as LUMI's ``select_gpu`` does
(``ROCR_VISIBLE_DEVICES=$SLURM_LOCALID``; per-task GPU cgroups would stop the GCDs of a node from reaching
each other).
"""
from __future__ import annotations

from nnlo_sched.launchers.base import LaunchPlan, Launcher, slot_gpus


def gpu_bind(plan: LaunchPlan, order: tuple[int, ...] = ()) -> str:
    """``--gpu-bind``'s value for a bound plan: one entry per rank slot of a node (Slurm reuses the list on
    every node, and for the fewer tasks of the last one); ``order``: the profile's ``gpu_order`` (Frontier
    puts each GCD beside the L3 cores of its slot)."""
    per_slot = [tuple(order[g] for g in gpus) if order else gpus
                for gpus in (slot_gpus(slot, plan.gpus_per_rank) for slot in range(plan.ranks_per_node))]
    if all(len(gpus) == 1 for gpus in per_slot):
        return "map_gpu:" + ",".join(str(gpus[0]) for gpus in per_slot)
    return "mask_gpu:" + ",".join(hex(sum(1 << g for g in gpus)) for gpus in per_slot)


class Srun(Launcher):
    name = "srun"
    binds_gpus = True
    local_rank_expr = "SLURM_LOCALID"

    def relay(self, signal: str) -> str:
        # srun answers one SIGINT with a status report and forwards nothing (its man page: only a second
        # one within a second reaches the tasks); SIGTERM reaches them, and the runtime stops on either.
        return "TERM" if signal == "INT" else signal

    def argv(self, plan: LaunchPlan) -> list[str]:
        out = [
            self.program(),
            *self.profile.launcher_flags,
            "-n", str(plan.ranks),
            f"--nodes={plan.nodes}",
            f"--ntasks-per-node={plan.ranks_per_node}",
            f"--cpus-per-task={plan.cores_per_rank}",
            # A rank that dies is noticed by its peers, which end the step within seconds (nnlo.liveness);
            # the backstop, with the watch off: when one rank has ended, the others get 120 s (enough to
            # finish a checkpoint or exit 75 in step) and are then ended. (--kill-on-bad-exit would also kill
            # ranks still writing when the first exits 75.)
            "--wait=120",
        ]
        # Whole GPUs per task are counted per task, shared ones come from the job's --gres/--gpus-per-node; both
        # are bound explicitly. Unbound (masters on spare cores of one node): every task sees every GPU and
        # each rank picks its own (nnlo.device).
        if self.profile.gpu_bind == "wrapper":
            return out + self.wrapper(plan)
        if plan.gpus_per_rank >= 1 and not plan.unbound:
            out.append(f"--gpus-per-task={int(plan.gpus_per_rank)}")
        if plan.bound:
            out.append(f"--gpu-bind={gpu_bind(plan, self.profile.gpu_order)}")
        return out
