"""What a trial costs on a block type, learnt online from the jobs that ran: :class:`CostModel`. Pure.

Every job a block runs (a whole trial, or under a schedule one stage of one) leaves a :class:`CostObservation`:
the trial, its class and size (:mod:`.traits`), the block's type (:mod:`.hardware`), the share of a whole trial
it was (``work``), its seconds and how it ended (``ok``, ``failed``, ``oom``: out of memory, ``cut``: stopped
by the deadline before its first checkpoint). A search keeps them in its state, a shared search in its
journal, so every participant learns from every block of every job.

**The model** (ridge regression on the ``ok`` observations)::

    log seconds = log work + log size + w . features(params) + c[class] - log prior_speed(type)
                  + t[type] + d[class, type] + noise

``features`` are the parameters in unit coordinates and their squares (one-hot categories, a flag for an
inactive parameter of a tree space); ``c`` is free; ``t`` (how fast a type is beyond its prior, the rank count)
and ``d`` (how much a class gains or loses on a type beyond that) are shrunk toward 0, so before a class has run
on a type it is predicted from the type's speed over every class, and before a type has run anything from its
ranks.

The dropped assumption: the ridge regression before this (``log duration = w . features - log speed(block)``)
had one speed per block for every trial - cost x speed separates, so placement could not change the trials per
hour. ``d[class, type]`` is a speed per class and type: a class that gains 10x on GPU blocks and one that does
not are told apart. Kept: within a class, a parameter scales the duration by the same factor on every type.

:meth:`CostModel.upper` is the prediction plus ``z`` predictive standard deviations (log scale; the residuals'
and the coefficients' spread, so a job unlike those seen gets a wide margin): what a deadline is checked against.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from nnlo.optimize.placement.hardware import BlockType
from nnlo.optimize.placement.traits import Traits

#: how a job ended, as a cost observation records it
OUTCOMES = ("ok", "failed", "oom", "cut")
#: the most recent observations a fit uses (each fit is a small least-squares problem over them)
MAX_OBSERVATIONS = 2000


@dataclass(frozen=True)
class CostObservation:
    """One job a block ran, as the cost and memory models see it."""

    trial: int
    cls: str
    size: float
    block_type: BlockType
    seconds: float
    outcome: str = "ok"
    work: float = 1.0  # the share of a whole trial this job was (a schedule's stage: less than 1)
    memory_gb: float | None = None  # what the trial declared (trial_memory)

    def to_record(self) -> dict[str, Any]:
        """The fields of a journal ``cost`` record / a state's ``costs`` entry."""
        rec: dict[str, Any] = {"id": self.trial, "class": self.cls, "size": self.size,
                               "type": self.block_type.to_dict(), "seconds": round(self.seconds, 6),
                               "outcome": self.outcome, "work": self.work}
        if self.memory_gb is not None:
            rec["memory_gb"] = self.memory_gb
        return rec

    @classmethod
    def from_record(cls, d: Mapping[str, Any]) -> CostObservation:
        """The observation :meth:`to_record` wrote; KeyError/TypeError/ValueError on a malformed one."""
        outcome = str(d["outcome"])
        seconds, size, work = float(d["seconds"]), float(d.get("size", 1.0)), float(d.get("work", 1.0))
        mem = d.get("memory_gb")
        if outcome not in OUTCOMES or not (seconds >= 0 and size > 0 and work > 0) or not math.isfinite(seconds):
            raise ValueError(f"not a cost observation: {dict(d)}")
        return cls(int(d["id"]), str(d["class"]), size, BlockType.from_dict(d["type"]), seconds, outcome, work,
                   None if mem is None else float(mem))


def features(space: Any, params: Mapping[str, Any] | None) -> list[float]:
    """A point as numbers: a numeric dimension's unit coordinate and its square (costs curve: epochs, widths),
    one-hot categories, zeros and a flag for an inactive or unreadable parameter (all zeros for no point)."""
    out: list[float] = []
    for dim in space:
        value = None if params is None else params.get(dim.name)
        categories = getattr(dim, "categories", None)
        if categories is not None:
            out.extend(1.0 if value == c else 0.0 for c in categories)
            continue
        try:
            u = float(dim.to_unit(value))
        except (TypeError, ValueError):
            u = math.nan
        out.extend((u, u * u, 0.0) if math.isfinite(u) else (0.0, 0.0, 0.0 if params is None else 1.0))
    return out


class CostModel:
    """Seconds of a job on a block type (see the module's docstring). :meth:`fit`, then ask."""

    def __init__(self, space: Any, *, ridge: float = 0.1, type_ridge: float = 0.5, pair_ridge: float = 1.0,
                 min_observations: int = 3) -> None:
        self.space = space
        self.ridge, self.type_ridge, self.pair_ridge = ridge, type_ridge, pair_ridge
        self.min_observations = min_observations
        self.n = 0
        self.sigma = 0.5  # residual standard deviation (log seconds) before any fit
        self._nf = len(features(space, None))
        self._coef: np.ndarray = np.zeros(self._nf)
        self._cov: np.ndarray = np.zeros((self._nf, self._nf))  # (X'X + penalty)^-1: the coefficients' spread
        self._ci: dict[str, int] = {}  # column of each class, type and (class, type) pair seen
        self._ti: dict[BlockType, int] = {}
        self._pi: dict[tuple[str, BlockType], int] = {}
        self._c_mean = 0.0

    @property
    def classes(self) -> list[str]:
        """The trial classes the model has seen run."""
        return sorted(self._ci)

    @property
    def ready(self) -> bool:
        """Enough jobs finished to predict from (before: only the size hints and the types' ranks)."""
        return self.n >= self.min_observations

    def fit(self, data: Sequence[tuple[CostObservation, Mapping[str, Any] | None]]) -> CostModel:
        """Refit on every ``ok`` observation (with the trial's parameters, None where unknown)."""
        rows = [(o, p) for o, p in data if o.outcome == "ok" and o.seconds > 0][-MAX_OBSERVATIONS:]
        self.n = len(rows)
        if not rows:
            return self
        nf = self._nf
        classes = sorted({o.cls for o, _ in rows})
        types = sorted({o.block_type for o, _ in rows}, key=lambda t: t.key)
        pairs = sorted({(o.cls, o.block_type) for o, _ in rows}, key=lambda ct: (ct[0], ct[1].key))
        self._ci = {c: nf + i for i, c in enumerate(classes)}
        self._ti = {t: nf + len(classes) + i for i, t in enumerate(types)}
        self._pi = {p: nf + len(classes) + len(types) + i for i, p in enumerate(pairs)}
        width = nf + len(classes) + len(types) + len(pairs)
        x = np.array([self._row(p, o.cls, o.block_type, width) for o, p in rows])
        y = np.array([math.log(o.seconds) - self._offset(o.work, o.size, o.block_type) for o, _ in rows])
        penalty = np.concatenate([np.full(nf, self.ridge), np.full(len(classes), 1e-6),
                                  np.full(len(types), self.type_ridge), np.full(len(pairs), self.pair_ridge)])
        self._cov = np.linalg.inv(x.T @ x + np.diag(penalty))
        self._coef = self._cov @ (x.T @ y)
        self._c_mean = float(np.mean([self._coef[i] for i in self._ci.values()]))
        resid = y - x @ self._coef
        used = float(np.trace(x @ self._cov @ x.T))  # the fit's effective number of parameters
        rms = math.sqrt(float(resid @ resid) / max(1.0, len(rows) - used))
        self.sigma = max(0.05, rms, 0.3 if len(rows) < 2 * self.min_observations else 0.0)
        return self

    def _row(self, params: Mapping[str, Any] | None, cls: str, block_type: BlockType, width: int) -> np.ndarray:
        """The design row of a job (the columns of a class, type or pair never seen stay 0)."""
        row = np.zeros(width)
        row[:self._nf] = features(self.space, params)
        for column in (self._ci.get(cls), self._ti.get(block_type), self._pi.get((cls, block_type))):
            if column is not None:
                row[column] = 1.0
        return row

    @staticmethod
    def _offset(work: float, size: float, block_type: BlockType) -> float:
        return math.log(work) + math.log(size) - math.log(block_type.prior_speed)

    def _predict(self, params: Mapping[str, Any] | None, traits: Traits, block_type: BlockType,
                 work: float) -> tuple[float, float]:
        """(mean, standard deviation) of the job's log seconds."""
        row = self._row(params, traits.cls, block_type, len(self._coef))
        mean = self._offset(work, traits.size, block_type) + float(row @ self._coef)
        spread = self.sigma * math.sqrt(1.0 + float(row @ self._cov @ row))
        if traits.cls not in self._ci:  # a class never seen: its level is the others' mean, give or take
            mean += self._c_mean
            spread += 0.5
        return mean, spread

    def log_seconds(self, params: Mapping[str, Any] | None, traits: Traits, block_type: BlockType,
                    work: float = 1.0) -> float:
        return self._predict(params, traits, block_type, work)[0]

    def seconds(self, params: Mapping[str, Any] | None, traits: Traits, block_type: BlockType,
                work: float = 1.0) -> float:
        return math.exp(self.log_seconds(params, traits, block_type, work))

    def upper(self, params: Mapping[str, Any] | None, traits: Traits, block_type: BlockType, work: float = 1.0,
              z: float = 2.0) -> float:
        """A pessimistic duration: ``z`` predictive standard deviations above the prediction (the residuals'
        spread and the coefficients' own: wide for parameters, classes or types few jobs have shown)."""
        mean, spread = self._predict(params, traits, block_type, work)
        return math.exp(mean + z * spread)
