"""A training group of one rank (``nnlo train -n 1``, ``nnlo optimize --block-size 1``): it trains alone.

There is nobody to exchange with, so the rank is its own master: :class:`Solo` is the
:class:`~nnlo.training.master.Master` (figures of the epoch, deadline, stop signals, validation, history, early
stopping and callbacks, checkpoints, the final model) around a :class:`~nnlo.training.worker.Worker` (the
training loop: its shard, ``sync_every`` batches at a time, the data position, its checkpoint part) in the same
process. Where a worker would send its master a message and wait for the reply, the solo worker calls
:meth:`Solo.exchange`: the master's bookkeeping of one message, with no message and no copy of the weights.

The model the master validates, checkpoints and saves is the one the worker trains, with ``--worker-optimizer``:
Downpour, EASGD, GEM and the synchronous mean combine the work of several workers and do not apply to one (with
one worker and the default ``--optimizer sgd:lr=1`` Downpour and the synchronous mean are this training exactly).
Upstream's single-process worker trained the same way.

Checkpoints are those of a master with one worker (``master.pkl`` with the weights, ``worker-0.pkl`` with the
optimizer, data position and random states), so a one-rank run restores the checkpoints of a master and its
workers and the other way round, as runs with different worker counts do.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from nnlo import checkpoint as ckpt
from nnlo.backends.base import Backend
from nnlo.training.context import RunContext
from nnlo.training.failure import RankFailure
from nnlo.training.history import TrainResult
from nnlo.training.master import Master
from nnlo.training.modes import WorkerRule
from nnlo.training.validation import Validator
from nnlo.training.worker import Worker


class Alone(WorkerRule):
    """The worker side of a solo rank: it starts from the given weights and exchanges nothing."""

    def __init__(self, backend: Backend) -> None:  # no exchange buffers: nothing travels
        self.backend = backend
        self.validate = None

    def start(self, center: np.ndarray) -> None:
        self.backend.set_weights(center)

    def exchange(self, header: dict[str, Any]) -> dict[str, Any]:  # pragma: no cover - SoloWorker never asks
        raise NotImplementedError("a solo rank has nobody to exchange with")


class SoloWorker(Worker):
    """The worker's loop, whose exchanges are calls into its own rank's :class:`Solo`."""

    solo: Solo

    def _exchange(self, header: dict[str, Any]) -> dict[str, Any]:
        return self.solo.exchange(header)

    def _report(self, exc: BaseException) -> NoReturn:
        raise self.solo.failed(exc)


class Solo(Master):
    """The master's part of a one-rank training, fed by the :class:`SoloWorker` that trains in this process."""

    def __init__(self, ctx: RunContext, backend: Backend, validator: Validator | None, worker: SoloWorker,
                 restored: dict[str, Any] | None = None) -> None:
        super().__init__(ctx, backend, validator, restored=restored)
        self.worker = worker
        worker.solo = self
        self._stopped_mid_epoch = False  # a deadline or signal stopped it mid-epoch, with a checkpoint

    def failed(self, exc: BaseException) -> RankFailure:
        """This rank's failure (the first one): its one line, and its traceback in the rank's log."""
        self._fail_here(exc)
        assert self.failure is not None
        return self.failure

    # -- the model is the worker's: read it where the master reads its center ------------------------------
    def _sync(self) -> None:
        self.backend.weights_into(self.center)
        if self.buffers.values is not None:
            np.copyto(self.buffers.values, self.backend.get_buffers())

    def _validate(self) -> dict[str, float]:
        self._sync()
        return super()._validate()

    def state_dict(self) -> dict[str, Any]:
        self._sync()
        return super().state_dict()

    def _result(self) -> TrainResult:
        self._sync()
        return super()._result()

    # -- serving: the worker's loop, in this process ---------------------------------------------------
    def _what_trains(self) -> str:
        return (f"training alone (1 rank, no master: the {self.cfg.effective_mode} exchange needs several "
                f"workers), worker optimizer {self.cfg.worker_optimizer_spec}")

    def serve(self) -> bool:
        """Train until the run stops; True when a mid-epoch stop's checkpoint was completed."""
        self._t_epoch = time.monotonic()
        self.worker.run()
        return self._stopped_mid_epoch

    def exchange(self, header: dict[str, Any]) -> dict[str, Any]:
        """What the master does with one worker message, for the worker of this rank: the reply header.

        A failure here (a validation, a callback, a checkpoint) is this rank's: raised as its
        :class:`RankFailure` (one line), never past the training (a search records a failed trial)."""
        try:
            return {"kind": "reply", "action": self._take(header)}
        except RankFailure:
            raise
        except Exception as e:  # noqa: BLE001 - this rank's failure, in one line
            raise self.failed(e) from None

    def _take(self, header: dict[str, Any]) -> str:
        header = dict(header)
        header.pop("stop_requested", None)  # this rank's own stop signal: the master part sees it itself
        if header.get("epoch_end") and self.backend.n_buffers:
            header["buffers"] = self.backend.get_buffers()
        self._account(header)
        if self.stop_reason is not None:  # deadline or signal: stop here, mid-epoch if need be
            tmp = self._stop_checkpoint_dir()
            self._stop_tmp = None
            if tmp is not None:
                self._checkpoint(tmp)
                self._stopped_mid_epoch = True
            return "stop"
        if not header.get("epoch_end"):
            return "continue"
        action, tmp = self._decide_epoch()
        self._t_epoch = time.monotonic()
        if tmp is not None:
            self._checkpoint(tmp)
        return action

    def _checkpoint(self, tmp: Path) -> None:
        """Write the worker's part, then the master's, and publish: the round a master runs with one worker."""
        try:
            ckpt.write_part(tmp, ckpt.part_name("worker", self.worker.index), self.worker.state_dict())
        except Exception:
            self.checkpoints.abandon(tmp)
            raise
        self._complete_checkpoint(tmp, [])
        if self.failure is not None:
            raise self.failure
