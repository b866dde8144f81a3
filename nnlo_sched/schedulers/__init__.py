"""Batch systems as the chain uses them: submit behind a dependency, query many jobs at once, cancel.

:func:`get_scheduler` gives the :class:`~nnlo_sched.schedulers.base.Scheduler` for a profile's ``scheduler``
key; the local one works on a run directory's own queue, so it needs that directory. :func:`scheduler_class`
gives its class, whose attributes are what a batch script's template needs (``directive_prefix`` ...).
"""
from __future__ import annotations

from pathlib import Path

from nnlo.errors import ConfigError
from nnlo_sched.schedulers.base import JobInfo, Scheduler, SchedulerError
from nnlo_sched.schedulers.flux import FluxScheduler
from nnlo_sched.schedulers.local import LocalScheduler
from nnlo_sched.schedulers.lsf import LsfScheduler
from nnlo_sched.schedulers.pbs import PbsScheduler
from nnlo_sched.schedulers.pbspro import PbsProScheduler
from nnlo_sched.schedulers.slurm import SlurmScheduler

#: every batch system nnlo knows, by the name a profile's ``scheduler`` key gives
CLASSES: dict[str, type[Scheduler]] = {c.name: c for c in (SlurmScheduler, LsfScheduler, PbsScheduler,
                                                            PbsProScheduler, FluxScheduler, LocalScheduler)}
NAMES = tuple(CLASSES)


def scheduler_class(name: str) -> type[Scheduler]:
    """The :class:`Scheduler` subclass called ``name``."""
    try:
        return CLASSES[name]
    except KeyError:
        raise ConfigError(f"unknown scheduler {name!r}; nnlo knows {', '.join(NAMES)}") from None


def get_scheduler(name: str, run_dir: str | Path | None = None) -> Scheduler:
    """The scheduler called ``name``; ``run_dir`` is required for ``local`` (its queue lives there)."""
    if name == LocalScheduler.name:
        if run_dir is None:
            raise ValueError("the local scheduler needs the run directory")
        return LocalScheduler(run_dir)
    return scheduler_class(name)()


__all__ = ["CLASSES", "NAMES", "JobInfo", "Scheduler", "SchedulerError", "get_scheduler", "scheduler_class"]
