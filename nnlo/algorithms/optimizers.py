"""Optimizers on flat float32 vectors with PyTorch's exact semantics, and the spec strings that name them.

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
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Mapping

import numpy as np

from nnlo.errors import ConfigError

OptimizerSpec = tuple[str, dict[str, Any]]


# --------------------------------------------------------------------------------------------------------
# Spec strings
# --------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Option:
    """One option of an optimizer: its type, default, allowed range (as a predicate and its wording)."""

    type: type
    default: Any
    check: Callable[[Any], bool] = lambda v: True
    rule: str = ""


def _nonneg(v: float) -> bool:
    return v >= 0.0 and math.isfinite(v)


def _unit(v: float) -> bool:
    return 0.0 <= v < 1.0


def _unit_closed(v: float) -> bool:
    return 0.0 <= v <= 1.0


_LR = Option(float, 0.001, _nonneg, ">= 0")
_WD = Option(float, 0.0, _nonneg, ">= 0")
_EPS = Option(float, 1e-8, _nonneg, ">= 0")

#: Every optimizer, its options and their defaults (the single source of truth for parsing and help text).
OPTIONS: dict[str, dict[str, Option]] = {
    "sgd": {
        "lr": _LR,
        "momentum": Option(float, 0.0, _nonneg, ">= 0"),
        "nesterov": Option(bool, False),
        "weight_decay": _WD,
    },
    "adam": {
        "lr": _LR,
        "beta1": Option(float, 0.9, _unit, "in [0, 1)"),
        "beta2": Option(float, 0.999, _unit, "in [0, 1)"),
        "eps": _EPS,
        "weight_decay": _WD,
    },
    "rmsprop": {
        "lr": Option(float, 0.01, _nonneg, ">= 0"),
        "rho": Option(float, 0.99, _unit_closed, "in [0, 1]"),
        "eps": _EPS,
        "momentum": Option(float, 0.0, _nonneg, ">= 0"),
        "centered": Option(bool, False),
        "weight_decay": _WD,
    },
    "adadelta": {
        "lr": Option(float, 1.0, _nonneg, ">= 0"),
        "rho": Option(float, 0.9, _unit_closed, "in [0, 1]"),
        "eps": Option(float, 1e-6, _nonneg, ">= 0"),
        "weight_decay": _WD,
    },
}

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def _example(name: str) -> str:
    return f"{name}:" + ",".join(f"{k}={_fmt(o.default)}" for k, o in OPTIONS[name].items())


def _fmt(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else repr(value)


def describe_options() -> str:
    """One line per optimizer with its options and defaults, for ``--help`` texts."""
    return "; ".join(_example(name) for name in OPTIONS)


def _convert(name: str, key: str, raw: Any, option: Option) -> Any:
    where = f"optimizer option {name}:{key}={raw}"
    if option.type is bool:
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise ConfigError(f"{where} is not true/false; write e.g. {name}:{key}=true")
    if isinstance(raw, bool):
        raise ConfigError(f"{where} must be a number; write e.g. {name}:{key}={_fmt(option.default)}")
    try:
        value = option.type(raw)
    except (TypeError, ValueError):
        raise ConfigError(
            f"{where} is not a number; write e.g. {name}:{key}={_fmt(option.default)}"
        ) from None
    if isinstance(value, float) and not math.isfinite(value) or not option.check(value):
        raise ConfigError(f"{where} is out of range: {key} must be {option.rule}")
    return value


def _complete(name: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """Validate ``given`` options of optimizer ``name`` and fill in the defaults."""
    options = OPTIONS[name]
    params: dict[str, Any] = {}
    for key, raw in given.items():
        if key not in options:
            raise ConfigError(
                f"optimizer {name} has no option {key!r}; valid options: {', '.join(options)} "
                f"(e.g. {_example(name)})"
            )
        params[key] = _convert(name, key, raw, options[key])
    for key, option in options.items():
        params.setdefault(key, option.default)
    if params.get("nesterov") and params.get("momentum", 0.0) <= 0.0:
        raise ConfigError(f"optimizer {name}: nesterov=true needs momentum > 0; add e.g. momentum=0.9")
    return params


def _check_name(name: str, spec: str) -> str:
    key = name.strip().lower()
    if key not in OPTIONS:
        shown = name.strip() or spec
        raise ConfigError(
            f"unknown optimizer {shown!r}; valid: {', '.join(sorted(OPTIONS))} "
            f"(with options, e.g. sgd:lr=0.1,momentum=0.9)"
        )
    return key


def parse_optimizer_spec(spec: str) -> OptimizerSpec:
    """``"sgd:lr=0.1,momentum=0.9"`` -> ``("sgd", {all options of sgd, typed, defaults filled in})``.

    The returned dict always holds every option of the optimizer, so two processes that parse the same
    string agree on every value even if a framework changes its own defaults. Names and keys are
    case-insensitive; bad names, keys or values raise :class:`~nnlo.errors.ConfigError` with the valid ones.
    """
    if not isinstance(spec, str):
        raise ConfigError(f"optimizer spec must be a string like 'adam' or 'sgd:lr=0.1', got {spec!r}")
    text = spec.strip()
    name, _, rest = text.partition(":")
    key = _check_name(name, text)
    given: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in rest.split(","))):
        option, eq, value = item.partition("=")
        option = option.strip().lower()
        if not eq or not option or not value.strip():
            raise ConfigError(
                f"optimizer spec {spec!r}: {item!r} is not key=value; write e.g. {_example(key)}"
            )
        if option in given:
            raise ConfigError(f"optimizer spec {spec!r} sets {option} twice; keep one")
        given[option] = value.strip()
    return key, _complete(key, given)


def normalize_spec(spec: str | OptimizerSpec) -> OptimizerSpec:
    """A spec string or a ``(name, options)`` pair -> the validated pair with defaults filled in."""
    if isinstance(spec, str):
        return parse_optimizer_spec(spec)
    try:
        name, given = spec
    except (TypeError, ValueError):
        raise ConfigError(
            f"optimizer spec must be 'name:key=value,...' or (name, options), got {spec!r}"
        ) from None
    key = _check_name(str(name), str(name))
    return key, _complete(key, dict(given or {}))


def format_spec(spec: str | OptimizerSpec) -> str:
    """The canonical spec string (every option spelled out), e.g. for logs and checkpoints."""
    name, params = normalize_spec(spec)
    return f"{name}:" + ",".join(f"{k}={_fmt(v)}" for k, v in params.items())


def torch_equivalent(spec: str | OptimizerSpec) -> tuple[str, dict[str, Any]]:
    """The ``torch.optim`` class name and keyword arguments that behave exactly like ``spec``.

    Use as ``getattr(torch.optim, cls)(model.parameters(), **kwargs)``; torch is not imported here.
    """
    name, p = normalize_spec(spec)
    if name == "sgd":
        return "SGD", dict(lr=p["lr"], momentum=p["momentum"], nesterov=p["nesterov"],
                           weight_decay=p["weight_decay"])
    if name == "adam":
        return "Adam", dict(lr=p["lr"], betas=(p["beta1"], p["beta2"]), eps=p["eps"],
                            weight_decay=p["weight_decay"])
    if name == "rmsprop":
        return "RMSprop", dict(lr=p["lr"], alpha=p["rho"], eps=p["eps"], momentum=p["momentum"],
                               centered=p["centered"], weight_decay=p["weight_decay"])
    return "Adadelta", dict(lr=p["lr"], rho=p["rho"], eps=p["eps"], weight_decay=p["weight_decay"])


def keras_equivalent(spec: str | OptimizerSpec) -> tuple[str, dict[str, Any]]:
    """The ``keras.optimizers`` class name and keyword arguments closest to ``spec``.

    Keras places ``epsilon`` slightly differently from torch in adam/rmsprop/adadelta (results agree to
    about eps), and its ``weight_decay`` is decoupled rather than L2, so a spec with ``weight_decay`` > 0
    is refused instead of silently meaning something else.
    """
    name, p = normalize_spec(spec)
    if p.get("weight_decay", 0.0):
        raise ConfigError(
            f"optimizer {name}: weight_decay is L2 in nnlo but decoupled in Keras; "
            f"drop weight_decay or use the torch backend"
        )
    if name == "sgd":
        return "SGD", dict(learning_rate=p["lr"], momentum=p["momentum"], nesterov=p["nesterov"])
    if name == "adam":
        return "Adam", dict(learning_rate=p["lr"], beta_1=p["beta1"], beta_2=p["beta2"], epsilon=p["eps"])
    if name == "rmsprop":
        return "RMSprop", dict(learning_rate=p["lr"], rho=p["rho"], momentum=p["momentum"],
                               epsilon=p["eps"], centered=p["centered"])
    return "Adadelta", dict(learning_rate=p["lr"], rho=p["rho"], epsilon=p["eps"])


# --------------------------------------------------------------------------------------------------------
# Update rules
# --------------------------------------------------------------------------------------------------------
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
    state_names: ClassVar[tuple[str, ...]] = ()
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
    state_names = ("momentum_buffer",)

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
    state_names = ("square_avg", "momentum_buffer", "grad_avg")

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
