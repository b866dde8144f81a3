"""Which job a free block takes: :meth:`Placement.choose`. Pure: no clock, no MPI, no files.

Given the free block, the jobs that may run (pooled proposals, trials to re-run; oldest first), the cost and
memory models and the moment (the time, the deadline, which blocks are busy with what, how many jobs remain),
the answer is the index of a job, :data:`WAIT` (nothing worth starting here now) or :data:`MORE` (ask the
engine for one more proposal, then choose again). In order:

1. **Memory.** Jobs that do not fit this block's type (:mod:`.memory`) are out, and so is a job of a class not
   yet proven to fit the type while another such job runs on a block of that type (*probing*, :mod:`.memory`).
2. **Walltime fit.** With a deadline, a job whose pessimistic duration (:meth:`.CostModel.upper`) to its first
   checkpoint (``Job.checkpoint``: the share of the job before its first checkpoint, 1 without checkpoints)
   ends after the deadline is out. Before the cost model has seen enough jobs nothing is ruled out.
3. **The tail.** When no more than ``tail_factor`` x blocks jobs remain (the whole rest of the budget is then
   pooled), the jobs are planned longest first, each on the block that would finish it earliest (busy blocks
   when their job is predicted to end): this block takes the first job the plan gives it, or waits. The longest
   predicted go to the fastest blocks and no large trial on a slow block sets the makespan.
4. **Steady state.** A block's *advantage* for a job is how much faster it runs the job than the job's other
   block types do on average (log scale; it depends on the job's class and the types only, the parameters
   scale every type alike). The job with the largest advantage here comes first (a GPU-hungry class on a GPU
   block); differences below ``tie`` count as none and the oldest job goes first, which is FIFO whenever speed
   does not depend on the class (and then placement cannot change the trials per hour: with every block busy,
   that is the blocks' total speed over the mean cost). When the best job falls more than ``more_when`` short
   of the block's *specialty* (its advantage for the class it suits best; a CPU block's is a class that runs
   alike everywhere), or none fits, the block asks for one more proposal (up to ``pool_max`` pooled) before it
   settles: so a GPU block leaves the classes that run as well on CPU blocks to them, and a CPU block leaves
   the GPU-hungry ones to the GPU blocks; with the pool full, a block for which every job runs markedly faster
   on another type waits for a proposal that suits it. A job older than ``max_age`` hand-outs goes to the next
   block it fits that is not markedly slower for it than the others.

When nothing fits the deadline, :data:`MORE` looks for a job that does (``cheaper``) and :data:`WAIT` lets the
block idle so that the job ends once its running trials have - ``bench/hetero.py`` measures both; the
coordinator's default is the better one there (see docs/optimization.md).
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nnlo.optimize.placement.costs import CostModel
from nnlo.optimize.placement.hardware import BlockType
from nnlo.optimize.placement.memory import MemoryModel
from nnlo.optimize.placement.traits import Traits

#: :meth:`Placement.choose`: nothing worth starting on this block now
WAIT = -1
#: :meth:`Placement.choose`: ask for one more proposal, then choose again
MORE = -2


@dataclass(frozen=True)
class Job:
    """Something a block may run: a proposal, or a trial to re-run (or to train on, under a schedule)."""

    params: Mapping[str, Any]
    traits: Traits = field(default_factory=Traits)
    work: float = 1.0  # share of a whole trial (a schedule's stage: its epochs over the whole trial's)
    age: int = 0  # hand-outs since it was proposed
    checkpoint: float = 1.0  # share of the job before its first checkpoint


@dataclass(frozen=True)
class Busy:
    """A block running a job since ``started``."""

    block: int
    job: Job
    started: float


@dataclass(frozen=True)
class Moment:
    """What is going on when a block asks."""

    now: float
    idle: tuple[int, ...] = ()  # blocks free now (the asking one included or not: it is free)
    busy: tuple[Busy, ...] = ()
    remaining: int | None = None  # jobs still to hand out, the pooled ones included (None: no end in sight)
    deadline: float | None = None  # the time by which a job must have reached its first checkpoint


@dataclass
class Placement:
    """The placement policy over the blocks of one job (``types[b]``: block b's type)."""

    types: Sequence[BlockType]
    model: CostModel
    memory: MemoryModel = field(default_factory=MemoryModel)
    tail_factor: float = 3.0
    tie: float = math.log(1.25)
    more_when: float = math.log(2.0)
    pool_max: int = 0  # 0: 2 x pool_size
    max_age: int = 0  # 0: 2 x blocks
    z: float = 2.0
    cheaper: bool = True

    def __post_init__(self) -> None:
        self.distinct = sorted(set(self.types), key=lambda t: t.key)
        if not self.pool_max:
            self.pool_max = 2 * self.pool_size()
        if not self.max_age:
            self.max_age = 2 * len(self.types)

    # -- sizes -----------------------------------------------------------------------------------------
    def pool_size(self, remaining: int | None = None) -> int:
        """Proposals to keep pooled: one more than the blocks (at most 9); the whole rest in the tail."""
        base = min(len(self.types), 8) + 1
        if remaining is not None and self.in_tail(remaining):
            return max(1, remaining)
        return base if remaining is None else max(1, min(base, remaining))

    def in_tail(self, remaining: int | None) -> bool:
        return remaining is not None and remaining <= self.tail_factor * len(self.types)

    # -- predictions -----------------------------------------------------------------------------------
    def seconds(self, job: Job, block: int) -> float:
        return self.model.seconds(job.params, job.traits, self.types[block], job.work)

    def fits(self, job: Job, block: int, start: float, deadline: float | None) -> bool:
        """``job`` fits ``block``'s memory and, started at ``start``, reaches its first checkpoint in time."""
        if not self.memory.fits(job.traits, self.types[block]):
            return False
        if deadline is None or not self.model.ready:
            return True
        reach = self.model.upper(job.params, job.traits, self.types[block], job.work, self.z) * job.checkpoint
        return start + reach <= deadline

    def probing(self, job: Job, block: int, moment: Moment) -> bool:
        """``job`` is unproven on ``block``'s type (:mod:`.memory`, *Probing*) and another unproven job of its
        class runs on that type, not yet past its first checkpoint."""
        here = self.types[block]
        if self.memory.proven(job.traits, here):
            return False
        return any(self.types[b.block] == here and b.job.traits.cls == job.traits.cls
                   and not self.memory.proven(b.job.traits, here)
                   and moment.now - b.started < self.seconds(b.job, b.block) * b.job.checkpoint
                   for b in moment.busy)

    def placeable(self, job: Job) -> bool:
        """Some block of this job can hold it (memory; time aside)."""
        return any(self.memory.fits(job.traits, t) for t in self.distinct)

    # -- the choice ------------------------------------------------------------------------------------
    def choose(self, block: int, jobs: Sequence[Job], moment: Moment) -> int:
        """The index of the job ``block`` takes, :data:`WAIT` or :data:`MORE` (see the module's docstring)."""
        if not jobs:
            return MORE
        held = [i for i, j in enumerate(jobs) if self.fits(j, block, moment.now, None)
                and not self.probing(j, block, moment)]
        ok = [i for i in held if self.fits(jobs[i], block, moment.now, moment.deadline)]
        if self.in_tail(moment.remaining):
            return self._tail(block, jobs, moment, set(ok)) if ok else WAIT
        if not ok:
            return MORE if self._may_ask(jobs, moment, timed_out=bool(held)) else WAIT
        if len(self.distinct) == 1:
            return ok[0]
        gain = {i: self._advantage(jobs[i].traits, block) for i in ok}
        forced = [i for i in ok if jobs[i].age >= self.max_age and gain[i] >= -self.more_when]
        if forced:
            return forced[0]
        best = max(gain.values())
        if self._specialty(block, jobs) - best > self.more_when:
            if self._may_ask(jobs, moment):
                return MORE
            if best < -self.more_when:
                return WAIT  # every job runs markedly faster on another type: leave them to it
        return next(i for i in ok if gain[i] >= best - self.tie)

    def _may_ask(self, jobs: Sequence[Job], moment: Moment, timed_out: bool = False) -> bool:
        if len(jobs) >= self.pool_max:
            return False
        if moment.remaining is not None and len(jobs) >= moment.remaining:
            return False  # every job left is pooled already
        return self.cheaper or not timed_out

    def _advantage(self, traits: Traits, block: int) -> float:
        """Mean log-duration of ``traits``' class over its other block types (that it fits) less here: how much
        faster this block runs it (very large: no other type holds it)."""
        here = self.types[block]
        others = [t for t in self.distinct if t != here and self.memory.fits(traits, t)]
        if not others:
            return 1e9
        mine = self.model.log_seconds(None, traits, here)
        return sum(self.model.log_seconds(None, traits, t) for t in others) / len(others) - mine

    def _specialty(self, block: int, jobs: Sequence[Job]) -> float:
        """The block's advantage for the class it suits best, among the classes seen and pooled that fit it."""
        classes = {j.traits.cls: j.traits for j in jobs}
        for cls in self.model.classes:
            classes.setdefault(cls, Traits(cls))
        here = self.types[block]
        return max((min(self._advantage(t, block), 1e3) for t in classes.values() if self.memory.fits(t, here)),
                   default=0.0)

    def _tail(self, block: int, jobs: Sequence[Job], moment: Moment, ok: set[int]) -> int:
        """Longest predicted first, each to the block that would finish it first: ``block``'s first job."""
        avail = {b: moment.now for b in (*moment.idle, block)}
        for busy in moment.busy:
            avail[busy.block] = max(moment.now, busy.started + self.seconds(busy.job, busy.block))
        blocks = sorted(avail)
        memo: dict[tuple[int, BlockType], float] = {}  # blocks of one type take a job equally long

        def seconds(i: int, b: int) -> float:
            key = (i, self.types[b])
            if key not in memo:
                memo[key] = self.seconds(jobs[i], b)
            return memo[key]

        longest = {i: min((seconds(i, b) for b in blocks if self.memory.fits(j.traits, self.types[b])),
                          default=math.inf) for i, j in enumerate(jobs)}
        for i in sorted(range(len(jobs)), key=lambda i: -longest[i]):
            if math.isinf(longest[i]):
                continue
            job = jobs[i]
            options = [(avail[b] + seconds(i, b), b != block, b) for b in blocks
                       if (i in ok if b == block else self.fits(job, b, avail[b], moment.deadline))]
            if not options:
                continue
            end, _, best = min(options)
            if best == block:
                return i
            avail[best] = end
        return WAIT
