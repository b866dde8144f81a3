"""The stop signals, caught the same way by a training and by a search.

Why one class: a run is stopped by the batch system's pre-walltime warning (SIGUSR1/SIGUSR2), its SIGTERM at
the limit or on ``scancel``, or Ctrl-C at a terminal (SIGINT): :data:`nnlo.contract.STOP_SIGNALS`, which all
mean "write a complete checkpoint now and exit 75". A training and a search must answer them alike, whatever
launched them, so both install a :class:`Stop` for as long as they run and ask it whether a stop was asked for.

A second SIGTERM or SIGINT (:data:`~nnlo.contract.INSISTING_SIGNALS`) ends the process at once with status
128+n, without a checkpoint. Only one that comes at least :data:`INSIST_AFTER_S` after the first counts: a
scheduler that signals every process of a job while the batch script relays the same signal to the launcher
(Slurm at the walltime, the local scheduler at the limit or on cancel) delivers one event twice within
milliseconds, and that must not cost the checkpoint.

Handlers can only be installed from the main thread; elsewhere a :class:`Stop` stays unset. ``close()`` (or
leaving the ``with`` block) puts back the handlers found at install. A stop installed over another (a
training inside a search's block) starts from the outer one's signal and hands its own back on close, so a
process has one answer to "was I asked to stop".

Search also asks :meth:`Stop.reason` and :meth:`Stop.no_time_for`, which weigh the deadline as well (the
training's own deadline margin lives in :mod:`nnlo.training.deadline`).
"""
from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any, Self

from nnlo.abort import tell_leaving
from nnlo.config import deadline_safety_from_env
from nnlo.contract import INSISTING_SIGNALS, STOP_SIGNALS, STOP_WORDS, signal_status
from nnlo.observe.logs import ONCE

log = logging.getLogger("nnlo.stop")

#: A repeated SIGTERM/SIGINT sooner than this after the first is the same event delivered twice.
INSIST_AFTER_S = 1.0

#: What ``signal.signal`` returns and accepts.
Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


class Stop:
    """Records the first stop signal (and a stop the program asks for itself); optionally knows a deadline.

    deadline: unix seconds by which a search must have stopped (None: no deadline); see :meth:`reason`.
    safety_s: seconds kept before it; None: ``$NNLO_DEADLINE_SAFETY`` or its default, as a training keeps
    (:func:`nnlo.config.deadline_safety_from_env`).
    """

    def __init__(self, deadline: float | None = None, *, safety_s: float | None = None) -> None:
        self.deadline = deadline
        self.safety_s = deadline_safety_from_env() if safety_s is None else safety_s
        self.signal_name: str | None = None
        self.requested: str | None = None
        self._first_at = 0.0
        self._previous: dict[signal.Signals, Handler] = {}
        self._outer: Stop | None = None

    @property
    def raised(self) -> bool:
        """A stop signal arrived."""
        return self.signal_name is not None

    # -- handlers --------------------------------------------------------------------------------------
    def install(self) -> Self:
        """Catch :data:`~nnlo.contract.STOP_SIGNALS` until :meth:`close` (main thread only)."""
        if threading.current_thread() is not threading.main_thread():
            log.debug("not in the main thread: stop signals are left to whoever handles them")
            return self
        for sig in STOP_SIGNALS:
            previous = signal.signal(sig, self._handle)
            self._previous[sig] = previous
            outer = getattr(previous, "__self__", None)
            if isinstance(outer, Stop) and self._outer is None:
                self._outer = outer
                if outer.raised and not self.raised:
                    self.signal_name, self._first_at = outer.signal_name, outer._first_at
        return self

    def close(self) -> None:
        """Put back the handlers found at :meth:`install`; an outer stop learns this one's signal."""
        for sig, handler in self._previous.items():
            if handler is not None:  # None: set outside Python, cannot be put back
                signal.signal(sig, handler)
        self._previous.clear()
        outer, self._outer = self._outer, None
        if outer is not None and self.raised and not outer.raised:
            outer.signal_name, outer._first_at = self.signal_name, self._first_at

    def __enter__(self) -> Self:
        return self.install()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        sig = signal.Signals(signum)
        now = time.monotonic()
        if self.signal_name is None:
            self.signal_name, self._first_at = sig.name, now
            again = f"; {sig.name} again ends it at once" if sig in INSISTING_SIGNALS else ""
            # a batch system's or a launcher's signal reaches every rank: the screen says it once
            log.warning("received %s: %s%s", sig.name, STOP_WORDS, again, extra=ONCE)
        elif sig in INSISTING_SIGNALS and now - self._first_at >= INSIST_AFTER_S:
            tell_leaving(signal_status(signum))  # the peers end too, rather than take this rank for dead
            os._exit(signal_status(signum))  # asked again: the user (or the batch system) insists

    # -- a search's questions --------------------------------------------------------------------------
    def request(self, why: str) -> None:
        """Stop for a reason of the program's own (a search: one of its trainings was interrupted)."""
        if self.requested is None:
            self.requested = why

    def reason(self, now: float) -> str | None:
        """Why to stop now (a signal, a request, the deadline less the safety margin), or None."""
        if self.signal_name:
            return f"signal {self.signal_name}"
        if self.requested:
            return self.requested
        if self.deadline is not None and now >= self.deadline - self.safety_s:
            return "deadline"
        return None

    def no_time_for(self, typical_s: float | None, now: float) -> bool:
        """A task of ``typical_s`` seconds started now would not end before the deadline."""
        return (self.deadline is not None and typical_s is not None
                and now + typical_s > self.deadline - self.safety_s)


class InjectedSignal:
    """Testing hook: SIGUSR1 to this process at the N-th event of its job (an update of a training's master:
    :data:`~nnlo.contract.ENV_TEST_SIGNAL_AT_UPDATE`; a trial result of a search's coordinator:
    :data:`~nnlo.contract.ENV_TEST_SIGNAL_AT_TRIAL`), N read from that environment variable (unset: never).

    Why: tests stop a run, or every job of a chain (a resumed job counts its own events), at an exact point
    through the real signal path, instead of hoping that a short walltime interrupts the work on a machine of
    unknown speed.
    """

    def __init__(self, var: str) -> None:
        raw = os.environ.get(var, "").strip()
        self.at = int(raw) if raw else None
        self.count = 0

    def tick(self) -> None:
        """One more event of this job; the N-th sends the signal."""
        self.count += 1
        if self.count == self.at:
            os.kill(os.getpid(), signal.SIGUSR1)
