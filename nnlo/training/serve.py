"""Serving one group of workers: the exchange loop of a parameter server, shared by masters and sub-masters.

Why a module of its own: what a master does with a worker's message (fold it into the central weights,
answer it, hold the worker at the epoch barrier, stop everyone, answer everyone with ``abort`` after a
failure) is the same whether it is the top of the run or a sub-master under an uber-master. What differs
is the part above the group: who keeps the epoch's figures, who judges the deadline, what happens at the
barrier, and who owns the checkpoint. :class:`WorkerServer` is the loop; :class:`~nnlo.training.master.Master`
and :class:`~nnlo.training.submaster.SubMaster` each supply that part through five methods:

==================================  ========================================================================
``_accounted(header, counted)``     keep what the part above needs of a worker's message
``_stop_wanted()``                  a reason to stop now (signal, deadline), or None
``_stop_checkpoint_dir()``          the folder a mid-epoch stop checkpoints into (None: no checkpoint)
``_decide_epoch()``                 at the barrier: the action for every worker and a checkpoint folder
``_complete_checkpoint(tmp, r)``    the workers ``r`` acknowledged their parts: finish this rank's share
==================================  ========================================================================

Epochs end with a barrier: a worker's last exchange of an epoch is flagged ``epoch_end`` and is answered
only once every worker got there. The barrier costs at most one chunk of idling per epoch and buys clean
semantics: "epoch N" means every training sample was used exactly once N times.

A stop in the middle of an epoch (deadline or signal) is answered to each worker at its next message with
"stop, checkpoint into DIR"; the checkpoint then holds every worker's exact data position.

Failures never hang the group: a worker that fails sends an ``error`` message; the server answers every
later message with ``abort`` (carrying the first failure) until no worker is left, then the role raises.
"""
from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from nnlo.algorithms import synchronous
from nnlo.algorithms.optimizers import FlatOptimizer, make_optimizer
from nnlo.backends.base import Backend
from nnlo.config import TrainConfig
from nnlo.contract import ENV_TEST_SIGNAL_AT_UPDATE
from nnlo.errors import TrainingError
from nnlo.observe.trace import get_tracer
from nnlo.stop import InjectedSignal
from nnlo.training import startup
from nnlo.training.buffers import CentralBuffers
from nnlo.training.context import RunContext
from nnlo.training.deadline import Deadline
from nnlo.training.failure import RankFailure, failure_line
from nnlo.training.modes import ServerRule, make_server_rule
from nnlo.training.validation import Validator, no_sums, split_range, validation_weight
from nnlo.transport import ANY, Link

log = logging.getLogger("nnlo.train")

#: builds the rule that folds messages into the center: (center, optimizer, config, number of workers)
RuleFactory = Callable[[np.ndarray, FlatOptimizer, TrainConfig, int], ServerRule]


class WorkerServer(ABC):
    """Serves the workers of ``ctx`` (its :attr:`~RunContext.worker_ranks`) with the central weights.

    Holds what every server has: the center and the rule applying updates to it, the epoch and update
    counters, the workers' buffers (:class:`CentralBuffers`), the deadline's timings, why it stopped and the
    first failure.
    """

    def __init__(self, ctx: RunContext, backend: Backend, rule: RuleFactory = make_server_rule) -> None:
        self.ctx, self.backend = ctx, backend
        cfg = self.cfg = ctx.config
        self.link = Link(ctx.comm, watchdog=ctx.watchdog, sleep=ctx.sleep_waits)
        self.workers = ctx.worker_ranks
        # framed: an exchange with a worker is one message each way (nnlo.transport.Link.frame)
        self.center = self.link.frame(backend.n_params)
        np.copyto(self.center, backend.get_weights())
        self.buf = self.link.frame(backend.n_params)
        self.optimizer = make_optimizer(cfg.optimizer)
        self.rule = rule(self.center, self.optimizer, cfg, len(self.workers))
        self.epoch = 0  # epochs completed
        self.updates = 0
        self.buffers = CentralBuffers(backend)
        self.deadline = Deadline(cfg.deadline, self.center.nbytes)
        self.injected = InjectedSignal(ENV_TEST_SIGNAL_AT_UPDATE)  # test hook: the real signal path
        self.stop_reason: str | None = None
        self.failure: RankFailure | None = None
        self._stop_tmp: Path | None = None  # the folder of a mid-epoch stop's checkpoint, once opened
        self._to_ack: list[int] = []  # the workers told to write into it
        self._dead: set[int] = set()  # workers that failed after acknowledging: they send no more
        self._updated_once = False  # for the start-up record (nnlo.training.startup)
        self._waiting: list[int] = []  # workers blocked on this rank's reply right now (they can validate)
        self._t_epoch = time.monotonic()  # when the current epoch began (its workers were released)

    # -- the part above the group ------------------------------------------------------------------
    @abstractmethod
    def _accounted(self, header: dict[str, Any], counted: bool) -> None:
        """A worker's message was folded in (``counted``: it was an update with samples)."""

    @abstractmethod
    def _stop_wanted(self) -> str | None:
        """Why to stop now (``"signal"``, ``"deadline"``), or None to go on."""

    @abstractmethod
    def _stop_checkpoint_dir(self) -> Path | None:
        """The folder the workers write into when stopping mid-epoch (opened once); None: no checkpoint."""

    @abstractmethod
    def _decide_epoch(self) -> tuple[str, Path | None]:
        """Every worker is at the barrier: ``(action, checkpoint folder or None)`` for all of them.

        The action is ``"continue"``, ``"stop"`` or ``"abort"`` (with :attr:`failure` set). An exception
        becomes this rank's failure, and every worker is answered ``abort``.
        """

    @abstractmethod
    def _complete_checkpoint(self, tmp: Path, ranks: list[int]) -> None:
        """``ranks`` were told to write their parts into ``tmp``: collect their acknowledgements, finish."""

    def _updated(self) -> None:
        """The center just took update number :attr:`updates` (the top of the tree validates every N)."""

    @property
    def run_workers(self) -> int:
        """The training's workers, under every master (an uber-master serves masters, not workers)."""
        return len(self.ctx.group.workers)

    # -- serving -----------------------------------------------------------------------------------
    def _what_trains(self) -> str:
        """The start of the first log line: who trains, how."""
        return (f"training {self.ctx.hierarchy.rank_map()}: {self.run_workers} worker(s), mode "
                f"{self.cfg.effective_mode}")

    def _begin(self) -> bool:
        """Log what is about to be trained; False, stopped as completed, when no epoch is left to train."""
        cfg = self.cfg
        log.info("%s, %d epoch(s), batch %d, %s", self._what_trains(), cfg.epochs, cfg.batch, self.deadline.describe())
        if self.epoch >= cfg.epochs:
            self.stop_reason = "completed"
            log.info("the restored run has already done %d of %d epochs; nothing to train", self.epoch, cfg.epochs)
            return False
        return True

    def serve(self) -> bool:
        """Serve until the training stops or fails; True when it then completed a mid-epoch stop's checkpoint."""
        self._t_epoch = time.monotonic()
        if self.cfg.synchronous:
            self._serve_synchronous()
        else:
            self._serve_async()
        if self._stop_tmp is None:
            return False
        tmp, self._stop_tmp = self._stop_tmp, None
        self._complete_checkpoint(tmp, self._to_ack)
        return True

    def _serve_async(self) -> None:
        active, parked = set(self.workers), set[int]()
        replies: dict[int, np.ndarray | None] = {}
        tracer = get_tracer()
        while active:
            src, hdr, arr = self.link.recv(ANY, out=self.buf)
            kind = hdr.get("kind")
            if kind == "error":
                self._record_failure(hdr, src)
            if self.failure is not None:
                self._reply(src, "abort")  # to a failed worker too: it learns which failure came first
                active.discard(src)
                for p in list(parked):
                    self._reply(p, "abort")
                active -= parked
                parked.clear()
                continue
            if kind == "pull":
                self._reply(src, "continue", self.rule.on_pull())
                continue
            if kind != "update" or arr is None:
                raise TrainingError(f"unexpected message {kind!r} from rank {src}")
            with tracer.span("apply update", "compute"):
                out = self.rule.on_update(hdr, arr)
            self._account(hdr)
            if self.stop_reason is not None:  # deadline or signal: stop everyone now, mid-epoch if need be
                tmp = self._stop_checkpoint_dir()
                self._reply(src, "stop", out, checkpoint=tmp)
                self._to_ack.append(src)
                for p in sorted(parked):
                    self._reply(p, "stop", replies.pop(p, self.center), checkpoint=tmp)
                    self._to_ack.append(p)
                active -= parked | {src}
                parked.clear()
            elif hdr.get("epoch_end"):
                parked.add(src)
                if out is not None:
                    replies[src] = out.copy() if self.rule.snapshot_reply else out
                else:
                    replies[src] = None
                if parked == active:
                    self._end_epoch(sorted(parked), replies)
                    if self.stop_reason is not None or self.failure is not None:
                        active.clear()
                    parked.clear()
                    replies.clear()
            else:
                self._reply(src, "continue", out)

    def _serve_synchronous(self) -> None:
        acc = np.zeros_like(self.center)
        workers = list(self.workers)
        tracer = get_tracer()
        while True:
            acc.fill(0.0)
            total = 0
            ends: list[bool] = []
            headers = []
            for w in workers:
                _, hdr, arr = self.link.recv(w, out=self.buf)
                if hdr.get("kind") == "error":
                    self._record_failure(hdr, w)
                    continue
                headers.append(hdr)
                n = int(hdr.get("samples", 0))
                if n and arr is not None and self.failure is None:
                    with tracer.span("accumulate update", "compute"):
                        acc += arr * np.float32(n)  # sample-weighted: equals one step on the joint batch
                    total += n
                ends.append(bool(hdr.get("epoch_end")))
            if self.failure is not None:
                for w in workers:  # failed workers too: they learn which failure came first
                    self._reply(w, "abort")
                return
            self._waiting = workers  # every worker waits for this round's reply: they validate with us
            if total:
                with tracer.span("apply update", "compute"):
                    synchronous.scale_in_place(acc, total)
                    self.rule.on_update({"samples": total}, acc)
            for hdr in headers:
                self._account(hdr, count_update=False)
            self._count_update()
            if self.failure is not None:  # a validation shared with the workers (--validate-every) failed
                for w in workers:
                    self._reply(w, "abort")
                return
            self._check_stop()
            if any(ends) and not all(ends):
                raise TrainingError("workers disagree on the end of the epoch; their data shards differ")
            self._waiting = []
            if all(ends):
                self._end_epoch(workers, {w: self.center for w in workers})
                if self.stop_reason is not None or self.failure is not None:
                    return
            elif self.stop_reason is not None:
                tmp = self._stop_checkpoint_dir()
                for w in workers:
                    self._reply(w, "stop", None, checkpoint=tmp)
                    self._to_ack.append(w)
                return
            else:
                for w in workers:
                    self._reply(w, "continue", self.center)

    # -- bookkeeping -------------------------------------------------------------------------------
    def _account(self, hdr: dict[str, Any], count_update: bool = True) -> None:
        if hdr.get("buffers") is not None:
            self.buffers.collect(hdr["buffers"])
        if hdr.get("seconds"):
            self.deadline.note_round(float(hdr["seconds"]))
        counted = count_update and bool(hdr.get("samples", 0))
        if counted:
            self._count_update()
        if hdr.get("stop_requested") and self.stop_reason is None and not self.ctx.stop.raised:
            self.stop_reason = "signal"  # a signal that reached the worker only (one this rank got: _check_stop)
            log.warning("a worker received %s: stopping with a checkpoint", hdr.get("stop_requested"))
        self._check_stop()
        self._accounted(hdr, counted)

    def _count_update(self) -> None:
        self.updates += 1
        if not self._updated_once:  # training (re)started: the start-up breakdown is complete
            self._updated_once = True
            if self.ctx.rank == self.ctx.group.top:
                startup.mark("first_update")
                startup.write(self.ctx.out_dir)
        self._updated()
        self.injected.tick()

    def _check_stop(self) -> None:
        if self.stop_reason is None:
            self.stop_reason = self._stop_wanted()

    # -- the epoch barrier -------------------------------------------------------------------------
    def _end_epoch(self, parked: list[int], replies: dict[int, np.ndarray | None]) -> None:
        """All workers are at the barrier: decide, release them, then complete a checkpoint if one is due."""
        self._waiting = list(parked)
        try:
            action, tmp = self._decide_epoch()
        except Exception as e:  # noqa: BLE001 - report it to every worker instead of hanging them
            self._fail_here(e)
            action, tmp = "abort", None
        finally:
            self._waiting = []
        if action == "abort":
            for p in parked:
                self._reply(p, "abort")
            return
        for p in parked:
            self._reply(p, action, replies.get(p), checkpoint=tmp)
        self._t_epoch = time.monotonic()
        if tmp is not None:
            self._complete_checkpoint(tmp, parked)
            if self.failure is not None and action == "continue":
                self._drain([p for p in parked if p not in self._dead])

    # -- distributed validation --------------------------------------------------------------------
    def _spread_validation(self, validator: Validator, weights: np.ndarray, buffers: np.ndarray | None,
                           lo: int, hi: int) -> np.ndarray:
        """The validation :data:`~nnlo.training.validation.SUMS` of ``weights`` over positions ``[lo, hi)``,
        evaluated by this rank together with the workers waiting for its reply (:attr:`_waiting`).

        Each waiting worker is sent ``validate`` with its range, ``weights`` (one contiguous tensor) and
        ``buffers`` (the model buffers to judge with); it answers ``val`` with its sums, or ``error`` when its
        evaluation failed. Every answer is collected before this returns or raises, so nobody is left
        waiting: a worker's failure is recorded and raised as :attr:`failure` (the caller answers everyone
        ``abort``), this rank's own error is raised as it is.
        """
        helpers = list(self._waiting)
        shares = split_range(lo, hi, [1] + [validation_weight(self.ctx.hierarchy, r) for r in helpers])
        request: dict[str, Any] = {"kind": "reply", "action": "validate"}
        if buffers is not None:
            request["buffers"] = buffers
        for r, (a, b) in zip(helpers, shares[1:], strict=True):
            self.link.send(r, dict(request, range=[a, b]), weights)
        total, own_error = no_sums(), None
        try:
            total += validator.sums_with(self.backend, weights, buffers, *shares[0])
        except Exception as e:  # noqa: BLE001 - collect the others' answers first, then fail
            own_error = e
        for r in helpers:
            _, hdr, _ = self.link.recv(r, out=self.buf)
            kind = hdr.get("kind")
            if kind == "error":
                self._record_failure(hdr, r)
            elif kind == "val":
                total += np.asarray(hdr["sums"], dtype=np.float64)
            else:
                raise TrainingError(f"unexpected message {kind!r} from rank {r} while validating")
        if own_error is not None:
            raise own_error
        if self.failure is not None:
            raise self.failure
        return total

    def _collect_acks(self, ranks: list[int]) -> list[tuple[int, str]]:
        """Wait for the checkpoint acknowledgement of each of ``ranks``; the ``(rank, error)`` of those that failed."""
        errors = [(r, self.link.recv_ack(r)) for r in ranks]
        bad = [(r, e) for r, e in errors if e]
        self._dead.update(r for r, _ in bad)  # they raised after acknowledging; they send no more
        return bad

    # -- failures ----------------------------------------------------------------------------------
    def _record_failure(self, hdr: dict[str, Any], src: int) -> None:
        if self.failure is None:
            self.failure = RankFailure.from_dict(hdr["failure"], report=False)
            log.debug("rank %d failed: %s", src, self.failure)

    def _fail_here(self, exc: BaseException) -> None:
        if self.failure is None:
            message, code = failure_line(exc, log, "failed")
            self.failure = RankFailure(message, self.ctx.rank, self.ctx.role_label, exit_code=code, report=True)

    def _drain(self, ranks: list[int]) -> None:
        """After a failure, answer the next message of each of ``ranks`` with abort (so none waits)."""
        for r in ranks:
            self.link.recv(r, out=self.buf)
            self._reply(r, "abort")

    def _reply(self, dest: int, action: str, array: np.ndarray | None = None, checkpoint: Any = None) -> None:
        header: dict[str, Any] = {"kind": "reply", "action": action}
        if checkpoint is not None:
            header["checkpoint"] = str(checkpoint)
        if action == "abort":
            header["failure"] = self.failure.to_dict() if self.failure else None
            array = None
        self.link.send(dest, header, array)
