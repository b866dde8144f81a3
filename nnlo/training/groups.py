"""All-reduce worker groups (``--n-processes K > 1``): K ranks act as one worker towards their master.

Each member reads its own slice of every batch (the logical worker's batch is ``K x --batch`` samples,
:func:`nnlo.data.split_batch`, so members never read the same sample), computes the gradient of its slice,
and the group sums ``count x gradient`` plus the scalars (count, loss sum, correct, a stop/fail vote) in
*one* all-reduce of one flat buffer; every member divides by the total and applies the same step. The
members' replicas stay identical, so the group is exactly one worker with a K-times larger batch.

Only the leader (member 0) talks to the master; after each exchange it broadcasts the master's reply
header (small, pickled) and its resulting weights (one ``Bcast`` of the flat buffer) to the members. Only
the leader writes the worker's checkpoint part: the members' optimizer state is the leader's; their random
streams are their own, so the part keeps every member's (:mod:`nnlo.training.streams`).

A member whose step fails votes "failed" in the same all-reduce; the leader forwards the first failure to
the master (which stops the other workers), and every member raises the same
:class:`~nnlo.training.failure.RankFailure`, printed once by the rank that failed.
"""
from __future__ import annotations

import logging
import math
import time
from typing import Any

import numpy as np

from nnlo.allreduce import Engine, make_engine
from nnlo.allreduce.bucketed import BucketedReducer, make_reducer
from nnlo.errors import TrainingError
from nnlo.observe.trace import get_tracer
from nnlo.training import streams
from nnlo.training.failure import RankFailure, describe_exception, failure_line
from nnlo.training.validation import SUMS, split_range
from nnlo.training.voted_step import EXTRA, allreduce_step
from nnlo.training.worker import Worker

log = logging.getLogger("nnlo.worker")



def split_worker_groups(comm: Any, hierarchy: Any) -> Any:
    """Collective over the training group: each logical worker's communicator (None on other ranks)."""
    from mpi4py import MPI  # lazy: importing mpi4py.MPI initialises MPI

    color = hierarchy.colors(comm.Get_rank())["worker"]
    sub = comm.Split(MPI.UNDEFINED if color is None else color, comm.Get_rank())
    return None if sub == MPI.COMM_NULL else sub


class GroupWorker(Worker):
    """A member of an all-reduce worker group (the leader is also the group's worker towards the master)."""

    def __init__(self, *args: Any, engine_name: str = "mpi", device: str = "cpu", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.group_comm = self.ctx.worker_comm
        assert self.group_comm is not None
        self.member = self.group_comm.Get_rank()
        self.leader = self.member == 0
        self.streams_index = self.member  # the leader's part keeps every member's streams (_write_part)
        self.engine_name, self.device = engine_name, device
        self.engine: Engine | None = None
        self.reducer: BucketedReducer | None = None
        n = self.n = self.backend.n_params
        self.buf: Any = None  # the step buffer, where the engine sums (run())
        self.weights = self.backend.host_buffer(n)

    # -- main loop ---------------------------------------------------------------------------------
    def run(self) -> None:
        with self.ctx.watchdog.waiting("agreeing on the group's all-reduce engine"):
            self.engine_name = self.group_comm.bcast(self.engine_name, root=0)  # the leader's choice
            self.engine = make_engine(self.engine_name, self.group_comm, self.device)
        self.buf = self.engine.zeros(self.n + EXTRA)
        self.reducer = make_reducer(self.engine, self.backend, self.buf, self.cfg.bucket_mb)
        try:
            super().run()  # the worker's loop; chunks and exchanges are the group's (below)
        finally:
            if self.reducer is not None:
                self.reducer.close()
            self.engine.close()
            self.group_comm.Free()

    def _train_chunk(self, chunk: list[np.ndarray]) -> dict[str, Any]:
        t0 = time.monotonic()
        samples, loss_sum, correct, stop = 0.0, 0.0, None, False
        for b, idx in enumerate(chunk):
            total, lsum, corr, has_correct, vote = self._group_step(idx, b)
            samples += total
            loss_sum += lsum
            if has_correct:
                correct = (correct or 0.0) + corr
            stop = stop or vote > 0
        header: dict[str, Any] = {"samples": round(samples), "loss_sum": loss_sum, "correct": correct,
                                  "seconds": time.monotonic() - t0}
        header["stop_requested"] = (self.ctx.stop.signal_name or "a signal on a group member") if stop else None
        return header

    def _group_step(self, idx: np.ndarray, b: int) -> tuple[float, float, float, bool, float]:
        sums = allreduce_step(self.ctx, self.engine, self.backend, self.loader, self.buf, idx,
                              stop_wanted=self.ctx.stop.raised, label="group", reducer=self.reducer)
        if sums.failed:
            self._fail_group(sums.error)
        if sums.total > 0:
            with get_tracer().span("apply gradients", "compute"):
                self.backend.apply_gradients(self.buf[:self.n])
            loss = sums.loss_sum / sums.total
            if not math.isfinite(loss):
                self._fail_group(None if not self.leader else describe_exception(TrainingError(
                    f"loss is {loss} at epoch {self.epoch + 1}, batch {self.batch + b + 1}; lower the learning "
                    f"rate (--worker-optimizer/--gem-lr) or check the data for NaN/inf")))
        return sums.total, sums.loss_sum, sums.correct, sums.has_correct, sums.vote

    # -- the leader speaks for the group -----------------------------------------------------------
    def _exchange(self, header: dict[str, Any]) -> dict[str, Any]:
        reply = self.rule.exchange(header) if self.leader else None
        with self.ctx.watchdog.waiting("waiting for the group leader's reply from the master"):
            reply = self.group_comm.bcast(reply, root=0)
        while not self.leader and reply.get("action") == "validate":  # the leader shares a validation first
            self._group_validate(reply, self.weights)
            with self.ctx.watchdog.waiting("waiting for the group leader's reply from the master"):
                reply = self.group_comm.bcast(None, root=0)
        if reply.get("action") != "abort":
            if self.leader:
                self.backend.weights_into(self.weights)
            self.engine.broadcast(self.weights, root=0)  # type: ignore[union-attr]
            if not self.leader:
                self.backend.set_weights(self.weights)
        return reply

    # -- validation: the leader's share, split over the members -----------------------------------
    def _validate_share(self, request: dict[str, Any], weights: np.ndarray) -> np.ndarray:
        """The leader got a ``validate`` request for the group: hand it to the members (waiting in
        :meth:`_exchange`) and evaluate it together."""
        with self.ctx.watchdog.waiting("handing the validation request to the group"):
            self.group_comm.bcast(request, root=0)
        return self._group_validate(request, weights)

    def _group_validate(self, request: dict[str, Any], weights: np.ndarray) -> np.ndarray:
        """Every member: take the leader's ``weights``, evaluate an equal part of the group's range, and sum
        the parts (a failure anywhere fails the whole group, as in a training step)."""
        from mpi4py import MPI  # lazy: importing mpi4py.MPI initialises MPI

        with self.ctx.watchdog.waiting("waiting for the weights to validate"):
            self.engine.broadcast(weights, root=0)  # type: ignore[union-attr]
        lo, hi = (int(v) for v in request["range"])
        a, b = split_range(lo, hi, [1] * self.group_comm.Get_size())[self.member]
        sums = np.zeros(len(SUMS) + 1, dtype=np.float64)  # the last: failed members
        error: tuple[str, int] | None = None
        try:
            if self.validator is None:
                raise TrainingError("asked for a validation share but this rank has no validation data")
            sums[:len(SUMS)] = self.validator.sums_with(self.backend, weights, request.get("buffers"), a, b)
        except Exception as e:  # noqa: BLE001 - the whole group fails together (the log: the traceback)
            error = failure_line(e, log, "validation share failed")
            sums[:] = 0.0
            sums[-1] = 1.0
        with self.ctx.watchdog.waiting("adding up the group's validation sums"):
            self.group_comm.Allreduce(MPI.IN_PLACE, [sums, MPI.DOUBLE], op=MPI.SUM)
        if sums[-1] > 0:
            self._fail_group(error)
        return sums[:len(SUMS)]

    def _fail_group(self, error: tuple[str, int] | None) -> None:
        errors = self.group_comm.allgather(None if error is None else
                                           (error[0], error[1], self.ctx.rank, self.ctx.role_label))
        first = next(e for e in errors if e is not None)
        failure = RankFailure(first[0], first[2], first[3], exit_code=first[1], report=False)
        if self.leader:  # tell the master; it answers with the training's first failure
            link, master = self.rule.link, self.rule.master
            link.send(master, {"kind": "error", "failure": failure.to_dict()})
            _, reply, _ = link.recv(master)
            data = reply.get("failure") or failure.to_dict()
        else:
            data = None
        data = self.group_comm.bcast(data, root=0)
        raise RankFailure.from_dict(data, report=data.get("rank") == self.ctx.rank) from None

    def _write_part(self, directory: str) -> None:
        """Collective over the group: the leader writes the logical worker's part (the members' weights and
        optimizer are the leader's), with every member's own random streams (their dropout differs)."""
        members = streams.gather(self.group_comm, self.backend, self.ctx.watchdog)
        if self.leader:  # one part per logical worker
            self._write_state(directory, dict(self.state_dict(), rng=members))

