"""submitit on PBS/Torque (Titan; Slurm's Torque wrappers): ``submitit.AutoExecutor(folder, cluster="pbs")``.

Scripts come from nnlo's ``pbs.sh`` (and a site template such as ``titan.sh``) with a cluster profile
(``pbs_profile``, default ``titan``); ``qsub`` queues them, ``qstat`` answers for every job in one call,
``qdel`` cancels. PBS sends no signal before the walltime: the job's own timer checkpoints a checkpointable
function ``checkpoint_lead_s`` before it, and a successor queued with ``-W depend=afterany:ID`` resumes it.
Under Slurm's Torque wrappers ``PBS_JOBID`` is empty and the job id is ``SLURM_JOB_ID``.
See :mod:`nnlo_sched.submitit.base`.
"""
from __future__ import annotations

import typing as tp

from submitit.core import core

from nnlo_sched.schedulers.pbs import PbsScheduler
from nnlo_sched.submitit.base import NnloExecutor, NnloInfoWatcher, NnloJob, NnloJobEnvironment


class PbsInfoWatcher(NnloInfoWatcher):
    def __init__(self, delay_s: int = 60) -> None:
        super().__init__("pbs", delay_s)


class PbsJob(NnloJob[core.R]):
    scheduler = "pbs"
    watcher = PbsInfoWatcher(delay_s=60)



class PbsJobEnvironment(NnloJobEnvironment):
    scheduler = "pbs"


class PbsExecutor(NnloExecutor):
    job_class: type[core.Job[tp.Any]] = PbsJob
    scheduler = "pbs"
    default_profile = "titan"

    @staticmethod
    def _get_job_id_from_submission_command(string: bytes | str) -> str:
        return PbsScheduler().parse_submit_output(string.decode() if isinstance(string, bytes) else string)
