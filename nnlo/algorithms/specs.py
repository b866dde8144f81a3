"""Optimizer spec strings: ``name:key=value,...``, parsed, validated and completed with defaults.

One grammar for ``--optimizer`` (the master's numpy rule) and ``--worker-optimizer`` (the framework's optimizer)
so the same string means the same update everywhere. Every option's type, default (torch's) and range lives
in :data:`OPTIONS`; :func:`torch_equivalent` / :func:`keras_equivalent` translate a spec for the backends.

    adam                                  all defaults
    sgd:lr=0.1,momentum=0.9,nesterov=true
    rmsprop:lr=0.001,rho=0.9

Names and keys are case-insensitive; booleans accept true/false, yes/no, on/off, 1/0. Keras and torch
spellings of keys are accepted as aliases (``learning_rate``, ``beta_1``, ``epsilon``, rmsprop's ``alpha``).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from nnlo.errors import ConfigError

OptimizerSpec = tuple[str, dict[str, Any]]


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

#: Other libraries' names for the same options (Keras, torch), per optimizer ("*" = all).
ALIASES: dict[str, dict[str, str]] = {
    "*": {"learning_rate": "lr", "epsilon": "eps", "beta_1": "beta1", "beta_2": "beta2"},
    "rmsprop": {"alpha": "rho"},
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
    if (isinstance(value, float) and not math.isfinite(value)) or not option.check(value):
        raise ConfigError(f"{where} is out of range: {key} must be {option.rule}")
    return value


def _complete(name: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """Validate ``given`` options of optimizer ``name`` and fill in the defaults."""
    options = OPTIONS[name]
    params: dict[str, Any] = {}
    aliases = {**ALIASES["*"], **ALIASES.get(name, {})}
    for given_key, raw in given.items():
        key = aliases.get(given_key, given_key)
        if key in params:
            raise ConfigError(f"optimizer {name} sets {key} twice (as {given_key} too); keep one")
        if key not in options:
            raise ConfigError(
                f"optimizer {name} has no option {key!r}; valid options: {', '.join(options)} "
                f"(e.g. {_example(name)})"
            )
        params[key] = _convert(name, key, raw, options[key])
    # every option, in the optimizer's own order: the same optimizer always reads (and formats) the same
    params = {key: params.get(key, option.default) for key, option in options.items()}
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
