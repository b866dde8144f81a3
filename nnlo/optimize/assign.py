"""Which proposal goes to which block: FIFO, or hardware-aware (SHADHO-style). Pure: no MPI, no clock.

Heterogeneous blocks (``--block-sizes 6,6,3,3``, or blocks on different GPUs) train at different speeds, and
trials cost different amounts (epochs, model size, a branch of a tree space). The coordinator keeps a small
pool of proposed points; when a block frees up, a :class:`Policy` picks the point it gets.

* :class:`Fifo` - the pool holds one point, the block gets it: nnlo's behaviour before policies existed.
* :class:`HardwareAware` - learns each trial's cost and each block's speed from finished trials with one small
  regression (:class:`CostModel`: ``log duration = w . features(params) - log speed(block)``, ridge, the block
  speeds shrunk toward their rank counts), then gives a block the pooled point whose cost *quantile* (among the
  costs seen) is nearest the block's speed quantile among the blocks: expensive points to fast blocks, cheap
  ones to slow blocks. SHADHO-style priorities across subspaces (the top-level branches of a tree space, or
  one subspace) break near-ties: a subspace whose results are better and more spread out ranks higher.
  A pooled point that no block took within ``max_age`` hand-outs is dropped (it was only a pending lie to
  the engine), so slow blocks keep sampling the cheap part of the space and fast ones the expensive part:
  this is what raises the number of trials per unit time (SHADHO's gain), at the price of sampling cheap
  regions more often; ``bench/hetero.py`` measures both the throughput and the best figure of merit.

Until ``min_observations`` trials have finished the hardware-aware policy behaves as FIFO.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

Point = dict[str, Any]

#: the policies by ``--assign`` name; "auto" is resolved by :func:`resolve`
POLICIES = ("fifo", "hardware-aware")
ASSIGN_CHOICES = ("auto", *POLICIES)


def resolve(name: str, block_sizes: Sequence[int]) -> str:
    """``auto``: hardware-aware when the blocks differ in size (heterogeneous hardware), else FIFO."""
    if name == "auto":
        return "hardware-aware" if len(set(block_sizes)) > 1 else "fifo"
    if name not in POLICIES:
        raise ValueError(f"--assign {name!r} is unknown; use one of {', '.join(ASSIGN_CHOICES)}")
    return name


# -- features and the cost model --------------------------------------------------------------------------
def features(space: Any, params: Mapping[str, Any]) -> list[float]:
    """A point as numbers: unit coordinates of numeric dimensions, one-hot categories, 0 + flag if inactive."""
    out: list[float] = []
    for dim in space:
        value = params.get(dim.name)
        categories = getattr(dim, "categories", None)
        if categories is not None:
            out.extend(1.0 if value == c else 0.0 for c in categories)
        elif value is None:
            out.extend((0.0, 1.0))
        else:
            try:
                out.extend((float(dim.to_unit(value)), 0.0))
            except (TypeError, ValueError):
                out.extend((0.0, 1.0))
    return out


def default_subspace(space: Any) -> Callable[[Mapping[str, Any]], str]:
    """The subspace of a point: the values of the tree space's top-level choices (root categorical parameters
    with ``branches``), e.g. ``model=cnn``; the space's own ``subspace(point)`` where it offers one; else one
    subspace for the whole space."""
    fn = getattr(space, "subspace", None)
    if callable(fn):
        return lambda p: str(fn(p))
    nested: set[str] = set()

    def walk(dim: Any) -> None:
        for _, dims in getattr(dim, "branches", None) or ():
            for d in dims:
                nested.add(d.name)
                walk(d)

    for dim in space:
        walk(dim)
    roots = [d.name for d in space if getattr(d, "branches", None) and d.name not in nested]
    if not roots:
        return lambda p: ""
    return lambda p: ",".join(f"{n}={p.get(n)}" for n in roots)


@dataclass(frozen=True)
class Observation:
    """A finished trial as the cost model sees it."""

    params: Mapping[str, Any]
    block: int
    duration_s: float
    value: float | None = None  # minimised figure of merit (None: failed)


class CostModel:
    """``log duration ~ w . features(params) + c - log speed(block)``, fitted by ridge regression.

    ``prior_speed[b]`` (e.g. a block's rank count) is where a block's speed sits before its trials say
    otherwise: the block offsets are penalised toward ``-log prior_speed``. :meth:`cost` is the predicted
    duration on a block of speed 1; :meth:`speed` is relative (the geometric mean of all blocks is 1).
    """

    def __init__(self, space: Any, prior_speed: Sequence[float], ridge: float = 0.1) -> None:
        self.space = space
        prior = np.asarray(prior_speed, dtype=float)
        self.prior_log = np.log(prior / math.exp(float(np.mean(np.log(prior)))))
        self.ridge = ridge
        self.w: np.ndarray | None = None
        self.intercept = 0.0
        self.log_speed = self.prior_log.copy()
        self.n = 0

    def fit(self, observations: Sequence[Observation]) -> CostModel:
        obs = [o for o in observations if o.duration_s > 0 and 0 <= o.block < len(self.prior_log)]
        self.n = len(obs)
        if not obs:
            return self
        x = np.array([features(self.space, o.params) for o in obs], dtype=float)
        n_blocks = len(self.prior_log)
        onehot = np.zeros((len(obs), n_blocks))
        onehot[np.arange(len(obs)), [o.block for o in obs]] = 1.0
        # unknowns: w (params), intercept, d_b = deviation of -log speed from its prior (penalised toward 0)
        y = np.log([o.duration_s for o in obs]) + onehot @ self.prior_log
        design = np.hstack([x, np.ones((len(obs), 1)), -onehot])
        penalty = np.full(design.shape[1], self.ridge)
        penalty[x.shape[1]] = 1e-9  # the intercept is free
        a = design.T @ design + np.diag(penalty)
        coef = np.linalg.solve(a, design.T @ y)
        self.w = coef[: x.shape[1]]
        self.intercept = float(coef[x.shape[1]])
        log_speed = self.prior_log + coef[x.shape[1] + 1:]
        self.log_speed = log_speed - float(np.mean(log_speed))
        return self

    def log_cost(self, params: Mapping[str, Any]) -> float:
        if self.w is None:
            return self.intercept
        return float(np.dot(self.w, features(self.space, params))) + self.intercept

    def cost(self, params: Mapping[str, Any]) -> float:
        return math.exp(self.log_cost(params))

    def speed(self, block: int) -> float:
        return math.exp(float(self.log_speed[block]))


# -- priorities across subspaces (SHADHO) -----------------------------------------------------------------
def priorities(observations: Sequence[Observation], subspace_of: Callable[[Mapping[str, Any]], str]
               ) -> dict[str, float]:
    """A priority in [0, 1] per subspace: half its best value's rank (best = 1), half its results' spread
    relative to the largest spread (SHADHO's "performance" and "uncertainty"); one subspace: 1."""
    values: dict[str, list[float]] = {}
    for o in observations:
        if o.value is not None and math.isfinite(o.value):
            values.setdefault(subspace_of(o.params), []).append(o.value)
    if len(values) <= 1:
        return dict.fromkeys(values, 1.0)
    order = sorted(values, key=lambda s: min(values[s]))
    spread = {s: float(np.std(v)) for s, v in values.items()}
    widest = max(spread.values()) or 1.0
    n = len(order)
    return {s: 0.5 * (1 - order.index(s) / (n - 1)) + 0.5 * spread[s] / widest for s in values}


# -- policies ---------------------------------------------------------------------------------------------
@dataclass
class Candidate:
    point: Point
    age: int = 0  # hand-outs since it was proposed


class Policy(Protocol):
    name: str

    def pool_size(self, n_blocks: int) -> int:
        """How many proposals to keep ready."""
        ...

    def learn(self, observations: Sequence[Observation]) -> None:
        """Update from every finished trial so far."""
        ...

    def choose(self, block: int, candidates: Sequence[Candidate]) -> int:
        """The index of the candidate that ``block`` gets."""
        ...

    def expired(self, candidates: Sequence[Candidate]) -> list[int]:
        """Indices of candidates to drop (never handed out)."""
        ...


class Fifo:
    name = "fifo"

    def pool_size(self, n_blocks: int) -> int:
        return 1

    def learn(self, observations: Sequence[Observation]) -> None:
        pass

    def choose(self, block: int, candidates: Sequence[Candidate]) -> int:
        return 0

    def expired(self, candidates: Sequence[Candidate]) -> list[int]:
        return []


@dataclass
class HardwareAware:
    space: Any
    block_sizes: Sequence[int]
    subspace_of: Callable[[Mapping[str, Any]], str] | None = None
    min_observations: int = 4
    pool: int = 4
    max_age: int | None = None  # default: 2 x pool
    priority_weight: float = 0.15
    name: str = "hardware-aware"
    model: CostModel = field(init=False)
    _costs: list[float] = field(init=False, default_factory=list)
    _priority: dict[str, float] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.model = CostModel(self.space, [float(s) for s in self.block_sizes])
        if self.subspace_of is None:
            self.subspace_of = default_subspace(self.space)

    @property
    def ready(self) -> bool:
        return self.model.n >= self.min_observations

    def pool_size(self, n_blocks: int) -> int:
        return max(1, min(self.pool, n_blocks + 1))

    def learn(self, observations: Sequence[Observation]) -> None:
        self.model.fit(observations)
        self._costs = sorted(self.model.log_cost(o.params) for o in observations)
        assert self.subspace_of is not None
        self._priority = priorities(observations, self.subspace_of)

    def block_quantile(self, block: int) -> float:
        """0 for the slowest block, 1 for the fastest (0.5 when all are equally fast)."""
        speeds = self.model.log_speed
        mine = speeds[block]
        lower = float(np.sum(speeds < mine - 1e-9))
        equal = float(np.sum(np.abs(speeds - mine) <= 1e-9))
        return (lower + (equal - 1) / 2) / max(1, len(speeds) - 1)

    def cost_quantile(self, params: Mapping[str, Any], others: Sequence[float] = ()) -> float:
        """Where this point's cost sits among the finished trials' and ``others``' (0 cheapest, 1 dearest)."""
        c = self.model.log_cost(params)
        ref = [*self._costs, *others]
        if not ref:
            return 0.5
        below = sum(1 for r in ref if r < c - 1e-12)
        equal = sum(1 for r in ref if abs(r - c) <= 1e-12)
        return (below + equal / 2) / len(ref)

    def choose(self, block: int, candidates: Sequence[Candidate]) -> int:
        if not self.ready or len(candidates) <= 1:
            return 0
        assert self.subspace_of is not None
        target = self.block_quantile(block)
        pooled = [self.model.log_cost(c.point) for c in candidates]
        scores = []
        for c in candidates:
            q = self.cost_quantile(c.point, pooled)
            prio = self._priority.get(self.subspace_of(c.point), 1.0)
            scores.append(abs(q - target) - self.priority_weight * prio)
        return int(np.argmin(scores))

    def expired(self, candidates: Sequence[Candidate]) -> list[int]:
        if not self.ready:
            return []
        limit = self.max_age if self.max_age is not None else 2 * self.pool
        return [i for i, c in enumerate(candidates) if c.age > limit]


def make_policy(name: str, space: Any, block_sizes: Sequence[int],
                subspace_of: Callable[[Mapping[str, Any]], str] | None = None) -> Policy:
    """The policy named by ``--assign`` (``auto`` resolved against the block sizes)."""
    if resolve(name, block_sizes) == "fifo":
        return Fifo()
    return HardwareAware(space, list(block_sizes), subspace_of=subspace_of)
