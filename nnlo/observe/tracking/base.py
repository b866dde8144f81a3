"""What the trackers share: the two kinds of tracker, what a finished trial tells them, and the figures of an entry.

A **training tracker** gets every epoch's history entry (``step`` = the epoch) and every ``--validate-every``
entry (``step`` = the master's update count) from the rank that writes ``history.json``; a **search tracker**
gets every trial the coordinator records (:class:`TrialReport`). Both are told once at the end how the run
ended. :class:`Trackers` sends one call to several (``--tensorboard`` and ``--mlflow`` together); the
backends are :mod:`~nnlo.observe.tracking.tensorboard` and :mod:`~nnlo.observe.tracking.mlflow`.

Pure: no backend package is imported here.
"""
from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from nnlo.contract import DISTRIBUTION
from nnlo.errors import ConfigError

log = logging.getLogger("nnlo.tracking")

#: the stopped reasons after which a run goes on in a later job (its tracking goes on in the same place)
RESUMABLE = ("deadline", "signal")
#: the key of the master's update count in a history entry (a ``--validate-every`` validation's step)
UPDATES = "updates"
#: the prefix of a ``--validate-every`` validation's figures (and TensorBoard's folder of them)
BY_UPDATE = "by_update"


class TrainingTracker(Protocol):
    def epoch(self, entry: Mapping[str, Any]) -> None: ...
    def validation(self, entry: Mapping[str, Any]) -> None: ...
    def close(self, stopped_reason: str) -> None: ...


@dataclass(frozen=True)
class TrialReport:
    """A trial the coordinator recorded: its name (``trial-0003``), hyperparameters, figure of merit (None:
    failed), the epochs it trained, the search's best figure of merit so far, and each fold's history entries
    (``(fold label, entries)``; one fold: label "")."""

    trial_id: int
    name: str
    params: Mapping[str, Any]
    fom_name: str
    fom: float | None
    epochs: int
    best: float | None = None  # the search's best figure of merit once this trial is recorded
    histories: Sequence[tuple[str, Sequence[Mapping[str, Any]]]] = field(default_factory=tuple)


class SearchTracker(Protocol):
    def trial(self, report: TrialReport) -> None: ...
    def close(self, done: bool) -> None: ...


def scalars(entry: Mapping[str, Any], skip: Sequence[str] = ("epoch",)) -> dict[str, float]:
    """The finite numbers of a history entry (booleans, text and the step's own key left out)."""
    return {k: float(v) for k, v in entry.items()
            if k not in skip and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


def param_value(value: Any) -> float | str | bool:
    """A hyperparameter as a tracker records it: a number, a flag, or its text."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return str(value)


def options(config: Mapping[str, Any]) -> dict[str, Any]:
    """A run's options as flat parameters: every field that is set, ``model_args`` as ``model_args.NAME``."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        if value is None or key in ("deadline",):
            continue
        if isinstance(value, Mapping):
            out.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            out[key] = value
    return out


def missing(option: str, package: str, extra: str) -> ConfigError:
    """The one line for a tracker whose package is not installed."""
    return ConfigError(f"{option} needs the {package} package: pip install '{DISTRIBUTION}[{extra}]'")


class Trackers:
    """Several trackers of one kind behind one: every call goes to each, in order. A tracker that fails (a full
    disk, a tracking server gone) is dropped with one warning; the run goes on, as with a failing timeline."""

    def __init__(self, trackers: Sequence[Any]) -> None:
        self.trackers = list(trackers)

    def __bool__(self) -> bool:
        return bool(self.trackers)

    def _each(self, method: str, *args: Any) -> None:
        for t in list(self.trackers):
            try:
                getattr(t, method)(*args)
            except Exception as e:  # noqa: BLE001 - tracking must not end a training or a search
                self.trackers.remove(t)
                log.warning("%s stops: %s: %s", type(t).__name__, type(e).__name__, " ".join(str(e).split())[:300])

    def epoch(self, entry: Mapping[str, Any]) -> None:
        self._each("epoch", entry)

    def validation(self, entry: Mapping[str, Any]) -> None:
        self._each("validation", entry)

    def trial(self, report: TrialReport) -> None:
        self._each("trial", report)

    def close(self, *args: Any) -> None:
        self._each("close", *args)
