"""The wiring of each algorithm's exchange (nnlo.training.modes) against hand-computed values, in process:
a loopback link hands the worker's messages straight to the master's rule, as the master loop would."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from nnlo.algorithms.optimizers import make_optimizer
from nnlo.backends.torch_backend import TorchBackend
from nnlo.config import TrainConfig
from nnlo.training.modes import make_server_rule, make_worker_rule


class Loopback:
    """Stands in for transport.Link between one worker and its master's rule."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self.log: list[str] = []
        self._reply: tuple[dict[str, Any], np.ndarray | None] | None = None

    def frame(self, n: int, alloc: Any = None) -> np.ndarray:
        """Link.frame: the rules' exchange buffers (plain arrays will do here)."""
        return np.empty(n, np.float32) if alloc is None else alloc(n)

    def send(self, dest: int, header: dict[str, Any], array: np.ndarray | None = None) -> None:
        kind = header["kind"]
        self.log.append(kind)
        if kind == "pull":
            out = self.server.on_pull()
        else:
            out = self.server.on_update(header, array.copy())
        self._reply = ({"kind": "reply", "action": "continue"}, None if out is None else out.copy())

    def recv(self, source: int, out: np.ndarray | None = None) -> tuple[int, dict[str, Any], np.ndarray | None]:
        assert self._reply is not None
        header, array = self._reply
        if array is not None:
            np.copyto(out, array)
            return source, header, out
        return source, header, None


def _setup(mode: str, **cfg: Any) -> tuple[Any, Any, TorchBackend, Loopback, np.ndarray]:
    config = TrainConfig(model="m.py", mode=mode, optimizer="sgd:lr=1", **cfg)
    torch.manual_seed(0)
    backend = TorchBackend(torch.nn.Linear(3, 2), "mse", "sgd:lr=0.1")
    center = np.linspace(-1, 1, backend.n_params).astype(np.float32)
    server = make_server_rule(center, make_optimizer(config.optimizer), config, n_workers=1)
    link = Loopback(server)
    worker = make_worker_rule(backend, config, 1, link, master=0)  # type: ignore[arg-type]
    worker.start(center.copy())
    return worker, server, backend, link, center


def _move(backend: TorchBackend, step: float) -> np.ndarray:
    """Pretend local training moved every weight by ``step``; returns the new local weights."""
    w = backend.get_weights() + np.float32(step)
    backend.set_weights(w)
    return w


def test_downpour_adds_the_delta_and_the_worker_takes_the_new_center() -> None:
    worker, server, backend, link, center = _setup("downpour")
    c0 = center.copy()
    _move(backend, 0.25)
    worker.exchange({"samples": 4})
    np.testing.assert_allclose(server.center, c0 + 0.25, rtol=1e-6)
    np.testing.assert_allclose(backend.get_weights(), server.center, rtol=1e-6)
    assert link.log == ["update"]


def test_easgd_moves_both_sides_by_the_same_elastic_difference() -> None:
    worker, server, backend, link, center = _setup("easgd", elastic_force=0.5)
    c0 = center.copy()
    w = _move(backend, 1.0)  # w - c = 1 everywhere; alpha = 0.5 / 1 worker
    worker.exchange({"samples": 4})
    np.testing.assert_allclose(server.center, c0 + 0.5, rtol=1e-6)
    np.testing.assert_allclose(backend.get_weights(), w - 0.5, rtol=1e-6)
    assert worker.state_dict()["weights"] == pytest.approx(w - 0.5)


def test_gem_pulls_rescales_commits_and_continues_from_center_plus_update() -> None:
    worker, server, backend, link, center = _setup("gem", gem_kappa=2.0, gem_momentum=0.9)
    c0 = center.copy()
    _move(backend, 0.01)
    worker.exchange({"samples": 4})
    # first commit: the proxy equals the update, the center has not moved: pi = kappa = 2
    np.testing.assert_allclose(server.center, c0 + 0.02, rtol=1e-5)
    np.testing.assert_allclose(backend.get_weights(), c0 + 0.02, rtol=1e-5)
    assert link.log == ["pull", "update"]
    # second commit, after another worker moved the center by 0.01: since the previous pull the center
    # moved 0.02 (own commit) + 0.01 = 0.03; proxy = 0.9*0.01 + 0.01 = 0.019; pi = (2*0.019 - 0.03)/0.01 = 0.8
    server.center += np.float32(0.01)
    before = server.center.copy()
    _move(backend, 0.01)
    worker.exchange({"samples": 4})
    np.testing.assert_allclose(server.center, before + 0.008, rtol=1e-3)


def test_an_exchange_without_samples_changes_nothing_on_the_master() -> None:
    for mode in ("downpour", "gem"):
        worker, server, backend, link, center = _setup(mode)
        c0 = center.copy()
        worker.exchange({"samples": 0})
        np.testing.assert_array_equal(server.center, c0)
