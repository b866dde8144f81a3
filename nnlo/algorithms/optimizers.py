"""Optimizers on flat float32 vectors with PyTorch's exact semantics (their spec strings: :mod:`.specs`).

Why this exists: the master (parameter server) holds the central weights as one flat numpy vector and must
apply updates without any deep-learning framework, while the workers train with their framework's optimizer.
Both sides are configured with the same spec string (``--optimizer`` / ``--worker-optimizer``)::

    adam                                  all defaults
    sgd:lr=0.1,momentum=0.9,nesterov=true
    rmsprop:lr=0.001,rho=0.9

so a spec must mean the same thing everywhere. The update rules below reproduce ``torch.optim`` step by step
(same defaults, same order of operations, same first step), which the tests check against torch on identical
gradients; :func:`torch_equivalent` gives the matching ``torch.optim`` class and arguments.

Options and defaults (those of ``torch.optim``):

=========  ==========================================================================================
sgd        lr=0.001, momentum=0.0, nesterov=false, weight_decay=0.0
adam       lr=0.001, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0
rmsprop    lr=0.01, rho=0.99 (torch's ``alpha``), eps=1e-8, momentum=0.0, centered=false, weight_decay=0.0
adadelta   lr=1.0, rho=0.9, eps=1e-6, weight_decay=0.0
=========  ==========================================================================================

``weight_decay`` is classic L2 (added to the gradient), as in torch. Performance: each optimizer allocates its
state and one or two scratch vectors of model size on the first step and then works in place, so a step on a
25M-parameter model allocates nothing.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from nnlo.algorithms.specs import (  # re-exported: the spec API is part of this module's public face
    OPTIONS,
    OptimizerSpec,
    Option,
    describe_options,
    format_spec,
    keras_equivalent,
    normalize_spec,
    parse_optimizer_spec,
    torch_equivalent,
)
from nnlo.errors import ConfigError

__all__ = [
    "OPTIMIZERS", "OPTIONS", "Adadelta", "Adam", "FlatOptimizer", "Option", "OptimizerSpec", "RMSprop", "SGD",
    "describe_options", "format_spec", "keras_equivalent", "make_optimizer", "normalize_spec",
    "parse_optimizer_spec", "torch_equivalent",
]


def _check_vector(what: str, array: np.ndarray, size: int | None = None) -> None:
    if not isinstance(array, np.ndarray) or array.dtype != np.float32 or array.ndim != 1 \
            or not array.flags.c_contiguous:
        got = (f"{array.dtype} array of shape {array.shape}" if isinstance(array, np.ndarray)
               else type(array).__name__)
        raise TypeError(f"{what} must be a flat, contiguous float32 numpy array, got {got}")
    if size is not None and array.size != size:
        raise ValueError(f"{what} has {array.size} values but the weights have {size}")


class FlatOptimizer:
    """Base class: in-place steps on a flat float32 weight vector, and a complete, picklable state.

    Subclasses name their state vectors in ``state_names`` and implement :meth:`_update`. State vectors
    and scratch space are allocated on the first step (their size is the weight vector's).
    """

    name: ClassVar[str] = ""
    state_names: tuple[str, ...] = ()  # per class; SGD and RMSprop narrow it per instance to the options in use
    n_scratch: ClassVar[int] = 1

    def __init__(self, **params: Any) -> None:
        _, self.params = normalize_spec((self.name, params))
        self.step_count = 0
        self.state: dict[str, np.ndarray] = {}
        self._scratch: list[np.ndarray] = []
        self._grad: np.ndarray | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({format_spec((self.name, self.params))!r}, steps={self.step_count})"

    @property
    def spec(self) -> str:
        """The canonical spec string of this optimizer."""
        return format_spec((self.name, self.params))

    def _allocate(self, size: int) -> None:
        if self.state and next(iter(self.state.values())).size != size:
            raise ValueError(
                f"{self.name} optimizer state has {next(iter(self.state.values())).size} values "
                f"but the weights have {size}; use one optimizer per weight vector"
            )
        for key in self.state_names:
            if key not in self.state:
                self.state[key] = np.zeros(size, dtype=np.float32)
        if not self._scratch or self._scratch[0].size != size:
            self._scratch = [np.empty(size, dtype=np.float32) for _ in range(self.n_scratch)]
            self._grad = None

    def _effective_grad(self, weights: np.ndarray, grad: np.ndarray, grad_scale: float) -> np.ndarray:
        """``grad * grad_scale + weight_decay * weights``, in a reused buffer when it differs from grad."""
        wd = self.params.get("weight_decay", 0.0)
        if grad_scale == 1.0 and not wd:
            return grad
        if self._grad is None or self._grad.size != grad.size:
            self._grad = np.empty_like(grad)
        g = self._grad
        if grad_scale == 1.0:
            np.copyto(g, grad)
        else:
            np.multiply(grad, np.float32(grad_scale), out=g)
        if wd:
            tmp = self._scratch[0]
            np.multiply(weights, np.float32(wd), out=tmp)
            g += tmp
        return g

    def step(self, weights: np.ndarray, grad: np.ndarray, grad_scale: float = 1.0) -> None:
        """One optimizer step: update ``weights`` in place from the gradient ``grad * grad_scale``.

        ``grad`` is not modified. ``grad_scale`` saves a model-size temporary when the caller holds a
        multiple of the gradient (``-1`` for a weight delta, ``1/n`` for a sum over n workers).
        """
        _check_vector("weights", weights)
        _check_vector("gradient", grad, weights.size)
        self._allocate(weights.size)
        self.step_count += 1
        if not self._fused(weights, grad, grad_scale):
            self._update(weights, self._effective_grad(weights, grad, grad_scale))

    def _fused(self, w: np.ndarray, grad: np.ndarray, grad_scale: float) -> bool:
        """A subclass's shortcut for a step that needs fewer passes over memory; False = not taken."""
        return False

    def _update(self, w: np.ndarray, g: np.ndarray) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    # -- state ---------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly: name, options, step count, copies of the state vectors."""
        return {
            "name": self.name,
            "params": dict(self.params),
            "step": self.step_count,
            "state": {k: v.copy() for k, v in self.state.items()},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`. The current options win over saved ones (so a restarted run may
        change ``lr``); the optimizer kind and the state vectors must match."""
        try:
            name, step, vectors = state["name"], int(state["step"]), dict(state["state"])
        except (KeyError, TypeError, ValueError):
            raise ConfigError(
                "saved optimizer state is malformed (needs name, step, state); was it written by nnlo?"
            ) from None
        if name != self.name:
            raise ConfigError(
                f"saved optimizer state is for {name} but this optimizer is {self.name}; "
                f"restore with the same optimizer (e.g. --optimizer {name})"
            )
        unknown = set(vectors) - set(self.state_names)
        if unknown:
            raise ConfigError(f"saved {name} state has unknown vectors {sorted(unknown)}; was it written by nnlo?")
        sizes = {np.asarray(v).size for v in vectors.values()}
        if len(sizes) > 1:
            raise ConfigError(f"saved {name} state vectors differ in size {sorted(sizes)}; the file is corrupt")
        if self.state and sizes and sizes != {next(iter(self.state.values())).size}:
            raise ConfigError(
                f"saved {name} state has {sizes.pop()} values but the model has "
                f"{next(iter(self.state.values())).size}; restore with the same model"
            )
        self.state = {k: np.ascontiguousarray(v, dtype=np.float32).reshape(-1).copy()
                      for k, v in vectors.items()}
        self.step_count = step

    @property
    def n_params(self) -> int | None:
        """Size of the state vectors once known (after the first step or a load), else None."""
        return next(iter(self.state.values())).size if self.state else None


class SGD(FlatOptimizer):
    """torch.optim.SGD (no dampening): ``buf = momentum*buf + g``; step ``lr*buf`` or Nesterov
    ``lr*(g + momentum*buf)``; plain ``lr*g`` without momentum. sgd:lr=1 applies a gradient as is."""

    name = "sgd"
    state_names: tuple[str, ...] = ("momentum_buffer",)

    def _allocate(self, size: int) -> None:
        if not self.params["momentum"]:
            self.state_names = ()  # no momentum: no state vector at all
        super()._allocate(size)

    def _fused(self, w: np.ndarray, grad: np.ndarray, grad_scale: float) -> bool:
        # Plain SGD is the usual master rule (Downpour with sgd:lr=1): one or two passes instead of four.
        if self.params["momentum"] or self.params["weight_decay"]:
            return False
        factor = self.params["lr"] * grad_scale
        if factor == -1.0:
            w += grad
        elif factor == 1.0:
            w -= grad
        else:
            tmp = self._scratch[0]
            np.multiply(grad, np.float32(factor), out=tmp)
            w -= tmp
        return True

    def _update(self, w: np.ndarray, g: np.ndarray) -> None:
        lr, mu = np.float32(self.params["lr"]), self.params["momentum"]
        tmp = self._scratch[0]
        if mu:
            buf = self.state["momentum_buffer"]
            mu32 = np.float32(mu)
            buf *= mu32  # from zeros this equals torch's first step (buffer = first gradient)
            buf += g
            if self.params["nesterov"]:
                np.multiply(buf, mu32, out=tmp)
                tmp += g
            else:
                np.copyto(tmp, buf)
        else:
            np.copyto(tmp, g)
        tmp *= lr
        w -= tmp


class Adam(FlatOptimizer):
    """torch.optim.Adam: bias-corrected first and second moments, eps added after the square root."""

    name = "adam"
    state_names = ("exp_avg", "exp_avg_sq")

    def _update(self, w: np.ndarray, g: np.ndarray) -> None:
        p = self.params
        b1, b2, t = p["beta1"], p["beta2"], self.step_count
        m, v, tmp = self.state["exp_avg"], self.state["exp_avg_sq"], self._scratch[0]
        np.subtract(g, m, out=tmp)  # m = lerp(m, g, 1 - b1)
        tmp *= np.float32(1.0 - b1)
        m += tmp
        v *= np.float32(b2)
        np.multiply(g, g, out=tmp)
        tmp *= np.float32(1.0 - b2)
        v += tmp
        step_size = p["lr"] / (1.0 - b1 ** t)
        np.sqrt(v, out=tmp)
        tmp /= np.float32(math.sqrt(1.0 - b2 ** t))
        tmp += np.float32(p["eps"])
        np.divide(m, tmp, out=tmp)
        tmp *= np.float32(step_size)
        w -= tmp


class RMSprop(FlatOptimizer):
    """torch.optim.RMSprop: ``sq = rho*sq + (1-rho)*g^2``; step ``lr*g/(sqrt(sq)+eps)``, optionally centered
    (subtracting the running mean's square) and with momentum on the normalized gradient."""

    name = "rmsprop"
    state_names: tuple[str, ...] = ("square_avg", "momentum_buffer", "grad_avg")

    def _allocate(self, size: int) -> None:
        names = ["square_avg"]
        if self.params["momentum"]:
            names.append("momentum_buffer")
        if self.params["centered"]:
            names.append("grad_avg")
        self.state_names = tuple(names)
        super()._allocate(size)

    def _update(self, w: np.ndarray, g: np.ndarray) -> None:
        p = self.params
        rho = p["rho"]
        sq, tmp = self.state["square_avg"], self._scratch[0]
        sq *= np.float32(rho)
        np.multiply(g, g, out=tmp)
        tmp *= np.float32(1.0 - rho)
        sq += tmp
        if p["centered"]:
            ga = self.state["grad_avg"]
            np.subtract(g, ga, out=tmp)
            tmp *= np.float32(1.0 - rho)
            ga += tmp
            np.multiply(ga, ga, out=tmp)
            np.subtract(sq, tmp, out=tmp)
            np.sqrt(tmp, out=tmp)
        else:
            np.sqrt(sq, out=tmp)
        tmp += np.float32(p["eps"])
        np.divide(g, tmp, out=tmp)
        if p["momentum"]:
            buf = self.state["momentum_buffer"]
            buf *= np.float32(p["momentum"])
            buf += tmp
            np.multiply(buf, np.float32(p["lr"]), out=tmp)
        else:
            tmp *= np.float32(p["lr"])
        w -= tmp


class Adadelta(FlatOptimizer):
    """torch.optim.Adadelta: ``delta = sqrt(acc+eps)/sqrt(sq+eps)*g``, both accumulators decayed by rho."""

    name = "adadelta"
    state_names = ("square_avg", "acc_delta")
    n_scratch = 2

    def _update(self, w: np.ndarray, g: np.ndarray) -> None:
        p = self.params
        rho, eps = p["rho"], np.float32(p["eps"])
        sq, acc = self.state["square_avg"], self.state["acc_delta"]
        std, delta = self._scratch
        sq *= np.float32(rho)
        np.multiply(g, g, out=std)
        std *= np.float32(1.0 - rho)
        sq += std
        np.add(sq, eps, out=std)
        np.sqrt(std, out=std)
        np.add(acc, eps, out=delta)
        np.sqrt(delta, out=delta)
        delta /= std
        delta *= g
        acc *= np.float32(rho)
        np.multiply(delta, delta, out=std)
        std *= np.float32(1.0 - rho)
        acc += std
        delta *= np.float32(p["lr"])
        w -= delta


OPTIMIZERS: dict[str, type[FlatOptimizer]] = {
    cls.name: cls for cls in (SGD, Adam, RMSprop, Adadelta)
}


def make_optimizer(spec: str | OptimizerSpec) -> FlatOptimizer:
    """A fresh optimizer from a spec string (``"adam"``, ``"sgd:lr=0.1"``) or a ``(name, options)`` pair."""
    name, params = normalize_spec(spec)
    return OPTIMIZERS[name](**params)
