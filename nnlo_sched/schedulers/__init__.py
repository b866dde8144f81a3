"""Batch systems as the chain uses them: submit behind a dependency, query many jobs at once, cancel.

:func:`get_scheduler` gives the :class:`~nnlo_sched.schedulers.base.Scheduler` for a profile's ``scheduler``
key; the local one works on a run directory's own queue, so it needs that directory. :func:`scheduler_class`
gives its class, whose attributes are what a batch script's template needs (``directive_prefix`` ...).
"""
from __future__ import annotations

from pathlib import Path

from nnlo.errors import ConfigError
from nnlo_sched.schedulers.base import JobInfo, Scheduler, SchedulerError

NAMES = ("slurm", "lsf", "pbs", "local")


def scheduler_class(name: str) -> type[Scheduler]:
    """The :class:`Scheduler` subclass called ``name``."""
    if name == "slurm":
        from nnlo_sched.schedulers.slurm import SlurmScheduler
        return SlurmScheduler
    if name == "lsf":
        from nnlo_sched.schedulers.lsf import LsfScheduler
        return LsfScheduler
    if name == "pbs":
        from nnlo_sched.schedulers.pbs import PbsScheduler
        return PbsScheduler
    if name == "local":
        from nnlo_sched.schedulers.local import LocalScheduler
        return LocalScheduler
    raise ConfigError(f"unknown scheduler {name!r}; nnlo knows {', '.join(NAMES)}")


def get_scheduler(name: str, run_dir: str | Path | None = None) -> Scheduler:
    """The scheduler called ``name``; ``run_dir`` is required for ``local`` (its queue lives there)."""
    if name == "local":
        if run_dir is None:
            raise ValueError("the local scheduler needs the run directory")
        from nnlo_sched.schedulers.local import LocalScheduler
        return LocalScheduler(run_dir)
    return scheduler_class(name)()


__all__ = ["NAMES", "JobInfo", "Scheduler", "SchedulerError", "get_scheduler", "scheduler_class"]
