"""Cray PALS ``mpiexec`` (ALCF Aurora and Polaris, under PBS Pro): ``-n R --ppn P --depth D --cpu-bind ...``.

PALS binds no GPU ("Cray MPI on Polaris does not currently support binding MPI ranks to GPUs"); ALCF gives
each rank its device with an affinity script that reads the rank's node-local number (``PALS_LOCAL_RANKID``;
Polaris' script reads ``PMI_LOCAL_RANK``) and sets the vendor's variable. nnlo puts the same rule into the
launch line (:func:`~nnlo_sched.launchers.base.device_wrapper`), so no helper file is needed: Polaris assigns
GPUs in reverse order (local rank 0 gets GPU 3: the topology, ``set_affinity_gpu_polaris.sh``), Aurora one
tile per rank as ``ZE_AFFINITY_MASK=gpu.tile`` with ``ZE_FLAT_DEVICE_HIERARCHY=COMPOSITE``
(``gpu_tile_compact.sh``).

CPU binding: ``--cpu-bind depth`` with ``--depth`` the cores of a rank (Polaris' 4 x 8), or, where the profile
reserves cores (Aurora: cores 0 and 52, one per socket), an explicit ``--cpu-bind=list:a-b:...`` that spreads
the node's ranks evenly over the runs of usable cores between the reserved ones: ALCF's 12-rank list
``1-8:9-16:...:41-48:53-60:...:93-100`` for Aurora.

Signals: the batch shell passes the stop signals on to ``mpiexec`` unchanged; that PALS forwards SIGUSR1/SIGUSR2
to the ranks is unverified (ALCF sends no warning signal, so the deadline clock, not a signal, normally stops
these jobs; ``nnlo preempt`` relies on it).
"""
from __future__ import annotations

from nnlo_sched.launchers.base import LaunchPlan, Launcher


def cpu_lists(ranks_per_node: int, depth: int, usable: int, reserved: tuple[int, ...]) -> str | None:
    """``list:a-b:c-d...`` giving each of a node's ranks ``depth`` consecutive usable cores, the ranks spread
    evenly over the runs of usable cores between ``reserved`` ones (a node of ``usable`` + reserved cores);
    None when they do not divide evenly or do not fit (``--cpu-bind depth`` then). Pure."""
    total = usable + len(reserved)
    runs: list[list[int]] = [[]]
    for core in range(total):
        if core in reserved:
            runs.append([])
        else:
            runs[-1].append(core)
    runs = [r for r in runs if r]
    if not runs or ranks_per_node % len(runs):
        return None
    per_run = ranks_per_node // len(runs)
    if any(per_run * depth > len(r) for r in runs):
        return None
    spans = [f"{r[i * depth]}-{r[i * depth + depth - 1]}" for r in runs for i in range(per_run)]
    return "list:" + ":".join(spans)


class Mpiexec(Launcher):
    name = "mpiexec"
    binds_gpus = True  # through the device wrapper, as the sites' affinity scripts do
    # PALS sets PALS_LOCAL_RANKID on Aurora and Polaris; Polaris' own script reads PMI_LOCAL_RANK
    local_rank_expr = "${PALS_LOCAL_RANKID:-$PMI_LOCAL_RANK}"

    def argv(self, plan: LaunchPlan) -> list[str]:
        out = [
            self.program(),
            *self.profile.launcher_flags,
            "-n", str(plan.ranks),
            "--ppn", str(plan.ranks_per_node),
            "--depth", str(plan.cores_per_rank),
        ]
        lists = cpu_lists(plan.ranks_per_node, plan.cores_per_rank, self.profile.cores_per_node,
                          self.profile.reserved_cores) if self.profile.reserved_cores else None
        out += [f"--cpu-bind={lists}"] if lists else ["--cpu-bind", "depth"]
        return out + self.wrapper(plan)
