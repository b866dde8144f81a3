"""The grammar of ``--early-stopping`` and ``--target-metric``: upstream's ``metric,comparison,value`` strings.

``val_loss,<,4`` (patience 4 epochs), ``val_accuracy,>,0.95`` (a target). Comparisons: ``<``, ``>``, ``<=``,
``>=``; the upstream spellings ``~<`` and ``~>`` mean the same as ``<`` and ``>``. Metric aliases: ``val_acc`` =
``val_accuracy``, ``acc`` = ``accuracy``. Pure: the options' check (:meth:`nnlo.config.TrainConfig.validate`)
and the training's :class:`nnlo.training.stopping.Stopper` both read a rule with :func:`parse_rule`.
"""
from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass

from nnlo.errors import ConfigError

_OPS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt,
    ">": operator.gt,
    "<=": operator.le,
    ">=": operator.ge,
}
_ALIASES = {"val_acc": "val_accuracy", "acc": "accuracy"}


@dataclass(frozen=True)
class Rule:
    metric: str
    op: str
    value: float

    def holds(self, left: float, right: float) -> bool:
        return _OPS[self.op](left, right)


def parse_rule(text: str, flag: str = "--early-stopping") -> Rule:
    """``"val_loss,<,4"`` -> Rule("val_loss", "<", 4.0); a one-line ConfigError otherwise."""
    parts = [p.strip() for p in str(text).split(",")]
    example = "val_loss,<,4" if "early" in flag else "val_accuracy,>,0.95"
    if len(parts) != 3 or not parts[0]:
        raise ConfigError(f"{flag} {text!r} is not metric,comparison,value; write e.g. {example}")
    metric, op, raw = parts
    op = op.lstrip("~")
    if op not in _OPS:
        raise ConfigError(f"{flag} {text!r}: comparison {parts[1]!r} is not one of < > <= >=; e.g. {example}")
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{flag} {text!r}: {raw!r} is not a number; e.g. {example}") from None
    if not math.isfinite(value):
        raise ConfigError(f"{flag} {text!r}: {raw!r} is not a finite number; e.g. {example}")
    if "early" in flag and (value < 1 or value != int(value)):
        raise ConfigError(f"{flag} {text!r}: patience must be a whole number of epochs >= 1")
    return Rule(_ALIASES.get(metric, metric), op, value)
