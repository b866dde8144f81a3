"""When to stop early and save: a walltime deadline.

Why: a batch job that is killed at its walltime loses everything since its last checkpoint, and chained jobs
(``nnlo submit --chain``) only resume cleanly from a *fresh complete* checkpoint. So the runtime knows its
deadline (``--deadline`` / ``NNLO_DEADLINE``, unix seconds) and stops early enough to write one: the margin
is the last checkpoint's duration (an estimate before the first one) times 1.5, plus the slowest recent
exchange round and validation, plus a fixed safety (``NNLO_DEADLINE_SAFETY``, default
:data:`nnlo.contract.DEADLINE_SAFETY_S`; :func:`nnlo.config.deadline_safety_from_env`).

The signals batch systems send before the end (and Ctrl-C) are caught by :class:`nnlo.stop.Stop`, which
the training installs for as long as it runs.

Testing hook: ``NNLO_TEST_SIGNAL_AT_UPDATE=N`` makes the master (an all-reduce run's rank 0) send itself
``SIGUSR1`` after the N-th update of its job (:class:`nnlo.stop.InjectedSignal`), so tests can interrupt a run at
an exact, reproducible point through the real signal path.
"""
from __future__ import annotations

import time

from nnlo.config import deadline_safety_from_env


class Deadline:
    """Decides whether the time left before ``deadline`` is only enough to write a checkpoint."""

    def __init__(self, deadline: float | None, model_bytes: int = 0, safety: float | None = None) -> None:
        self.deadline = deadline
        self.safety = deadline_safety_from_env() if safety is None else safety
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

