"""Gradient Energy Matching (Hermans & Louppe, arXiv:1805.08469): what a worker does to its update before
committing it to the master.

Asynchronous workers all push into one central variable, so the center moves with an implicit momentum that
grows with the number of workers and eventually diverges. GEM keeps the kinetic energy of the center's motion
at or below that of a *proxy*: plain sequential SGD with momentum. Each worker tracks the proxy's velocity
from its own updates and scales every coordinate of its next update so that, added to the motion the center
already has (all commits since this worker's previous pull), the total matches ``kappa`` times the proxy's
velocity::

    proxy <- momentum * proxy + update                  (the proxy's velocity, per coordinate)
    pi    <- (kappa*|proxy| - |central_delta|) / (|update| + eps),  clipped to [0, max_scale]
    send    pi * update

Inputs, per call (all flat float32 vectors of the model's size):

- ``update``: the worker's own local update since its last commit, i.e. its new weights minus the weights it
  started from (for one plain SGD step that is ``-lr * grad``);
- ``central_delta``: how far the central variable moved between this worker's previous pull and the pull it
  just made (the center it receives now minus the center it received last time): the motion the system
  already has, from the other workers' commits and this worker's own previous one.

The worker then commits ``pi * update`` to the master, which adds it to the center (Downpour with
``sgd:lr=1``), and continues from the freshly pulled center plus that rescaled update.

``lr`` is recorded with the state; the worker's own optimizer sets the step size (the paper's setting is
plain SGD at the GEM learning rate, ``sgd:lr=<gem lr>``, the worker's default in GEM mode).
Upstream defaults: ``lr=0.01``, ``momentum=0.9``, ``kappa=2.0``. ``max_scale=5`` bounds ``pi`` for numerical
safety where the worker's update is tiny (as the authors' reference code does).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from nnlo.errors import ConfigError


class GEMState:
    """A worker's GEM state: the proxy velocity (one model-size vector) and the hyperparameters."""

    def __init__(self, n_params: int, lr: float = 0.01, momentum: float = 0.9, kappa: float = 2.0,
                 max_scale: float = 5.0, eps: float = 1e-12) -> None:
        if not (math.isfinite(lr) and lr > 0):
            raise ConfigError(f"--gem-lr must be > 0, got {lr}; the usual value is 0.01")
        if not 0.0 <= momentum < 1.0:
            raise ConfigError(f"--gem-momentum must be in [0, 1), got {momentum}; the usual value is 0.9")
        if not (math.isfinite(kappa) and kappa > 0):
            raise ConfigError(f"--gem-kappa must be > 0, got {kappa}; the usual value is 2.0")
        if not max_scale > 0:
            raise ConfigError(f"GEM max_scale must be > 0, got {max_scale}")
        if n_params < 1:
            raise ValueError(f"GEM needs at least one parameter, got {n_params}")
        self.n_params = int(n_params)
        self.lr, self.momentum, self.kappa = float(lr), float(momentum), float(kappa)
        self.max_scale, self.eps = float(max_scale), float(eps)
        self.proxy = np.zeros(self.n_params, dtype=np.float32)
        self.steps = 0
        self._tmp = np.empty(self.n_params, dtype=np.float32)
        self._tmp2 = np.empty(self.n_params, dtype=np.float32)

    def _check(self, what: str, v: np.ndarray) -> None:
        if v.shape != (self.n_params,):
            raise ValueError(f"GEM {what} has shape {v.shape}, expected ({self.n_params},)")

    def rescale(self, update: np.ndarray, central_delta: np.ndarray,
                out: np.ndarray | None = None) -> np.ndarray:
        """Advance the proxy with ``update`` and return ``pi * update``: in ``out`` when given (which may be
        ``update`` itself; no allocation then), else in a new array. See the module docstring for what the
        two inputs are."""
        self._check("update", update)
        self._check("central_delta", central_delta)
        f = np.float32
        proxy, tmp = self.proxy, self._tmp
        proxy *= f(self.momentum)
        proxy += update
        np.abs(proxy, out=tmp)
        tmp *= f(self.kappa)
        buf = np.abs(central_delta, out=self._tmp2)
        tmp -= buf  # kappa*|proxy| - |central_delta|
        np.abs(update, out=buf)
        buf += f(self.eps)
        tmp /= buf
        np.clip(tmp, f(0.0), f(self.max_scale), out=tmp)  # tmp = pi
        result: np.ndarray = np.multiply(tmp, update, out=out)  # numpy types out= ufuncs as Any
        self.steps += 1
        return result

    def state_dict(self) -> dict[str, Any]:
        """The proxy velocity (a copy), step count and hyperparameters."""
        return {"proxy": self.proxy.copy(), "steps": self.steps, "lr": self.lr,
                "momentum": self.momentum, "kappa": self.kappa, "max_scale": self.max_scale}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`; the current hyperparameters win (a restart may change them)."""
        try:
            proxy = np.ascontiguousarray(state["proxy"], dtype=np.float32).reshape(-1)
            steps = int(state.get("steps", 0))
        except (KeyError, TypeError, ValueError):
            raise ConfigError("saved GEM state is malformed (needs 'proxy'); was it written by nnlo?") from None
        if proxy.size != self.n_params:
            raise ConfigError(
                f"saved GEM state has {proxy.size} values but the model has {self.n_params}; "
                f"restore with the same model"
            )
        np.copyto(self.proxy, proxy)
        self.steps = steps
