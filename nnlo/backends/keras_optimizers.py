"""Keras optimizers with ``torch.optim``'s exact update rules, built from nnlo optimizer spec strings.

Why not ``keras.optimizers.Adam``/``RMSprop``: Keras adds epsilon in a different place (Adam's "epsilon hat",
RMSprop's ``sqrt(v + eps)``), has other defaults, and its ``weight_decay`` is decoupled rather than L2. A spec
such as ``adam:lr=0.001`` must mean the same thing on the torch backend, the Keras backend and the master's
numpy rule (:mod:`nnlo.algorithms.optimizers`), so these classes re-state torch's rules (same defaults, same
first step, L2 ``weight_decay`` added to the gradient) as Keras 3 optimizers. They run inside the backend's
``tf.function`` train step like any Keras optimizer; the tests compare them step by step with ``torch.optim``.

Importing this module imports Keras: only :mod:`nnlo.backends.keras_backend` does, after
:func:`nnlo.backends.keras_env.require_keras`.
"""
from __future__ import annotations

from typing import Any

import keras
from keras import ops

from nnlo.algorithms.optimizers import normalize_spec

OptimizerSpec = tuple[str, dict[str, Any]]


class _TorchRule(keras.optimizers.Optimizer):
    """Shared parts: the spec's options, L2 weight decay, and slot variables named after torch's state."""

    nnlo_name = ""
    slot_names: tuple[str, ...] = ()

    def __init__(self, params: dict[str, Any], name: str | None = None) -> None:
        super().__init__(learning_rate=float(params["lr"]), name=name or f"nnlo_{self.nnlo_name}")
        self.params = dict(params)
        self.slots: dict[str, list[Any]] = {}

    def active_slots(self) -> tuple[str, ...]:
        return self.slot_names

    def build(self, variables: list[Any]) -> None:
        if self.built:
            return
        super().build(variables)
        for slot in self.active_slots():
            self.slots[slot] = [self.add_variable_from_reference(v, slot, initializer="zeros")
                                for v in variables]

    def _slot(self, name: str, variable: Any) -> Any:
        return self.slots[name][self._get_variable_index(variable)]

    def _grad(self, gradient: Any, variable: Any) -> Any:
        g = ops.cast(gradient, variable.dtype)
        wd = self.params.get("weight_decay", 0.0)
        return ops.add(g, ops.multiply(variable, wd)) if wd else g

    def get_config(self) -> dict[str, Any]:
        return {"params": dict(self.params), "name": self.name}

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects: Any = None) -> _TorchRule:
        return cls(config["params"], name=config.get("name"))


class SGD(_TorchRule):
    """torch.optim.SGD without dampening: ``buf = mu*buf + g``; ``p -= lr*buf`` (Nesterov ``lr*(g + mu*buf)``)."""

    nnlo_name = "sgd"
    slot_names = ("momentum_buffer",)

    def active_slots(self) -> tuple[str, ...]:
        return self.slot_names if self.params["momentum"] else ()

    def update_step(self, gradient: Any, variable: Any, learning_rate: Any) -> None:
        lr = ops.cast(learning_rate, variable.dtype)
        g = self._grad(gradient, variable)
        mu = self.params["momentum"]
        if mu:
            buf = self._slot("momentum_buffer", variable)
            self.assign(buf, ops.add(ops.multiply(buf, mu), g))
            g = ops.add(g, ops.multiply(buf, mu)) if self.params["nesterov"] else buf
        self.assign_sub(variable, ops.multiply(g, lr))


class Adam(_TorchRule):
    """torch.optim.Adam: ``p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)``."""

    nnlo_name = "adam"
    slot_names = ("exp_avg", "exp_avg_sq")

    def update_step(self, gradient: Any, variable: Any, learning_rate: Any) -> None:
        lr = ops.cast(learning_rate, variable.dtype)
        g = self._grad(gradient, variable)
        b1, b2, eps = self.params["beta1"], self.params["beta2"], self.params["eps"]
        m, v = self._slot("exp_avg", variable), self._slot("exp_avg_sq", variable)
        t = ops.cast(self.iterations + 1, variable.dtype)
        self.assign(m, ops.add(m, ops.multiply(ops.subtract(g, m), 1.0 - b1)))
        self.assign(v, ops.add(ops.multiply(v, b2), ops.multiply(ops.square(g), 1.0 - b2)))
        bias1 = ops.subtract(1.0, ops.power(ops.cast(b1, variable.dtype), t))
        bias2_sqrt = ops.sqrt(ops.subtract(1.0, ops.power(ops.cast(b2, variable.dtype), t)))
        denom = ops.add(ops.divide(ops.sqrt(v), bias2_sqrt), eps)
        self.assign_sub(variable, ops.multiply(ops.divide(lr, bias1), ops.divide(m, denom)))


class RMSprop(_TorchRule):
    """torch.optim.RMSprop (``rho`` is torch's ``alpha``): ``p -= lr * g / (sqrt(v) + eps)``, optionally
    centered (``v - mean(g)^2``) and with momentum (``buf = mu*buf + g/avg; p -= lr*buf``)."""

    nnlo_name = "rmsprop"
    slot_names = ("square_avg", "momentum_buffer", "grad_avg")

    def active_slots(self) -> tuple[str, ...]:
        return tuple(s for s in self.slot_names
                     if s == "square_avg" or (s == "momentum_buffer" and self.params["momentum"])
                     or (s == "grad_avg" and self.params["centered"]))

    def update_step(self, gradient: Any, variable: Any, learning_rate: Any) -> None:
        lr = ops.cast(learning_rate, variable.dtype)
        g = self._grad(gradient, variable)
        rho, eps, mu = self.params["rho"], self.params["eps"], self.params["momentum"]
        sq = self._slot("square_avg", variable)
        self.assign(sq, ops.add(ops.multiply(sq, rho), ops.multiply(ops.square(g), 1.0 - rho)))
        if self.params["centered"]:
            ga = self._slot("grad_avg", variable)
            self.assign(ga, ops.add(ga, ops.multiply(ops.subtract(g, ga), 1.0 - rho)))
            avg = ops.add(ops.sqrt(ops.subtract(sq, ops.square(ga))), eps)
        else:
            avg = ops.add(ops.sqrt(sq), eps)
        if mu:
            buf = self._slot("momentum_buffer", variable)
            self.assign(buf, ops.add(ops.multiply(buf, mu), ops.divide(g, avg)))
            self.assign_sub(variable, ops.multiply(buf, lr))
        else:
            self.assign_sub(variable, ops.multiply(ops.divide(g, avg), lr))


class Adadelta(_TorchRule):
    """torch.optim.Adadelta: ``delta = sqrt(u + eps) / sqrt(v + eps) * g``; ``p -= lr*delta``."""

    nnlo_name = "adadelta"
    slot_names = ("square_avg", "acc_delta")

    def update_step(self, gradient: Any, variable: Any, learning_rate: Any) -> None:
        lr = ops.cast(learning_rate, variable.dtype)
        g = self._grad(gradient, variable)
        rho, eps = self.params["rho"], self.params["eps"]
        sq, acc = self._slot("square_avg", variable), self._slot("acc_delta", variable)
        self.assign(sq, ops.add(ops.multiply(sq, rho), ops.multiply(ops.square(g), 1.0 - rho)))
        delta = ops.multiply(ops.divide(ops.sqrt(ops.add(acc, eps)), ops.sqrt(ops.add(sq, eps))), g)
        self.assign(acc, ops.add(ops.multiply(acc, rho), ops.multiply(ops.square(delta), 1.0 - rho)))
        self.assign_sub(variable, ops.multiply(delta, lr))


RULES: dict[str, type[_TorchRule]] = {cls.nnlo_name: cls for cls in (SGD, Adam, RMSprop, Adadelta)}


def make_optimizer(spec: str | OptimizerSpec) -> _TorchRule:
    """A Keras optimizer for an nnlo spec (``"adam"``, ``"sgd:lr=0.1,momentum=0.9"``, or a parsed pair).

    Bad names, keys or values raise :class:`~nnlo.errors.ConfigError` from the shared spec parser.
    """
    name, params = normalize_spec(spec)
    return RULES[name](params)
