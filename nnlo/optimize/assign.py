"""Which job an idle block gets (``--assign``): FIFO, or hardware-aware placement. No MPI, no clock.

The search (:mod:`nnlo.optimize.search`) keeps a small pool of proposed points and the trials to re-run; when a
block frees up it asks its :class:`Policy`, with the moment (:class:`Situation`: the time, the deadline, what
runs where, how many trials remain), which one the block gets.

* :class:`Fifo` - the pool holds one point; trials to re-run go first, then the next proposal: nnlo's
  behaviour before policies existed. Its walltime rule is the coordinator's: no hand-out once the median trial
  would not finish before the deadline.
* :class:`HardwareAware` - :mod:`nnlo.optimize.placement`: a cost model per (trial class, block type) learnt
  from every job that ran, memory feasibility, walltime fit per job and block, and the tail of a small batch.

The policy learns from the search's cost observations (:class:`~nnlo.optimize.placement.costs.CostObservation`,
each with the trial's parameters), which the search keeps in its state (a shared search: in its journal).
"""
from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from nnlo.optimize.placement import (
    MORE,
    WAIT,
    BlockType,
    Busy,
    CostModel,
    CostObservation,
    Job,
    MemoryModel,
    Moment,
    Placement,
    Traits,
    TraitsOf,
    differ,
)
from nnlo.optimize.placement.costs import features
from nnlo.optimize.placement.traits import top_level_choice as default_subspace

Point = dict[str, Any]

#: the policies by ``--assign`` name; "auto" is resolved by :func:`resolve`
POLICIES = ("fifo", "hardware-aware")
ASSIGN_CHOICES = ("auto", *POLICIES)

__all__ = ["ASSIGN_CHOICES", "MORE", "POLICIES", "WAIT", "Candidate", "Fifo", "HardwareAware", "Policy",
           "Situation", "as_types", "default_subspace", "features", "make_policy", "resolve"]


def as_types(blocks: Sequence[int] | Sequence[BlockType]) -> list[BlockType]:
    """Block types from types, or from block sizes alone (ranks only: nothing else known)."""
    return [b if isinstance(b, BlockType) else BlockType(int(b)) for b in blocks]


def resolve(name: str, blocks: Sequence[int] | Sequence[BlockType]) -> str:
    """``auto``: hardware-aware when the blocks differ (in size, GPUs, memory or node type), else FIFO."""
    if name == "auto":
        return "hardware-aware" if differ(as_types(blocks)) else "fifo"
    if name not in POLICIES:
        raise ValueError(f"--assign {name!r} is unknown; use one of {', '.join(ASSIGN_CHOICES)}")
    return name


@dataclass
class Candidate:
    """A point a block may get: a pooled proposal, or a trial to re-run (``trial``)."""

    point: Point
    age: int = 0  # hand-outs since it was proposed
    trial: Any = None  # the Trial to re-run (restored after a stop, or out of memory on another block)
    work: float = 1.0  # the share of a whole trial the job is (a schedule's stage: less)


@dataclass(frozen=True)
class Running:
    """A trial running on ``block`` since ``started``."""

    block: int
    params: Mapping[str, Any]
    started: float
    work: float = 1.0


@dataclass(frozen=True)
class Situation:
    """What goes on when a block asks (see :class:`~nnlo.optimize.placement.policy.Moment`)."""

    now: float = 0.0
    idle: tuple[int, ...] = ()
    running: tuple[Running, ...] = ()
    remaining: int | None = None  # trials still to hand out (pooled and to re-run included)
    deadline: float | None = None


class Policy(Protocol):
    name: str
    #: True: the policy checks each job against the deadline (the coordinator's median rule is off)
    fits_deadline: bool

    def pool_size(self, n_blocks: int, remaining: int | None = None) -> int:
        """How many proposals to keep ready (``remaining``: trials still to hand out)."""
        ...

    def learn(self, observations: Sequence[tuple[CostObservation, Mapping[str, Any] | None]]) -> None:
        """Update from every cost observation so far (with the trial's parameters where known)."""
        ...

    def choose(self, block: int, candidates: Sequence[Candidate], situation: Situation) -> int:
        """The index of the candidate ``block`` gets, :data:`WAIT` or :data:`MORE`."""
        ...

    def placeable(self, params: Mapping[str, Any]) -> str | None:
        """None if some block of this job may hold ``params``; else why none can."""
        ...

    def fits_type(self, params: Mapping[str, Any], block_type: BlockType) -> bool:
        """A block of ``block_type`` (of this job or another) may hold ``params`` (memory)."""
        ...


class Fifo:
    name = "fifo"
    fits_deadline = False

    def pool_size(self, n_blocks: int, remaining: int | None = None) -> int:
        return 1

    def learn(self, observations: Sequence[tuple[CostObservation, Mapping[str, Any] | None]]) -> None:
        pass

    def choose(self, block: int, candidates: Sequence[Candidate], situation: Situation) -> int:
        return 0 if candidates else MORE

    def placeable(self, params: Mapping[str, Any]) -> str | None:
        return None

    def fits_type(self, params: Mapping[str, Any], block_type: BlockType) -> bool:
        return True


@dataclass
class HardwareAware:
    """Placement (:mod:`nnlo.optimize.placement`) over the blocks of this job."""

    space: Any
    block_types: Sequence[BlockType]
    traits_of: Callable[[Mapping[str, Any]], Traits] | None = None
    checkpoint_share: Callable[[Mapping[str, Any]], float] = lambda p: 1.0
    options: dict[str, Any] = field(default_factory=dict)  # Placement's knobs (tail_factor, cheaper, ...)
    name: str = "hardware-aware"
    fits_deadline: bool = True

    def __post_init__(self) -> None:
        self.block_types = as_types(self.block_types)
        if self.traits_of is None:
            self.traits_of = TraitsOf(self.space)
        self.model = CostModel(self.space)
        # without a trial_size hook sizes order nothing: an out-of-memory rules out its own trial only
        self.memory = MemoryModel(sized="trial_size" in getattr(self.traits_of, "declared", ("trial_size",)))
        self.placement = Placement(self.block_types, self.model, self.memory, **self.options)
        self._traits: dict[str, Traits] = {}

    def traits(self, params: Mapping[str, Any]) -> Traits:
        key = json.dumps(params, sort_keys=True, default=str)
        got = self._traits.get(key)
        if got is None:
            assert self.traits_of is not None
            got = self._traits[key] = self.traits_of(params)
        return got

    def job(self, params: Mapping[str, Any], age: int = 0, work: float = 1.0) -> Job:
        """``checkpoint_share`` is the share of a whole trial before its first checkpoint: of a job that is only
        ``work`` of a trial (a stage), that is a larger share, at most all of it."""
        return Job(params, self.traits(params), work, age, min(1.0, self.checkpoint_share(params) / work))

    def pool_size(self, n_blocks: int, remaining: int | None = None) -> int:
        return self.placement.pool_size(remaining)

    def learn(self, observations: Sequence[tuple[CostObservation, Mapping[str, Any] | None]]) -> None:
        self.model.fit(observations)
        self.memory.learn(observations)

    def choose(self, block: int, candidates: Sequence[Candidate], situation: Situation) -> int:
        jobs = [self.job(c.point, c.age, c.work) for c in candidates]
        moment = Moment(situation.now, situation.idle,
                        tuple(Busy(r.block, self.job(r.params, work=r.work), r.started) for r in situation.running),
                        situation.remaining, situation.deadline)
        return self.placement.choose(block, jobs, moment)

    def placeable(self, params: Mapping[str, Any]) -> str | None:
        traits = self.traits(params)
        if self.placement.placeable(self.job(params)):
            return None
        why = sorted({w for t in self.placement.distinct if (w := self.memory.why_not(traits, t))})
        return "; ".join(why) or "it fits no block"

    def fits_type(self, params: Mapping[str, Any], block_type: BlockType) -> bool:
        return self.memory.fits(self.traits(params), block_type)


def make_policy(name: str, space: Any, blocks: Sequence[int] | Sequence[BlockType],
                traits_of: Callable[[Mapping[str, Any]], Traits] | None = None,
                checkpoint_share: Callable[[Mapping[str, Any]], float] | None = None,
                **options: Any) -> Policy:
    """The policy named by ``--assign`` (``auto`` resolved against the blocks' types or sizes)."""
    if resolve(name, blocks) == "fifo":
        return Fifo()
    return HardwareAware(space, as_types(blocks), traits_of, checkpoint_share or (lambda p: 1.0), dict(options))
