"""What one exchange between a worker and its master means, per algorithm (both sides side by side).

Every algorithm is a pair: the worker's side (what it sends after ``sync_every`` local batches and what it
does with the reply) and the master's side (how it folds a message into the central weights and what it
answers). The arithmetic itself lives in :mod:`nnlo.algorithms`; this module only wires it to messages.

==========  =====================================  ==========================================  ============
mode        worker sends                           master does                                 reply
==========  =====================================  ==========================================  ============
downpour    delta = w - w0                         master optimizer step with -delta            center
easgd       its weights w                          w_m += alpha (w - w_m)                      old center
gem         pull; then pi * (w - w0) (rescaled)    pull: nothing; update: add like downpour    center; none
sync        delta (as downpour)                    sample-weighted mean of all deltas, then    center
                                                   one master optimizer step
==========  =====================================  ==========================================  ============

The synchronous round itself (waiting for everyone) is the master's loop, see :mod:`nnlo.training.master`.

In every mode, a worker's last update of an epoch also carries its model's buffers (BatchNorm running
statistics, :meth:`nnlo.backends.base.Backend.get_buffers`); the master averages them into its own model.
The master may answer that update first with ``validate`` (a range of the validation samples and the
central weights and buffers); the worker evaluates that share (:attr:`WorkerRule.validate`), answers ``val``
with its sums, and then receives the real reply (:mod:`nnlo.training.validation`).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from nnlo.algorithms import downpour, easgd, gem
from nnlo.algorithms.optimizers import FlatOptimizer
from nnlo.backends.base import Backend
from nnlo.config import TrainConfig
from nnlo.errors import TrainingError
from nnlo.transport import Link


# ------------------------------------------------------------------------------------------------------
# worker side
# ------------------------------------------------------------------------------------------------------
class WorkerRule:
    """Base worker side: holds the weights the worker started its current chunk from (``w0``)."""

    def __init__(self, backend: Backend, config: TrainConfig, n_workers: int, link: Link, master: int) -> None:
        self.backend, self.config, self.n_workers = backend, config, n_workers
        self.link, self.master = link, master
        n = backend.n_params
        self.w0 = np.zeros(n, dtype=np.float32)
        # what travels: framed (one message with its header, nnlo.transport.Link.frame), in page-locked memory
        # when the model is on a GPU (full-speed copies to and from it)
        self.send_buf = link.frame(n, backend.host_buffer)
        self.recv_buf = link.frame(n, backend.host_buffer)
        #: evaluates a share of a validation the master asked for: (request header with ``range`` and
        #: ``buffers``, the weights to judge) -> the share's sums; set by the worker that owns this rule
        self.validate: Callable[[dict[str, Any], np.ndarray], np.ndarray] | None = None

    def start(self, center: np.ndarray) -> None:
        """Begin from the master's weights."""
        self.backend.set_weights(center)
        np.copyto(self.w0, center)

    def exchange(self, header: dict[str, Any]) -> dict[str, Any]:
        """Send this chunk's contribution, apply the reply; returns the reply header (action, ...)."""
        raise NotImplementedError

    def _round_trip(self, header: dict[str, Any], array: np.ndarray | None) -> tuple[dict[str, Any], np.ndarray | None]:
        if header.get("epoch_end") and header.get("kind") == "update" and self.backend.n_buffers:
            header = dict(header, buffers=self.backend.get_buffers())
        self.link.send(self.master, header, array)
        _, reply, arr = self.link.recv(self.master, out=self.recv_buf)
        while reply.get("action") == "validate":  # the master shares a validation first (epoch end)
            if self.validate is None or arr is None:
                raise TrainingError(f"rank {self.master} asked for a validation this worker cannot do")
            sums = self.validate(reply, arr)
            self.link.send(self.master, {"kind": "val", "sums": [float(v) for v in sums]})
            _, reply, arr = self.link.recv(self.master, out=self.recv_buf)
        return reply, arr

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


class DownpourWorker(WorkerRule):
    def exchange(self, header: dict[str, Any]) -> dict[str, Any]:
        self.backend.weights_into(self.send_buf)
        downpour.worker_delta(self.send_buf, self.w0, out=self.send_buf)
        reply, center = self._round_trip(dict(header, kind="update"), self.send_buf)
        if center is not None:
            self.start(center)
        return reply


class EasgdWorker(WorkerRule):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.alpha = easgd.alpha(self.config.elastic_force, self.n_workers)
        self.scratch = np.empty_like(self.w0)

    def exchange(self, header: dict[str, Any]) -> dict[str, Any]:
        w = self.send_buf
        self.backend.weights_into(w)
        reply, center = self._round_trip(dict(header, kind="update"), w)
        if center is not None:  # the master received w before it replied: it may change now
            easgd.worker_update(w, center, self.alpha, self.scratch)
            self.backend.set_weights(w)
        return reply

    def state_dict(self) -> dict[str, Any]:
        return {"weights": self.backend.get_weights()}  # EASGD workers keep their own weights

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "weights" in state:
            self.backend.set_weights(np.asarray(state["weights"], dtype=np.float32))


class GemWorker(WorkerRule):
    """Pull the center, rescale the local update by GEM against the center's motion, commit it."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        c = self.config
        self.gem = gem.GEMState(self.backend.n_params, c.gem_lr, c.gem_momentum, c.gem_kappa)
        self.center_prev = np.zeros_like(self.w0)
        self.central_delta = np.empty_like(self.w0)

    def start(self, center: np.ndarray) -> None:
        super().start(center)
        np.copyto(self.center_prev, center)

    def exchange(self, header: dict[str, Any]) -> dict[str, Any]:
        reply, center = self._round_trip({"kind": "pull"}, None)
        if center is None:  # abort
            return reply
        self.backend.weights_into(self.send_buf)
        update = downpour.worker_delta(self.send_buf, self.w0, out=self.send_buf)
        if header.get("samples", 0) > 0:
            np.subtract(center, self.center_prev, out=self.central_delta)
            self.gem.rescale(update, self.central_delta, out=update)
        else:
            update.fill(0.0)
        np.copyto(self.center_prev, center)
        reply, _ = self._round_trip(dict(header, kind="update"), update)
        center += update  # continue from the pulled center plus the committed update
        self.backend.set_weights(center)
        np.copyto(self.w0, center)
        return reply

    def state_dict(self) -> dict[str, Any]:
        return {"gem": self.gem.state_dict(), "center_prev": self.center_prev.copy(),
                "weights": self.backend.get_weights()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "gem" in state:
            self.gem.load_state_dict(state["gem"])
        if "center_prev" in state:
            np.copyto(self.center_prev, np.asarray(state["center_prev"], dtype=np.float32))
        if "weights" in state:
            w = np.asarray(state["weights"], dtype=np.float32)
            self.backend.set_weights(w)
            np.copyto(self.w0, w)


def make_worker_rule(backend: Backend, config: TrainConfig, n_workers: int, link: Link, master: int) -> WorkerRule:
    cls = {"downpour": DownpourWorker, "easgd": EasgdWorker, "gem": GemWorker}[config.mode]
    return cls(backend, config, n_workers, link, master)


# ------------------------------------------------------------------------------------------------------
# master side
# ------------------------------------------------------------------------------------------------------
class ServerRule:
    """Base master side: folds one worker message into the central weights ``center`` (in place)."""

    #: the reply to a parked worker (at the epoch barrier) must be captured when its message arrives
    snapshot_reply = False

    def __init__(self, center: np.ndarray, optimizer: FlatOptimizer, config: TrainConfig, n_workers: int) -> None:
        self.center, self.optimizer, self.config, self.n_workers = center, optimizer, config, n_workers

    def on_pull(self) -> np.ndarray:
        return self.center

    def on_update(self, header: dict[str, Any], array: np.ndarray) -> np.ndarray | None:
        """Apply; return the array to reply with (None: header only)."""
        raise NotImplementedError


class DownpourServer(ServerRule):
    def on_update(self, header: dict[str, Any], array: np.ndarray) -> np.ndarray | None:
        if header.get("samples", 0) > 0:
            downpour.apply(self.center, array, self.optimizer)
        return self.center


class GemServer(ServerRule):
    def on_update(self, header: dict[str, Any], array: np.ndarray) -> np.ndarray | None:
        if header.get("samples", 0) > 0:
            downpour.apply(self.center, array, self.optimizer)
        return None


class EasgdServer(ServerRule):
    snapshot_reply = True

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.alpha = easgd.alpha(self.config.elastic_force, self.n_workers)
        self.old = np.empty_like(self.center)
        self.scratch = np.empty_like(self.center)

    def on_update(self, header: dict[str, Any], array: np.ndarray) -> np.ndarray | None:
        np.copyto(self.old, self.center)
        easgd.master_update(self.center, array, self.alpha, self.scratch)
        return self.old


def make_server_rule(center: np.ndarray, optimizer: FlatOptimizer, config: TrainConfig, n_workers: int) -> ServerRule:
    cls = {"downpour": DownpourServer, "easgd": EasgdServer, "gem": GemServer}[config.mode]
    return cls(center, optimizer, config, n_workers)
