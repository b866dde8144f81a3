"""Ask ahead: propose the next trial's point in a background thread while the blocks train.

Why: the coordinator is one process. A Gaussian-process ask costs ~0.1 s at 10 observations and ~12 s at
500 (``docs/performance.md``), and while it runs, a block that has just finished waits for its next trial.
When that wait becomes a noticeable part of a trial, the next point is computed *before* a block asks for
it: right after each hand-out, from the observations known then and with every running trial pending (so
told with the constant lie). The block that frees up next gets it at once; it is one result staler than a
point computed on demand, the usual price of asynchronous Bayesian optimization, so :class:`Search` only
asks ahead with several blocks and once an ask costs more than :data:`WORTH_IT` of a typical trial.

The thread works on a copy of the engine (its own list of observations), so the coordinator may tell the
engine new results meanwhile; the engine itself is touched again only after the thread is joined. The
proposal is the one the engine would make after the same events in that order (same random stream: the
engine's ask counter moves on when the point is used).
"""
from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Sequence

from nnlo.optimize.engines.base import Engine, Point

log = logging.getLogger("nnlo.optimize.ask_ahead")

#: ask ahead once an ask costs more than this fraction of the median trial duration
WORTH_IT = 0.02


class AskAhead:
    """At most one proposal under way; :meth:`take` waits for it and hands it over."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._thread: threading.Thread | None = None
        self._point: Point | None = None
        self._error: BaseException | None = None
        self.seconds: float | None = None  # how long the last proposal took

    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self, pending: Sequence[Point]) -> None:
        """Begin proposing the engine's next point with ``pending`` (the running trials) told as lies."""
        if self._thread is not None:
            raise RuntimeError("a proposal is already under way")
        snapshot = copy.copy(self.engine)  # shares the space and options, not the observations
        snapshot.observations = list(self.engine.observations)
        snapshot.variances = list(self.engine.variances)
        pending = list(pending)

        def work() -> None:
            t0 = time.perf_counter()
            try:
                self._point = snapshot.ask(pending)
            except BaseException as e:  # noqa: BLE001 - handed to the coordinator's thread in take()
                self._error = e
            self.seconds = time.perf_counter() - t0

        self._point, self._error = None, None
        self._thread = threading.Thread(target=work, name="nnlo-ask-ahead", daemon=True)
        self._thread.start()

    def take(self) -> Point:
        """The proposal (waiting for it if it is not ready); the engine's ask counter moves on as if asked."""
        thread, self._thread = self._thread, None
        if thread is None:
            raise RuntimeError("no proposal under way")
        thread.join()
        if self._error is not None:
            raise self._error
        assert self._point is not None
        self.engine.n_asked += 1
        return self._point

    def discard(self) -> None:
        """Wait for a proposal that will not be used (the budget is spent, the search stops)."""
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()


def worth_it(ask_s: float | None, trial_s: float | None, blocks: int) -> bool:
    """Ask ahead only where it pays: several blocks, and asks no longer negligible next to a trial."""
    return blocks > 1 and ask_s is not None and trial_s is not None and ask_s > WORTH_IT * trial_s


def describe(ask_s: float, trial_s: float) -> str:
    return (f"asks take {ask_s:.2f} s against {trial_s:.1f} s per trial: proposing each next point while "
            f"the blocks train")
