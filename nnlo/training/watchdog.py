"""A watchdog for blocking receives: a peer that dies silently must not hang the run until its walltime.

MPI launchers usually end a job when one rank dies, but not all do (``srun`` without
``--kill-on-bad-exit``, a rank stuck in a driver call, a node that vanished), and a blocking ``Recv`` never
returns by itself. So every blocking wait of the runtime is *armed* here; a daemon thread checks the armed
wait and, past the timeout, prints one line naming the rank and what it waited for, and aborts the whole
MPI job (:func:`nnlo.abort.abort_rank`, which cannot hang). Nothing polls: the waits stay plain blocking MPI
calls (mpi4py initialises MPI with ``MPI_THREAD_MULTIPLE``, so aborting from the watchdog thread is allowed).

Timeout: ``NNLO_COMM_TIMEOUT`` seconds (default 1800; ``0`` switches the watchdog off). It bounds one
wait, which includes a peer's compute between exchanges, the master's validation and checkpoint writes.
"""
from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from nnlo.abort import abort_rank
from nnlo.contract import EXIT_FAILED

DEFAULT_TIMEOUT = 1800.0


def timeout_from_env() -> float | None:
    raw = os.environ.get("NNLO_COMM_TIMEOUT", "")
    try:
        value = float(raw) if raw else DEFAULT_TIMEOUT
    except ValueError:
        value = DEFAULT_TIMEOUT
    return value if value > 0 else None


class Watchdog:
    """Arms around blocking waits; calls ``on_expire(message)`` once when one lasts past ``timeout``."""

    def __init__(self, timeout: float | None, on_expire: Callable[[str], None]) -> None:
        self.timeout = timeout
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

    def arm(self, what: str) -> None:
        """A wait starts (:meth:`waiting` without a generator: the hot receive path of the transport)."""
        self._what, self._since = what, time.monotonic()

    def disarm(self) -> None:
        self._since = None

    def _run(self) -> None:
        assert self.timeout is not None
        step = min(max(self.timeout / 20, 0.05), 5.0)
        while not self._stop.wait(step):
            since = self._since
            if since is not None and time.monotonic() - since > self.timeout:
                self.on_expire(
                    f"{self._what} for more than {self.timeout:g} s: a peer died or hangs "
                    f"(NNLO_COMM_TIMEOUT sets this limit)"
                )
                return

    def close(self) -> None:
        self._stop.set()


def abort_on_expiry(comm: Any, role: Callable[[], str]) -> Callable[[str], None]:
    """``on_expire`` that prints ``nnlo: error: rank R (role): message`` and aborts the MPI job."""

    def expire(message: str) -> None:
        abort_rank(comm, role(), message, EXIT_FAILED)

    return expire
