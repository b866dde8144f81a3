"""End the whole MPI job from any rank and any thread: ``MPI_Abort``, backed by a fallback that needs no GIL.

``MPI_Abort`` normally ends every rank at once: the aborting process tells the launcher, which kills the job.
But the call can hang inside the aborting process, and then nothing ends the job until its walltime:

- mpi4py holds the GIL across ``MPI_Abort``, so no Python thread of that process runs again;
- at its end the MPI library calls ``exit()``, which flushes C stdio and runs library destructors (UCX,
  libfabric, OpenMP), and any of those may wait for a lock that another thread holds (the main thread is
  usually inside a blocking receive when the watchdog thread aborts).

Seen once in CI: the ``Abort(1) on node 1`` line printed, and the three ranks sat until the test's timeout.

So :func:`abort_job` arms :mod:`faulthandler`'s timer first. That timer is a C thread that takes neither the
GIL nor any lock of ours; after ``grace_s`` it ends the process with ``_exit(1)``, which runs no destructor.
A rank that exits non-zero without finalizing is what every launcher ends the job for (Hydra's
auto-cleanup, ``srun --wait``, ``jsrun``, ``aprun``), so the job still ends, at worst ``grace_s`` later and with
exit status 1 rather than ``code``. Before any of it the peers are told (:func:`tell_leaving`: the hook
:mod:`nnlo.liveness` registers with :func:`on_leaving`): they end the job themselves should neither the abort nor
the launcher do it.

Imports nothing of nnlo, so every module that ends a job may import it.
"""
from __future__ import annotations

import contextlib
import faulthandler
import os
import sys
from collections.abc import Callable
from typing import IO, Any, NoReturn

#: Seconds between ``MPI_Abort`` and the fallback ``_exit(1)``; a working abort ends the job in milliseconds.
ABORT_GRACE_S = 10.0

_sink: IO[str] | None = None
_leaving_hooks: list[Callable[[int], None]] = []


def on_leaving(hook: Callable[[int], None]) -> None:
    """Call ``hook(code)`` whenever this process ends the job with ``code`` (:func:`abort_job`, a second stop
    signal): :mod:`nnlo.liveness` tells the peers with it. A hook registered twice runs once."""
    if hook not in _leaving_hooks:
        _leaving_hooks.append(hook)


def tell_leaving(code: int) -> None:
    """Run the :func:`on_leaving` hooks: this process is about to end the job with ``code``. A hook that fails
    never stops the exit."""
    for hook in list(_leaving_hooks):
        with contextlib.suppress(Exception):
            hook(code)


def _dump_sink() -> IO[str]:
    """Where faulthandler writes its thread dump when the fallback fires: nowhere (the user has had the
    one-line error already; a dump of every thread's stack is no help to them)."""
    global _sink
    if _sink is None:
        _sink = open(os.devnull, "w")  # noqa: SIM115 - must stay open for the C timer thread
    return _sink


def abort_job(comm: Any, code: int, grace_s: float = ABORT_GRACE_S) -> NoReturn:
    """``comm.Abort(code)``, and ``_exit(1)`` after ``grace_s`` seconds if the abort has not ended this process.

    Call it after printing the one-line error; safe from any thread.
    """
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):  # a closed or missing stream never stops it
            stream.flush()
    tell_leaving(code)  # the peers end the job too should this abort not (and take this rank for no death)
    faulthandler.dump_traceback_later(grace_s, repeat=False, file=_dump_sink(), exit=True)
    comm.Abort(code)
    os._exit(code)  # MPI_Abort returned (a stand-in communicator, a broken MPI): never go on as if alive


def abort_rank(comm: Any, role: str, message: str, code: int) -> NoReturn:
    """Print this rank's one line, ``nnlo: error: rank R (role): message``, and end the job with ``code``."""
    sys.stderr.write(f"nnlo: error: rank {comm.Get_rank()} ({role}): {message}\n")
    abort_job(comm, code)
