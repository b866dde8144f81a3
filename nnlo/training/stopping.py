"""Early stopping and target metrics, from the upstream ``metric,comparison,value`` strings.

``--early-stopping val_loss,<,4``: stop when ``val_loss`` has not become lower than its best value for 4
epochs in a row (patience). ``--target-metric val_accuracy,>,0.95``: stop as soon as the metric is above
0.95. Comparisons: ``<``, ``>``, ``<=``, ``>=``; the upstream spellings ``~<`` and ``~>`` mean the same as
``<`` and ``>`` (upstream silently never fired with the plain ones; here both work).
Metric aliases: ``val_acc`` = ``val_accuracy``, ``acc`` = ``accuracy``.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nnlo.errors import ConfigError
from nnlo.stop_rules import Rule, parse_rule

__all__ = ["Rule", "Stopper", "parse_rule"]


def _lookup(metrics: Mapping[str, Any], rule: Rule, flag: str) -> float:
    if rule.metric not in metrics or metrics[rule.metric] is None:
        have = ", ".join(sorted(k for k, v in metrics.items() if isinstance(v, (int, float))))
        raise ConfigError(f"{flag} uses metric {rule.metric!r} which this run does not produce; available: {have}")
    return float(metrics[rule.metric])


@dataclass
class Stopper:
    """Decides after each epoch whether to stop; its state is saved in checkpoints."""

    early: Rule | None = None
    target: Rule | None = None
    best: float | None = None
    bad_epochs: int = 0

    @classmethod
    def from_config(cls, early_stopping: str | None, target_metric: str | None) -> Stopper:
        return cls(
            parse_rule(early_stopping, "--early-stopping") if early_stopping else None,
            parse_rule(target_metric, "--target-metric") if target_metric else None,
        )

    def update(self, metrics: Mapping[str, Any]) -> str | None:
        """Feed one epoch's metrics; returns ``"early_stopping"``, ``"target_metric"`` or None."""
        reason = None
        if self.early is not None:
            value = _lookup(metrics, self.early, "--early-stopping")
            if self.best is None or (math.isfinite(value) and self.early.holds(value, self.best)):
                self.best, self.bad_epochs = value, 0
            else:
                self.bad_epochs += 1
                if self.bad_epochs >= int(self.early.value):
                    reason = "early_stopping"
        if self.target is not None:
            value = _lookup(metrics, self.target, "--target-metric")
            if self.target.holds(value, self.target.value):
                reason = "target_metric"
        return reason

    def state_dict(self) -> dict[str, Any]:
        return {"best": self.best, "bad_epochs": self.bad_epochs}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.best = state.get("best")
        self.bad_epochs = int(state.get("bad_epochs", 0))
