"""Population-based training (Jaderberg et al., arXiv:1711.09846), asynchronous. Pure: no MPI, no files.

A population of ``--population P`` trials trains in steps of ``--pbt-interval`` epochs (rung ``k`` is
``(k + 1) * interval`` epochs; the last rung is ``--epochs``). Whenever a member has finished a step and
nothing else is more urgent, a free block takes the member that has trained the least (so the population
stays in step even with fewer blocks than members) and:

* **exploit**: if the member is in the bottom ``quantile`` of the population at that step (each member's
  value at that step, or at its latest step below it), a member of the top ``quantile`` is drawn as the donor;
  a *new trial* starts from the donor's checkpoint and takes the place of the bottom member, which stops;
* **explore**: the new trial's hyperparameters are the donor's, perturbed (:func:`explore`);
* otherwise the member simply trains on to its next step, resuming its own checkpoint.

Every exploit is a new trial (a new id, its own row in ``trials.csv``) with ``parent`` (the donor) and
``replaces`` (the member it took the place of): the lineage. The trial budget (``--num-iterations``) counts
the initial population and every child, so it also bounds how often the population exploits; once it is
spent the members train on to ``--epochs`` without exploiting (a budget below the population starts what it
allows: the population, part of the search's identity, does not depend on the budget, so a search resumed
with a larger one is the same search). The search ends when every living member has reached ``--epochs``.

A child that fails gives its place back: the member it was to replace stopped at a step with its checkpoint
and trains on (or is exploited again). A member that fails itself leaves a place that a fresh trial takes
while the budget lasts, so the population does not shrink while there is budget to keep it.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from nnlo.optimize.schedules.base import Job, Ledger, ScheduleSpec, TrialView
from nnlo.optimize.space import Categorical, Integer, Real, Space

#: explore's factors for a real parameter (and for a log-uniform integer one)
FACTORS = (0.8, 1.2)
#: explore's move of a uniform integer parameter: this share of its range (at least 1)
INTEGER_SHARE = 0.1


def steps(interval: int, max_epochs: int) -> tuple[int, ...]:
    """The epochs at the end of each step: ``interval, 2 * interval, ...`` below ``max_epochs``, then it."""
    return (*range(interval, max_epochs, interval), max_epochs)


def perturb(dim: Any, value: Any, rng: np.random.Generator) -> Any:
    """One parameter, perturbed, clipped to its range: a real times 0.8 or 1.2; an integer moved up or down
    by a step scaled to its range (a tenth of a uniform range, a factor 0.8 or 1.2 of a log-uniform one's
    value; at least 1, and the other way at an end); a choice moved to a neighbouring value (the only
    neighbour at an end)."""
    if isinstance(dim, Categorical):
        cats = list(dim.categories)
        i = dim.index(value)
        if i is None:  # not one of its values (a space changed since): a fresh draw
            return dim.sample(rng)
        moves = [j for j in (i - 1, i + 1) if 0 <= j < len(cats)]
        return cats[moves[int(rng.integers(len(moves)))]] if moves else value
    if isinstance(dim, Integer):
        up = rng.uniform() < 0.5
        moved = dim.clip(_integer_move(dim, int(value), up))
        return moved if moved != value else dim.clip(_integer_move(dim, int(value), not up))
    if isinstance(dim, Real):
        return dim.clip(float(value) * FACTORS[int(rng.integers(2))])
    return value


def _integer_move(dim: Integer, value: int, up: bool) -> int:
    """``value`` moved one step up or down (unclipped); halves round up."""
    if dim.prior == "log-uniform":
        step = abs(_half_up(value * FACTORS[1 if up else 0]) - value)
    else:
        step = _half_up(INTEGER_SHARE * (dim.high - dim.low))
    step = max(1, step)
    return value + step if up else value - step


def _half_up(x: float) -> int:
    return math.floor(x + 0.5)


def explore(space: Space, params: Mapping[str, Any], rng: np.random.Generator, resample: float) -> dict[str, Any]:
    """The donor's point perturbed: each active parameter is drawn afresh from its prior with probability
    ``resample``, else :func:`perturb`\\ ed; a choice that switches branch gets fresh values for the
    parameters that become active."""
    out: dict[str, Any] = {}
    for dim in space.active(params):
        name = str(dim.name)
        out[name] = dim.sample(rng) if rng.uniform() < resample else perturb(dim, params[name], rng)
    return space.point(space.complete(out, rng))


def quantile_size(n: int, quantile: float) -> int:
    """How many members form the bottom (and the top) quantile of ``n``: at least 1, at most half."""
    return max(1, min(n // 2, math.floor(n * quantile + 1e-9))) if n >= 2 else 0


def donor_for(members: Sequence[TrialView], member: TrialView, rung: int, quantile: float,
              rng: np.random.Generator) -> TrialView | None:
    """The member ``member`` copies at ``rung`` if it is in the bottom quantile (a top-quantile member drawn
    at random), else None."""
    scored = [(t.value_at(rung), t.id, t) for t in members]
    ranked = [t for v, _, t in sorted((s for s in scored if s[0] is not None), key=lambda s: (s[0], s[1]))]
    cut = quantile_size(len(ranked), quantile)
    if cut == 0 or member.id not in {t.id for t in ranked[-cut:]}:
        return None
    top = ranked[:cut]
    return top[int(rng.integers(len(top)))]


@dataclass
class Pbt:
    """``--schedule pbt``: steps of ``interval`` epochs, exploit and explore between steps."""

    spec: ScheduleSpec
    space: Space

    def __post_init__(self) -> None:
        self.budgets = steps(self.spec.interval, self.spec.max_epochs)

    def living(self, trials: Iterable[TrialView]) -> list[TrialView]:
        """The population now: trials neither failed nor replaced by a child that lives (a child that fails
        gives its place back to the member it was to replace, which stopped at a step and trains on)."""
        trials = list(trials)
        replaced = {t.replaces for t in trials if t.replaces is not None and not t.failed}
        return [t for t in trials if t.id not in replaced and not t.failed]

    def next_job(self, trials: Ledger, *, new: bool, rng: np.random.Generator) -> Job | None:
        members = self.living(trials)
        if new and len(members) < self.spec.population:  # filling the population, or a failed member's place
            return Job(rung=0, epochs=self.budgets[0])
        top = len(self.budgets) - 1
        ready = [t for t in members if t.running is None and t.top is not None and t.top < top]
        if not ready:
            return None
        member = min(ready, key=lambda t: (t.top, t.id))
        rung = (member.top or 0) + 1  # ready members have a result
        if new:
            donor = donor_for(members, member, rung - 1, self.spec.quantile, rng)
            if donor is not None:
                params = explore(self.space, donor.params, rng, self.spec.resample)
                return Job(rung=rung, epochs=self.budgets[rung], params=params, parent=donor.id,
                           replaces=member.id)
        return Job(rung=rung, epochs=self.budgets[rung], trial=member.id)

    def completed(self, trial: TrialView) -> bool:
        return trial.top == len(self.budgets) - 1
