"""nnlo's batch systems as submitit plugins: ``submitit.AutoExecutor(folder, cluster="lsf")`` and ``"pbs"``.

Each backend is one module (:mod:`~nnlo_sched.submitit.lsf`, :mod:`~nnlo_sched.submitit.pbs`) with an
executor, a job, an info watcher and a job environment, on a shared base (:mod:`~nnlo_sched.submitit.base`).
They are registered under submitit's entry-point group (``submitit``: ``executor``, ``job_environment``).
One distribution can register one executor only (submitit reads exactly those two names and setuptools
refuses a name twice in a group): nnlo's own ``setup.cfg`` registers LSF, the code-less distribution in
``plugins/submitit-pbs`` registers PBS. :func:`register` adds both to submitit's registry at run time where
that second distribution is not installed (harmless where it is); jobs call it themselves.

:func:`script` renders the script a submission would queue, without submitting (a dry run). Details and
examples: docs/python-api.md (second part).
"""
from __future__ import annotations

from typing import Any

from submitit.core import plugins

from nnlo_sched.submitit.base import NnloExecutor
from nnlo_sched.submitit.lsf import LsfExecutor, LsfJobEnvironment
from nnlo_sched.submitit.pbs import PbsExecutor, PbsJobEnvironment


def register() -> None:
    """Make the ``lsf`` and ``pbs`` executors and job environments known to submitit (idempotent)."""
    executors = plugins.get_executors()
    envs = plugins.get_job_environments()
    for ex in (LsfExecutor, PbsExecutor):
        if not isinstance(executors, dict):  # pragma: no cover - submitit changed its registry
            raise RuntimeError("submitit's executor registry is not a dict; install nnlo's entry points")
        executors.setdefault(ex.name(), ex)
    for env_cls in (LsfJobEnvironment, PbsJobEnvironment):
        if env_cls.name() not in envs and isinstance(envs, dict):
            envs[env_cls.name()] = env_cls()


def script(executor: Any) -> str:
    """The job script ``executor`` (a plugin executor or an ``AutoExecutor`` of one) would submit now;
    nothing is written or submitted."""
    inner = getattr(executor, "_executor", executor)
    if not isinstance(inner, NnloExecutor):
        raise TypeError(f"{type(inner).__name__} is not one of nnlo's submitit executors (cluster lsf or pbs)")
    return inner.script()


__all__ = ["register", "script"]
