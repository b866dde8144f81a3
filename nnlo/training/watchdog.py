"""A watchdog for blocking receives: a peer that dies silently must not hang the run until its walltime.

MPI launchers usually end a job when one rank dies, but not all do (``srun`` without
``--kill-on-bad-exit``, a rank stuck in a driver call, a node that vanished), and a blocking ``Recv`` never
returns by itself. So every blocking wait of the runtime is *armed* here; a daemon thread checks the armed
wait and, past the timeout, prints one line naming the rank and what it waited for, and aborts the whole
MPI job (:func:`nnlo.abort.abort_rank`, which cannot hang). Nothing polls: the waits stay plain blocking MPI
calls (mpi4py initialises MPI with ``MPI_THREAD_MULTIPLE``, so aborting from the watchdog thread is allowed).

Timeout: ``NNLO_COMM_TIMEOUT`` seconds (default 1800; ``0`` switches the watchdog off). It bounds one
wait, which includes a peer's compute between exchanges, the master's validation and checkpoint writes.
Until every rank has set up (:meth:`Watchdog.started`, called by the driver once the set-up phases are through)
a wait is bounded by the start-up limit instead: ``NNLO_START_TIMEOUT`` seconds, by default the larger of
1800 and ``NNLO_COMM_TIMEOUT``. Start-up (an interpreter, torch and the data opened on every rank, from a
parallel file system at scale) takes far longer than one exchange, so a limit short enough to catch a hung
peer mid-run would otherwise end healthy jobs that start slowly.
"""
from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from nnlo.abort import abort_rank
from nnlo.contract import ENV_COMM_TIMEOUT, ENV_START_TIMEOUT, EXIT_FAILED

DEFAULT_TIMEOUT = 1800.0
TIMEOUT_VAR = ENV_COMM_TIMEOUT
START_TIMEOUT_VAR = ENV_START_TIMEOUT


def _seconds(name: str, default: float) -> float:
    raw = os.environ.get(name, "")
    try:
        return float(raw) if raw else default
    except ValueError:
        return default


def timeout_from_env() -> float | None:
    """The limit of one wait once every rank has set up; None: no watchdog (``NNLO_COMM_TIMEOUT=0``)."""
    value = _seconds(TIMEOUT_VAR, DEFAULT_TIMEOUT)
    return value if value > 0 else None


def start_timeout_from_env(timeout: float | None) -> float | None:
    """The limit of one wait before every rank has set up: ``NNLO_START_TIMEOUT``, by default the larger of
    the default limit and ``timeout``; never shorter than ``timeout``; ``0``: no limit at start-up (infinity).
    None where the watchdog is off."""
    if timeout is None:
        return None
    value = _seconds(START_TIMEOUT_VAR, max(DEFAULT_TIMEOUT, timeout))
    return max(value, timeout) if value > 0 else math.inf


class Watchdog:
    """Arms around blocking waits; calls ``on_expire(message)`` once when one lasts past its limit:
    ``start_timeout`` until :meth:`started`, ``timeout`` after (``start_timeout`` None: ``timeout`` throughout)."""

    def __init__(self, timeout: float | None, on_expire: Callable[[str], None],
                 start_timeout: float | None = None) -> None:
        self.timeout = timeout
        self.start_timeout = start_timeout if start_timeout is not None else timeout
        self._started = False
        self.on_expire = on_expire
        self._since: float | None = None
        self._what = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if timeout is not None:
            self._thread = threading.Thread(target=self._run, name="nnlo-watchdog", daemon=True)
            self._thread.start()

    @contextlib.contextmanager
    def waiting(self, what: str) -> Iterator[None]:
        self.arm(what)
        try:
            yield
        finally:
            self.disarm()

    def started(self) -> None:
        """Every rank has set up: from now on a wait is bounded by ``timeout``."""
        self._started = True

    def _limit(self) -> tuple[float | None, str]:
        """The limit of a wait now, and the variable that sets it."""
        if self._started:
            return self.timeout, TIMEOUT_VAR
        return self.start_timeout, START_TIMEOUT_VAR

    def arm(self, what: str) -> None:
        """A wait starts (:meth:`waiting` without a generator: the hot receive path of the transport)."""
        self._what, self._since = what, time.monotonic()

    def disarm(self) -> None:
        self._since = None

    def _run(self) -> None:
        assert self.timeout is not None
        step = min(max(min(self.timeout, self.start_timeout or math.inf) / 20, 0.05), 5.0)
        while not self._stop.wait(step):
            since, (limit, var) = self._since, self._limit()
            if since is not None and limit is not None and time.monotonic() - since > limit:
                self.on_expire(f"{self._what} for more than {limit:g} s: a peer died or hangs ({var} sets this limit)")
                return

    def close(self) -> None:
        self._stop.set()


def abort_on_expiry(comm: Any, role: Callable[[], str]) -> Callable[[str], None]:
    """``on_expire`` that prints ``nnlo: error: rank R (role): message`` and aborts the MPI job."""

    def expire(message: str) -> None:
        abort_rank(comm, role(), message, EXIT_FAILED)

    return expire
