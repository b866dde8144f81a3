"""The stop question of code that trains by itself in a submitted job: ``nnlo.stop_requested()``.

``nnlo submit ... script FILE.py`` runs FILE.py in every job of a checkpoint-restart chain. The batch system
warns a job before its walltime with SIGUSR1/SIGUSR2, whose default action terminates a process with no
handler: a script that trained in its own loop was killed by the warning itself, and the chain took that for
a rank's death. The job's runner (``nnlo_sched.payload.run_script``) guards the script from its first line
(:func:`guard_script`):

* the warning is held, never fatal; the script's first question about its job (``nnlo.deadline()``,
  ``seconds_left()``, ``checkpointed()`` or ``stop_requested()``: :func:`nnlo.job.on_first_question`) installs
  :class:`nnlo.stop.Stop`, the handler the runtime's trainings and searches use (a warning held before is
  kept), and from then on :func:`stop_requested` answers;
* a script that never asks and is warned runs on to its deadline (``$NNLO_DEADLINE``), and is then ended with
  one line saying that it ignored the warning and exit 75, as a job stopped at its walltime: the chain's next
  job follows if the job saved a checkpoint (it cannot have: it never said so), else the chain stops with its
  "no new checkpoint" reason, never a rank death.

Stop signals other than the warning (SIGTERM, SIGINT) keep their default action until the script asks.
Outside a guarded script (``mpirun python FILE.py`` by hand), :func:`stop_requested` installs the handler on
its first call.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from types import FrameType
from typing import Self

from nnlo import job
from nnlo.config import deadline_from_env
from nnlo.contract import EXIT_RESUMABLE, STOP_SIGNALS
from nnlo.stop import Handler, Stop

__all__ = ["ScriptGuard", "guard_script", "stop_requested"]

#: the stop signals that warn of the walltime (the others, TERM and INT, end a script that never asked)
WARNINGS = tuple(s for s in STOP_SIGNALS if s in (signal.SIGUSR1, signal.SIGUSR2))
#: what a script that asks must do, said where one did not
HOW = ("ask nnlo.stop_requested() in its loop and, when it answers True, save its state, call "
       "nnlo.checkpointed(path) and exit with nnlo.EXIT_RESUMABLE (docs/chains.md, 'A script of your own')")

_stop: Stop | None = None
_guard: ScriptGuard | None = None


def stop_requested() -> bool:
    """Whether this job must save its state and stop now: a stop signal arrived (the batch system's warning
    before the walltime, its SIGTERM, ``nnlo cancel``/``preempt``, Ctrl-C), or the job's deadline
    (:func:`nnlo.deadline`) is less than its safety margin away (``$NNLO_DEADLINE_SAFETY``, default
    :data:`nnlo.contract.DEADLINE_SAFETY_S`). The first call installs the stop
    handler (main thread only), so a script that asks is never killed by the warning."""
    job.asked()
    stop = _installed()
    return stop.reason(time.time()) is not None


def _installed() -> Stop:
    """The script's :class:`~nnlo.stop.Stop`, installed on first use, with the warning the guard held."""
    global _stop
    if _stop is None:
        _stop = Stop(deadline_from_env()).install()
        held = _guard.signal_name if _guard is not None else None
        if held is not None and not _stop.raised:
            _stop.signal_name = held
    return _stop


class ScriptGuard:
    """Holds the walltime warning for a script until it asks (then the runtime's handler takes over), and ends
    a script that never asked at its deadline."""

    def __init__(self, deadline: float | None) -> None:
        self.deadline = deadline
        self.signal_name: str | None = None
        self.asked = False
        self._timer: threading.Timer | None = None
        self._previous: dict[signal.Signals, Handler] = {}

    def install(self) -> ScriptGuard:
        if threading.current_thread() is threading.main_thread():
            for sig in WARNINGS:
                self._previous[sig] = signal.signal(sig, self._held)
        job.on_first_question(self._first_question)
        return self

    def close(self) -> None:
        """Put back what :meth:`install` and the script's questions changed (a job's process ends anyway; a
        script run in a test's process must leave it as it was)."""
        global _stop, _guard
        if self._timer is not None:
            self._timer.cancel()
        job.forget_question(self._first_question)
        if _stop is not None:
            _stop.close()
            _stop = None
        for sig, handler in self._previous.items():
            if handler is not None:
                signal.signal(sig, handler)
        self._previous.clear()
        if _guard is self:
            _guard = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _first_question(self) -> None:
        self.asked = True
        if self._timer is not None:
            self._timer.cancel()
        if threading.current_thread() is not threading.main_thread():
            return
        # only over the guard's own handler: a training of nnlo.train inside the script has its own Stop
        if all(signal.getsignal(sig) == self._held for sig in WARNINGS):
            _installed()

    def _held(self, signum: int, frame: FrameType | None) -> None:
        if self.signal_name is not None:
            return
        self.signal_name = signal.Signals(signum).name
        if self.asked:
            return
        left = None if self.deadline is None else self.deadline - time.time()
        _say(f"received {self.signal_name}, the walltime warning: held for the script until it asks "
             f"nnlo.stop_requested(); one that never asks is ended at its deadline"
             + (f" (in {max(0, int(left))} s)" if left is not None else ""))
        if left is None:
            return  # no deadline: the batch system's SIGTERM at the limit ends it
        if left <= 0:
            self._at_deadline()
            return
        self._timer = threading.Timer(left, self._at_deadline)
        self._timer.daemon = True
        self._timer.start()

    def _at_deadline(self) -> None:
        if self.asked:
            return
        _say(f"the script ignored the walltime warning {self.signal_name} (it never asked nnlo.stop_requested(), "
             f"nnlo.seconds_left() or nnlo.deadline()): ended at its deadline as at the walltime (exit "
             f"{EXIT_RESUMABLE}); to continue in the next job, {HOW}")
        os._exit(EXIT_RESUMABLE)


def _say(text: str) -> None:
    sys.stdout.flush()
    sys.stderr.write(f"nnlo: {text}\n")
    sys.stderr.flush()


def guard_script() -> ScriptGuard:
    """Guard the script this process is about to run as a job (see the module's docstring), until the
    guard's ``close()`` (or the end of its ``with`` block)."""
    global _guard
    _guard = ScriptGuard(deadline_from_env()).install()
    return _guard
