"""submitit on IBM Spectrum LSF (Summit): ``submitit.AutoExecutor(folder, cluster="lsf")``.

Scripts come from nnlo's ``lsf.sh`` (and a site template such as ``summit.sh``) with a cluster profile
(``lsf_profile``, default ``summit``); ``bsub`` reads them on standard input, ``bjobs -a -w`` answers for
every job in one call, ``bkill`` cancels. LSF sends the profile's warning signal (``-wa``/``-wt``) before
the walltime: a checkpointable function is checkpointed then and resumed by a successor job queued with
``-w 'ended(ID)'``. See :mod:`nnlo_sched.submitit.base`.
"""
from __future__ import annotations

import typing as tp

from submitit.core import core

from nnlo_sched.schedulers.lsf import LsfScheduler
from nnlo_sched.submitit.base import NnloExecutor, NnloInfoWatcher, NnloJob, NnloJobEnvironment


class LsfInfoWatcher(NnloInfoWatcher):
    def __init__(self, delay_s: int = 60) -> None:
        super().__init__("lsf", delay_s)


class LsfJob(NnloJob[core.R]):
    scheduler = "lsf"
    watcher = LsfInfoWatcher(delay_s=60)



class LsfJobEnvironment(NnloJobEnvironment):
    scheduler = "lsf"


class LsfExecutor(NnloExecutor):
    job_class: type[core.Job[tp.Any]] = LsfJob
    scheduler = "lsf"
    default_profile = "summit"

    @staticmethod
    def _get_job_id_from_submission_command(string: bytes | str) -> str:
        return LsfScheduler().parse_submit_output(string.decode() if isinstance(string, bytes) else string)
