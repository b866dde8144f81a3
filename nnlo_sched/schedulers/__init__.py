"""Batch systems as the chain uses them: submit behind a dependency, query many jobs at once, cancel.

:func:`get_scheduler` gives the :class:`~nnlo_sched.schedulers.base.Scheduler` for a profile's ``scheduler``
key; the local one works on a run directory's own queue, so it needs that directory.
"""
from __future__ import annotations

from pathlib import Path

from nnlo.errors import ConfigError
from nnlo_sched.schedulers.base import JobInfo, Scheduler, SchedulerError

NAMES = ("slurm", "lsf", "pbs", "local")


def get_scheduler(name: str, run_dir: str | Path | None = None) -> Scheduler:
    """The scheduler called ``name``; ``run_dir`` is required for ``local`` (its queue lives there)."""
    if name == "slurm":
        from nnlo_sched.schedulers.slurm import SlurmScheduler
        return SlurmScheduler()
    if name == "lsf":
        from nnlo_sched.schedulers.lsf import LsfScheduler
        return LsfScheduler()
    if name == "pbs":
        from nnlo_sched.schedulers.pbs import PbsScheduler
        return PbsScheduler()
    if name == "local":
        if run_dir is None:
            raise ValueError("the local scheduler needs the run directory")
        from nnlo_sched.schedulers.local import LocalScheduler
        return LocalScheduler(run_dir)
    raise ConfigError(f"unknown scheduler {name!r}; nnlo knows {', '.join(NAMES)}")


__all__ = ["JobInfo", "NAMES", "Scheduler", "SchedulerError", "get_scheduler"]
