"""When to stop early and save: a walltime deadline, and the signals batch systems send before the end.

Why: a batch job that is killed at its walltime loses everything since its last checkpoint, and chained jobs
(``nnlo submit --chain``) only resume cleanly from a *fresh complete* checkpoint. So the runtime knows its
deadline (``--deadline`` / ``NNLO_DEADLINE``, unix seconds) and stops early enough to write one: the margin
is the last checkpoint's duration (an estimate before the first one) times 1.5, plus the slowest recent
exchange round and validation, plus a fixed safety (``NNLO_DEADLINE_SAFETY``, default 10 s).

``SIGUSR1``, ``SIGUSR2`` (LSF's pre-walltime warning, Slurm ``--signal``) and ``SIGTERM`` (Slurm at the
limit, ``scancel``) mean "checkpoint now and stop". A second ``SIGTERM`` ends the rank at once.

Testing hook: ``NNLO_TEST_SIGNAL_AT_UPDATE=N`` makes the master send itself ``SIGUSR1`` after its N-th
update, so tests can interrupt a run at an exact, reproducible point through the real signal path.
"""
from __future__ import annotations

import logging
import os
import signal
import threading
import time
from types import FrameType
from typing import Any

log = logging.getLogger("nnlo.deadline")

STOP_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM)


class StopFlag:
    """Set by a stop signal; installed for the duration of a training (handlers restored at close)."""

    def __init__(self) -> None:
        self.signal_name: str | None = None
        self._previous: dict[int, Any] = {}

    @property
    def raised(self) -> bool:
        return self.signal_name is not None

    def install(self) -> "StopFlag":
        if threading.current_thread() is not threading.main_thread():
            log.debug("not in the main thread: stop signals are not handled by this training")
            return self
        for sig in STOP_SIGNALS:
            try:
                self._previous[sig] = signal.signal(sig, self._handle)
            except (ValueError, OSError):  # pragma: no cover - platform without the signal
                pass
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.signal_name is not None and signum == signal.SIGTERM:
            os._exit(128 + signum)  # second SIGTERM: the user (or the batch system) insists
        if self.signal_name is None:
            self.signal_name = name
            log.warning("received %s: will write a checkpoint and stop", name)

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            try:
                signal.signal(sig, handler)
            except (ValueError, OSError):  # pragma: no cover
                pass
        self._previous.clear()


class Deadline:
    """Decides whether the time left before ``deadline`` is only enough to write a checkpoint."""

    def __init__(self, deadline: float | None, model_bytes: int = 0, safety: float | None = None) -> None:
        self.deadline = deadline
        self.safety = float(os.environ.get("NNLO_DEADLINE_SAFETY", "10")) if safety is None else safety
        # Before the first checkpoint: several copies of the model at a conservative 100 MB/s, plus 1 s.
        self.checkpoint_s = 1.0 + 4 * model_bytes / 100e6
        self.round_s = 0.0
        self.validate_s = 0.0

    def note_checkpoint(self, seconds: float) -> None:
        self.checkpoint_s = seconds

    def note_round(self, seconds: float) -> None:
        self.round_s = max(seconds, 0.5 * self.round_s)  # follows slowdowns at once, speedups slowly

    def note_validation(self, seconds: float) -> None:
        self.validate_s = seconds

    @property
    def margin(self) -> float:
        return 1.5 * self.checkpoint_s + 2 * self.round_s + self.validate_s + self.safety

    def reached(self, now: float | None = None) -> bool:
        if self.deadline is None:
            return False
        return (time.time() if now is None else now) + self.margin >= self.deadline

    def describe(self) -> str:
        if self.deadline is None:
            return "no deadline"
        left = self.deadline - time.time()
        return f"deadline in {left:.0f} s (stop margin {self.margin:.1f} s)"


def injected_signal_update() -> int | None:
    """The update count after which the master signals itself (``NNLO_TEST_SIGNAL_AT_UPDATE``), or None."""
    raw = os.environ.get("NNLO_TEST_SIGNAL_AT_UPDATE")
    return int(raw) if raw else None
