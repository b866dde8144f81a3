"""What every schedule shares: its options, the view it has of the trials, the job it hands out.

A schedule decides *what a free block does next*: start a new trial at some budget, or train an existing
trial further (it resumes from its own checkpoint). It sees the trials only through :class:`TrialView`
(pure data: the value each trial reached at each rung, whether a job of it is under way), held in a
:class:`Ledger` that also keeps each rung's trials ranked (so a decision does not sort thousands of trials),
and answers with a :class:`Job`; it keeps no state of its own, so any process that has the same trials (one
job's coordinator, or any participant of a shared search after reading the journal) takes the same
decision, and a search restored from its files continues exactly.

Budgets are *epochs* (the fidelity): rung ``k`` of a schedule is ``budgets[k]`` epochs in total. Values
are minimised (a ``max`` figure of merit is negated before it gets here); ``None`` is a failed trial.
"""
from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import numpy as np

#: ``--schedule`` names; ``full`` trains every trial to ``--epochs`` (no schedule object)
SCHEDULES = ("full", "asha", "hyperband", "pbt")
#: ASHA's reduction factor (eta) when none is given: keep the top third of every rung
DEFAULT_ETA = 3.0
#: ASHA's and Hyperband's lowest rung (epochs) when none is given
DEFAULT_MIN_EPOCHS = 1
#: PBT: the steps in ``--epochs`` when no interval is given (an interval of a tenth of the epochs, at least 1)
PBT_STEPS = 10
#: PBT: the population when none is given (at most --num-iterations): Ray Tune's examples use 4-8; the budget
#: of trials beyond it is what the exploits spend, and a fixed default stays the same when the budget is raised
PBT_POPULATION = 8
#: PBT: the bottom (and top) fraction of the population that exploits (is copied)
PBT_QUANTILE = 0.25
#: PBT: the probability that explore draws a parameter afresh from its prior instead of perturbing it
PBT_RESAMPLE = 0.25


def pbt_interval(epochs: int) -> int:
    """PBT's epochs per step where ``--pbt-interval`` is not given: a :data:`PBT_STEPS`-th of ``epochs``, >= 1."""
    return max(1, epochs // PBT_STEPS)


class ScheduleError(ValueError):
    """Options no schedule can run; the message names the option and the fix (one line)."""


@dataclass(frozen=True)
class ScheduleSpec:
    """A schedule's options, resolved (``--schedule``, ``--min-epochs``, ``--reduction-factor``, ``--epochs``,
    ``--population``, ``--pbt-interval``): stored with the search state and in a shared search's identity."""

    name: str = "full"
    max_epochs: int = 1
    min_epochs: int = DEFAULT_MIN_EPOCHS
    eta: float = DEFAULT_ETA
    population: int = 0  # PBT only
    interval: int = 0  # PBT only: epochs per step
    quantile: float = PBT_QUANTILE
    resample: float = PBT_RESAMPLE

    def __post_init__(self) -> None:
        problem = self.problem()
        if problem:
            raise ScheduleError(problem)

    def problem(self) -> str | None:
        if self.name not in SCHEDULES:
            return f"--schedule {self.name!r} is unknown; use one of {', '.join(SCHEDULES)}"
        if not _whole(self.max_epochs, 1):
            return f"--epochs must be an integer >= 1, got {self.max_epochs!r}"
        if self.name == "full":
            return None
        if not _whole(self.min_epochs, 1):
            return f"--min-epochs must be an integer >= 1, got {self.min_epochs!r}"
        if self.min_epochs > self.max_epochs:
            return (f"--min-epochs {self.min_epochs} is above --epochs {self.max_epochs} (the most a trial trains); "
                    f"lower --min-epochs or raise --epochs")
        if not (isinstance(self.eta, (int, float)) and math.isfinite(self.eta) and self.eta >= 2):
            return (f"--reduction-factor {self.eta!r} must be a number >= 2 (eta: each rung keeps the best 1/eta "
                    f"of the one below; 3 is usual)")
        if self.name == "pbt":
            if not _whole(self.population, 2):
                return f"--population must be an integer >= 2 for --schedule pbt, got {self.population!r}"
            if not _whole(self.interval, 1) or self.interval > self.max_epochs:
                return (f"--pbt-interval {self.interval!r} must be a whole number of epochs between 1 and --epochs "
                        f"{self.max_epochs}")
            if not (0 < self.quantile <= 0.5 and 0 <= self.resample <= 1):
                return f"PBT quantile {self.quantile} must be in (0, 0.5] and resample {self.resample} in [0, 1]"
        return None

    @property
    def staged(self) -> bool:
        """Whether trials train in stages (resuming their checkpoints): every schedule but ``full``."""
        return self.name != "full"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> ScheduleSpec:
        return cls(**dict(data)) if data else cls()


def _whole(value: Any, low: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


@dataclass(frozen=True)
class TrialView:
    """One trial as a schedule sees it.

    results: the minimised value reached at each rung (``None``: the trial failed there).
    running: the rung a job of this trial is training toward now (or queued to re-run); None when idle.
    """

    id: int
    results: Mapping[int, float | None] = field(default_factory=dict)
    running: int | None = None
    bracket: int = 0
    params: Mapping[str, Any] = field(default_factory=dict)
    parent: int | None = None
    replaces: int | None = None

    @property
    def failed(self) -> bool:
        return any(v is None for v in self.results.values())

    @property
    def top(self) -> int | None:
        """The highest rung with a result (None: none yet)."""
        return max(self.results) if self.results else None

    def reached(self, rung: int) -> bool:
        """A result at ``rung`` or above, or a job training toward one: the trial has left ``rung``."""
        top = self.top
        return (top is not None and top > rung) or (self.running is not None and self.running > rung)

    def value_at(self, rung: int) -> float | None:
        """Its value at ``rung``, else at the highest rung below it (None: no such result, or failed)."""
        below = [r for r in self.results if r <= rung]
        return self.results[max(below)] if below else None


class Ledger:
    """The trials a schedule decides on, by id, with every rung's results kept ranked (best first, failures
    last, ties by id) over all trials and per bracket. Updated one trial at a time (:meth:`update`: a result
    only ever adds a rung), so a decision costs what reading the top of a rung costs, not a sort."""

    def __init__(self, trials: Iterable[TrialView] = ()) -> None:
        self._by_id: dict[int, TrialView] = {}
        self._ranked: dict[tuple[int, int | None], list[tuple[float, int]]] = {}
        self._idle: dict[tuple[int, int | None], list[tuple[float, int]]] = {}  # still at their top rung
        self._brackets: dict[int, int] = {}
        for t in trials:
            self.update(t)

    def update(self, trial: TrialView) -> None:
        """Add ``trial`` or replace its older view (which had a subset of its results)."""
        old = self._by_id.get(trial.id)
        if old is None:
            self._brackets[trial.bracket] = self._brackets.get(trial.bracket, 0) + 1
        for rung, value in trial.results.items():
            if old is not None and rung in old.results:
                continue
            for scope in ((rung, None), (rung, trial.bracket)):
                bisect.insort(self._ranked.setdefault(scope, []), _key(value, trial.id))
        before, after = _idle_at(old), _idle_at(trial)
        if before != after:
            for view, at, insert in ((old, before, False), (trial, after, True)):
                if view is None or at is None:
                    continue
                key = _key(view.results[at], view.id)
                for scope in ((at, None), (at, view.bracket)):
                    keys = self._idle.setdefault(scope, [])
                    if insert:
                        bisect.insort(keys, key)
                    else:
                        del keys[bisect.bisect_left(keys, key)]
        self._by_id[trial.id] = trial

    def __iter__(self) -> Iterator[TrialView]:
        return iter(self._by_id.values())

    def __len__(self) -> int:
        return len(self._by_id)

    def get(self, tid: int) -> TrialView | None:
        return self._by_id.get(tid)

    def ranked(self, rung: int, bracket: int | None = None) -> list[TrialView]:
        """The trials with a result at ``rung`` (of ``bracket`` only, if given), best first."""
        return [self._by_id[i] for _, i in self._ranked.get((rung, bracket), [])]

    def top(self, rung: int, n: int, bracket: int | None = None) -> Iterator[TrialView]:
        """The best ``n`` trials at ``rung`` (of ``bracket``), best first, without listing the others."""
        for _, i in self._ranked.get((rung, bracket), [])[:n]:
            yield self._by_id[i]

    def best_idle(self, rung: int, bracket: int | None = None) -> tuple[TrialView, int] | None:
        """The best trial that stands idle at ``rung`` (its highest, no job running, not failed) and its rank
        among all of the rung's results (0: the best); None if there is none."""
        keys = self._idle.get((rung, bracket))
        if not keys:
            return None
        return self._by_id[keys[0][1]], bisect.bisect_left(self._ranked[(rung, bracket)], keys[0])

    def count(self, rung: int, bracket: int | None = None) -> int:
        """How many trials have a result at ``rung`` (of ``bracket``)."""
        return len(self._ranked.get((rung, bracket), ()))

    def started(self, bracket: int) -> int:
        """How many trials ``bracket`` has (started or not)."""
        return self._brackets.get(bracket, 0)


def _key(value: float | None, tid: int) -> tuple[float, int]:
    return (math.inf if value is None else value, tid)


def _idle_at(trial: TrialView | None) -> int | None:
    """The rung ``trial`` stands idle at (its highest, no job running, a result there), or None."""
    if trial is None or trial.running is not None:
        return None
    top = trial.top
    return top if top is not None and trial.results[top] is not None else None


@dataclass(frozen=True)
class Job:
    """What a free block does: train ``trial`` (None: a new one) until rung ``rung`` (``epochs`` in total).

    A new trial may come with ``params`` chosen by the schedule (PBT's explore; None: the engine proposes)
    and start from another trial's checkpoint (``parent``, PBT's exploit), taking the place of ``replaces``
    in the population.
    """

    rung: int
    epochs: int
    trial: int | None = None
    bracket: int = 0
    params: dict[str, Any] | None = None
    parent: int | None = None
    replaces: int | None = None

    @property
    def new(self) -> bool:
        return self.trial is None


class Schedule(Protocol):
    """The one interface the coordinator calls: :meth:`next_job` (pure) and :meth:`completed`."""

    spec: ScheduleSpec
    budgets: tuple[int, ...]  # epochs at each rung, increasing; the last is ``spec.max_epochs``

    def next_job(self, trials: Ledger, *, new: bool, rng: np.random.Generator) -> Job | None:
        """The next job for a free block, or None (wait: nothing to do until a running job reports).

        ``new``: whether a new trial may be started (the budget of trials is not spent). ``rng``: for
        schedules that draw (PBT's explore); the same trials and stream give the same job.
        """
        ...

    def completed(self, trial: TrialView) -> bool:
        """Whether ``trial`` trained its whole budget (it reached the top rung)."""
        ...


def rung_of(budgets: Sequence[int], epochs: int) -> int:
    """The rung whose budget is ``epochs`` (else the highest rung below it; 0 below the first)."""
    below = [k for k, b in enumerate(budgets) if b <= epochs]
    return below[-1] if below else 0
