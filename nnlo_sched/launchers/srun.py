"""Slurm's ``srun``: ``-n --nodes --ntasks-per-node --cpus-per-task --wait [--gpus-per-task]``
plus site MPI flags."""
from __future__ import annotations

from nnlo_sched.launchers.base import LaunchPlan, Launcher


class Srun(Launcher):
    name = "srun"

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
            # When one rank has ended, the others get 120 s (enough to finish a checkpoint or exit 75 in
            # step) and are then ended: a rank that died must never leave the rest idle until the walltime.
            # (--kill-on-bad-exit would also kill ranks still writing when the first exits 75.)
            "--wait=120",
        ]
        # Whole GPUs per task are bound by Slurm; shared or layout-chosen GPUs stay visible to all tasks
        # (the job's --gres/--gpus-per-node) and each rank selects its device from the layout.
        if plan.gpus_per_rank >= 1 and not plan.unbound:
            out.append(f"--gpus-per-task={int(plan.gpus_per_rank)}")
        return out
