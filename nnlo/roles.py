"""Who does what: the role of every rank, for a run shape and a world size.

This module is the single source of truth for the process hierarchy. It is pure (no MPI, no I/O): the
runtime uses it to split communicators, the scheduler side uses it to size jobs and print rank maps.

The hierarchy, outermost first::

    world
    ├── coordinator                 (rank 0, optimization runs only)
    ├── proposers                   (ranks 1..P with ``--proposers P`` > 1: compute proposals for the coordinator)
    └── blocks                      (optimization: ``block_size`` consecutive ranks each, or the sizes of
                                     ``block_sizes`` (heterogeneous blocks); training: one block)
        └── fold groups             (``n_fold`` equal parts of a block; each is one *training group*)
            ├── uber-master         (only with n_masters > 1)
            └── masters             (1, or n_masters - 1 under the uber-master; 0 in pure all-reduce mode)
                └── workers         (logical workers; each is ``n_processes`` consecutive ranks, leader first)

Ranks of a training group are contiguous: [uber-master] then, for each master, the master followed by its
workers' ranks. In pure all-reduce mode (``n_masters == 0``) every rank of the group is a replica and the
whole group is a single all-reduce group.
"""
from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterator
from dataclasses import dataclass, field

#: The training mode without a parameter server: every rank of a training group is a replica.
ALLREDUCE_MODE = "allreduce"


class RoleError(ValueError):
    """A shape that cannot be laid out; the message names the problem and a fix."""


class Role(str, enum.Enum):  # noqa: UP042 - str(role) and f"{role}" print the value (__str__), as labels need
    COORDINATOR = "coordinator"
    PROPOSER = "proposer"
    UBER_MASTER = "uber-master"
    MASTER = "master"
    WORKER = "worker"
    SOLO = "solo"  # the only rank of its training group: trains alone, its own master

    def __str__(self) -> str:  # "worker", not "Role.WORKER"
        return self.value


@dataclass(frozen=True)
class Shape:
    """What a run asks for, independent of the world size.

    n_masters: 0 = pure all-reduce (no parameter server), 1 = one master, M > 1 = an uber-master above
        M - 1 masters.
    n_processes: ranks per logical worker (an all-reduce worker group); ignored when n_masters == 0.
    block_size: ranks per optimization block; None for a plain training run (or heterogeneous blocks).
    n_fold: fold groups per block (optimization only).
    block_sizes: heterogeneous blocks (``--block-sizes 6,6,3,3``): the ranks of each block, in rank order; the
        run then has exactly these blocks. Exclusive with ``block_size``.
    proposers: processes that propose trials (``--proposers P``): 1 = the coordinator itself (no extra rank);
        P > 1 = P proposer ranks right after the coordinator.
    """

    n_masters: int = 1
    n_processes: int = 1
    block_size: int | None = None
    n_fold: int = 1
    block_sizes: tuple[int, ...] | None = None
    proposers: int = 1

    def __post_init__(self) -> None:
        if self.block_sizes is not None:
            object.__setattr__(self, "block_sizes", tuple(int(b) for b in self.block_sizes))
            assert self.block_sizes is not None
            if self.block_size is not None:
                raise RoleError("--block-size and --block-sizes exclude each other; give one of them")
            if not self.block_sizes:
                raise RoleError("--block-sizes needs at least one size, e.g. --block-sizes 6,6,3,3")
            if min(self.block_sizes) < 1:
                raise RoleError(f"--block-sizes must all be at least 1, got {sizes_text(self.block_sizes)}")
        if self.proposers < 1:
            raise RoleError(f"--proposers must be at least 1, got {self.proposers}")
        if self.proposers > 1 and not self.optimization:
            raise RoleError("--proposers serve an optimization's coordinator; use nnlo optimize with --block-size")
        if self.n_masters < 0:
            raise RoleError(f"--n-masters must be 0 or more, got {self.n_masters}")
        if self.n_processes < 1:
            raise RoleError(f"--n-processes must be at least 1, got {self.n_processes}")
        if self.n_fold < 1:
            raise RoleError(f"--n-fold must be at least 1, got {self.n_fold}")
        if self.block_size is not None and self.block_size < 1:
            raise RoleError(f"--block-size must be at least 1, got {self.block_size}")
        if not self.optimization and self.n_fold != 1:
            raise RoleError("--n-fold needs --block-size: folds split an optimization block")

    @classmethod
    def for_run(
        cls,
        *,
        mode: str | None = "gem",
        n_masters: int = 1,
        n_processes: int = 1,
        block_size: int | None = None,
        n_fold: int = 1,
        search: bool = False,
        block_sizes: tuple[int, ...] | None = None,
        proposers: int = 1,
    ) -> Shape:
        """The one rule from a run's options to its shape; training, search, layout and submit all use it.

        * ``--mode allreduce`` means no master (``n_masters == 0``); ``--n-masters 0`` with another mode, more
          than one master with it, and ``--n-processes`` with it are refused (all-reduce already spans the
          group); ``mode=None`` (a layout that names no mode) follows ``n_masters``;
        * a search (``search=True``) without ``--block-size`` gets the smallest block that holds its folds:
          ``n_fold`` times the smallest training group; ``block_sizes`` gives heterogeneous blocks instead;
        * a plain training has no blocks, no folds and no proposers.
        """
        allreduce = mode == ALLREDUCE_MODE or (mode is None and n_masters == 0)
        if allreduce and n_masters > 1:
            raise RoleError(f"--mode allreduce has no masters; drop --n-masters {n_masters}")
        if not allreduce and n_masters == 0:
            raise RoleError("--n-masters 0 is pure all-reduce data parallelism: use --mode allreduce "
                            "(or give --n-masters 1 or more)")
        masters = 0 if allreduce else n_masters
        if allreduce and n_processes != 1:
            raise RoleError("--n-processes groups ranks under a master; --mode allreduce already all-reduces "
                            "over every rank of the group: drop --n-processes")
        if not search:
            if block_size is not None or n_fold != 1 or block_sizes is not None or proposers != 1:
                raise RoleError("--block-size, --block-sizes, --n-fold and --proposers shape an optimization; "
                                "use nnlo optimize")
            return cls(n_masters=masters, n_processes=n_processes)
        group = cls(n_masters=masters, n_processes=n_processes)  # validates n_masters/n_processes first
        if n_fold < 1:
            raise RoleError(f"--n-fold must be at least 1, got {n_fold}")
        if block_size is None and block_sizes is None:
            block_size = n_fold * group.smallest_group
        return cls(n_masters=masters, n_processes=n_processes, block_size=block_size, n_fold=n_fold,
                   block_sizes=block_sizes, proposers=proposers)

    @property
    def smallest_group(self) -> int:
        """Ranks of the smallest training group of this shape with its masters (every master with one worker;
        one replica in all-reduce mode): a search's default block holds ``n_fold`` of them."""
        if self.allreduce:
            return 1
        return self.server_ranks + self.masters_with_workers * self.ranks_per_worker

    @property
    def solo_capable(self) -> bool:
        """Whether a group of this shape may be one rank training alone (:attr:`Role.SOLO`): one master asked
        (the default) and workers of one rank; an uber-master or multi-rank workers need more ranks."""
        return self.n_masters == 1 and self.n_processes == 1

    def is_solo(self, group_size: int) -> bool:
        """A training group of ``group_size`` ranks of this shape is one rank that trains alone."""
        return group_size == 1 and self.solo_capable

    def servers_in_group(self, group_size: int) -> int:
        """Ranks of a ``group_size``-rank training group that do not train (masters, uber-master)."""
        return 0 if self.is_solo(group_size) else self.server_ranks

    @property
    def optimization(self) -> bool:
        return self.block_size is not None or self.block_sizes is not None

    @property
    def proposer_ranks(self) -> int:
        """Ranks that only propose: none with one proposer (the coordinator asks itself), else P."""
        return self.proposers if self.proposers > 1 else 0

    @property
    def head_ranks(self) -> int:
        """Ranks before the first block: the coordinator and the proposers (0 in a training run)."""
        return 1 + self.proposer_ranks if self.optimization else 0

    @property
    def distinct_block_sizes(self) -> tuple[int, ...]:
        """Every block size this shape uses, ascending (one for homogeneous blocks)."""
        if self.block_sizes is not None:
            return tuple(sorted(set(self.block_sizes)))
        return () if self.block_size is None else (self.block_size,)

    def blocks_text(self) -> str:
        """``6`` or ``6,6,3,3``: the block sizes as the options give them."""
        return sizes_text(self.block_sizes) if self.block_sizes is not None else str(self.block_size)

    def check_blocks(self) -> None:
        """Every block divides into ``n_fold`` fold groups and each fold group holds a training group."""
        for bs in self.distinct_block_sizes:
            if bs % self.n_fold:
                if self.block_sizes is None:
                    raise RoleError(
                        f"--block-size {bs} does not divide into --n-fold {self.n_fold} equal fold groups; "
                        f"use a block size that is a multiple of {self.n_fold}"
                    )
                raise RoleError(
                    f"--block-sizes {self.blocks_text()}: block size {bs} does not divide into --n-fold "
                    f"{self.n_fold} equal fold groups; use block sizes that are multiples of {self.n_fold}"
                )
            self.workers_in_group(bs // self.n_fold)  # validates the fold group's shape with a clear message

    def search_world(self, n_blocks: int | None = None) -> int:
        """World size of an optimization with ``n_blocks`` blocks (heterogeneous: the fixed blocks)."""
        assert self.optimization
        if self.block_sizes is not None:
            if n_blocks is not None and n_blocks != len(self.block_sizes):
                raise RoleError(f"--block-sizes {self.blocks_text()} makes {len(self.block_sizes)} blocks, not "
                                f"{n_blocks}; drop --blocks or give {len(self.block_sizes)}")
            return self.head_ranks + sum(self.block_sizes)
        assert self.block_size is not None
        return self.head_ranks + (1 if n_blocks is None else n_blocks) * self.block_size

    def blocks_in(self, world_size: int) -> tuple[int, ...]:
        """The size of every block of a ``world_size``-rank optimization; RoleError naming the nearest size."""
        head = self.head_ranks
        who = "1 coordinator" + (f" + {self.proposer_ranks} proposers" if self.proposer_ranks else "")
        if self.block_sizes is not None:
            need = head + sum(self.block_sizes)
            if world_size != need:
                raise RoleError(f"{world_size} ranks do not make {who} + blocks of {self.blocks_text()}; "
                                f"use -n {need}")
            return self.block_sizes
        bs = self.block_size
        assert bs is not None
        if world_size < head + bs or (world_size - head) % bs:
            n_blocks = max(1, (world_size - head) // bs)
            raise RoleError(
                f"{world_size} ranks do not make {who} + blocks of {bs}; "
                f"use -n {head + n_blocks * bs} ({n_blocks} block(s))"
                + (f" or -n {head + (n_blocks + 1) * bs}" if world_size > head + bs else "")
            )
        return (bs,) * ((world_size - head) // bs)

    @property
    def allreduce(self) -> bool:
        return self.n_masters == 0

    @property
    def ranks_per_worker(self) -> int:
        return 1 if self.allreduce else self.n_processes

    @property
    def server_ranks(self) -> int:
        """Ranks of a training group that are not workers: 0, 1, or an uber-master + (M - 1) masters."""
        return self.n_masters

    @property
    def masters_with_workers(self) -> int:
        """How many masters have workers of their own (0 in all-reduce mode)."""
        return 0 if self.n_masters == 0 else max(1, self.n_masters - 1)

    # -- sizes -------------------------------------------------------------------------------------
    def group_size(self, n_workers: int) -> int:
        """Ranks of one training group holding ``n_workers`` logical workers (one worker: the solo rank)."""
        if n_workers == 1 and self.is_solo(1):
            return 1
        return self.server_ranks + n_workers * self.ranks_per_worker

    def workers_in_group(self, group_size: int) -> int:
        """Workers in a training group of ``group_size`` ranks (raises if it does not fit).

        In pure all-reduce mode this counts replicas (one rank each), which together form the group's
        single all-reduce group. A solo group (:meth:`is_solo`) is one worker.
        """
        if self.is_solo(group_size):
            return 1
        rest = group_size - self.server_ranks
        k = self.ranks_per_worker
        need = self.masters_with_workers if not self.allreduce else 1
        smallest = self.smallest_group
        if rest < need * k or rest % k:
            what = self._describe_servers()
            hint = _nearest(group_size, smallest, k)
            raise RoleError(
                f"{group_size} ranks cannot hold {what} plus workers of {k} rank(s) each "
                f"(need at least {smallest}, then steps of {k}); use {hint} ranks"
            )
        return rest // k

    def world_size(self, n_workers: int, n_blocks: int = 1) -> int:
        """World size for ``n_workers`` logical workers per training group (and ``n_blocks`` blocks)."""
        if n_workers < 1:
            raise RoleError("a run needs at least 1 worker")
        group = self.group_size(n_workers)
        if not self.optimization:
            return group
        if self.block_sizes is not None:
            return self.search_world()
        return self.head_ranks + n_blocks * self.n_fold * group

    def _describe_servers(self) -> str:
        if self.n_masters == 0:
            return "an all-reduce group"
        if self.n_masters == 1:
            return "1 master"
        return f"1 uber-master and {self.n_masters - 1} masters"


def sizes_text(sizes: tuple[int, ...] | list[int]) -> str:
    return ",".join(str(s) for s in sizes)


def parse_block_sizes(text: str) -> tuple[int, ...]:
    """``"6,6,3,3"`` -> (6, 6, 3, 3); RoleError (one line, with an example) for anything else."""
    parts = [p.strip() for p in str(text).split(",")]
    try:
        sizes = tuple(int(p) for p in parts)
    except ValueError:
        raise RoleError(f"--block-sizes {text!r} is not a comma list of rank counts; use e.g. 6,6,3,3") from None
    if not sizes or min(sizes) < 1:
        raise RoleError(f"--block-sizes {text!r} needs rank counts of at least 1; use e.g. 6,6,3,3")
    return sizes


def _nearest(n: int, smallest: int, step: int) -> int:
    if n <= smallest:
        return smallest
    return smallest + ((n - smallest + step - 1) // step) * step


@dataclass(frozen=True)
class RankInfo:
    """The role of one world rank."""

    rank: int
    role: Role
    block: int | None = None  # optimization block (None for the coordinator); 0 in a training run
    fold: int | None = None  # fold group within the block
    group: int | None = None  # training-group index in the world (block * n_fold + fold)
    master: int | None = None  # index of this rank's master in its group (own index for masters)
    worker: int | None = None  # logical-worker index in its group (workers only)
    member: int | None = None  # rank inside its all-reduce worker group, 0 = leader (workers only)
    parent: int | None = None  # world rank this rank reports to inside its training group
    search: bool = False  # part of an optimization run (its labels then name the block and fold)
    proposer: int | None = None  # proposer index (proposers only)

    @property
    def trains(self) -> bool:
        """Computes gradients on training data: a worker, or a solo rank."""
        return self.role in (Role.WORKER, Role.SOLO)

    @property
    def needs_device(self) -> bool:
        """Only the ranks that train need a device; masters and coordinators run on a CPU core."""
        return self.trains

    @property
    def is_leader(self) -> bool:
        """A worker that talks to its master for its group (always True for non-workers)."""
        return self.role is not Role.WORKER or self.member == 0

    def label(self) -> str:
        parts = [str(self.role)]
        if self.role is Role.PROPOSER:
            parts.append(f"p{self.proposer}")
        if self.role is Role.MASTER and self.master is not None:
            parts.append(f"m{self.master}")
        if self.role is Role.WORKER:
            parts.append(f"w{self.worker}" + (f".{self.member}" if self.member else ""))
        if self.search and self.block is not None and self.role is not Role.COORDINATOR:
            parts.insert(0, f"b{self.block}" + (f"f{self.fold}" if self.fold else ""))
        return ":".join(parts)


@dataclass(frozen=True)
class TrainingGroup:
    """One training: a parameter-server tree (or an all-reduce group) over contiguous world ranks."""

    index: int
    block: int
    fold: int
    ranks: tuple[int, ...]
    uber_master: int | None
    masters: tuple[int, ...]
    workers: tuple[tuple[int, ...], ...]  # each logical worker's world ranks, leader first
    master_of_worker: tuple[int | None, ...]  # index into ``masters`` per logical worker

    @property
    def top(self) -> int:
        """The rank that owns the group's result (uber-master, master, or the first replica)."""
        return self.ranks[0]

    def local(self, world_rank: int) -> int:
        """Rank inside the group's communicator (split with key = world rank)."""
        return self.ranks.index(world_rank)

    def worker_leaders(self, master_index: int | None = None) -> tuple[int, ...]:
        return tuple(
            w[0]
            for w, m in zip(self.workers, self.master_of_worker, strict=True)
            if master_index is None or m == master_index
        )


@dataclass(frozen=True)
class Hierarchy:
    world_size: int
    shape: Shape
    coordinator: int | None
    blocks: tuple[tuple[int, ...], ...]
    groups: tuple[TrainingGroup, ...]
    ranks: tuple[RankInfo, ...] = field(repr=False)
    proposers: tuple[int, ...] = ()  # world ranks of the proposers (``--proposers P`` > 1)

    def __getitem__(self, rank: int) -> RankInfo:
        return self.ranks[rank]

    def __iter__(self) -> Iterator[RankInfo]:
        return iter(self.ranks)

    def group_of(self, rank: int) -> TrainingGroup | None:
        g = self.ranks[rank].group
        return None if g is None else self.groups[g]

    def block_leader(self, block: int) -> int:
        return self.blocks[block][0]

    def count(self, role: Role) -> int:
        return sum(1 for r in self.ranks if r.role is role)

    @property
    def workers_per_group(self) -> int:
        return len(self.groups[0].workers)

    @property
    def block_sizes(self) -> tuple[int, ...]:
        return tuple(len(b) for b in self.blocks)

    def colors(self, rank: int) -> dict[str, int | None]:
        """Split colors for this rank's communicators (None = not a member).

        block: all ranks of its optimization block; group: its training group; worker: its all-reduce
        worker group (the ranks of one logical worker, or all replicas in pure all-reduce mode).
        """
        info = self.ranks[rank]
        worker_color = None
        if info.role is Role.WORKER:
            assert info.group is not None and info.worker is not None
            widest = max(len(g.workers) for g in self.groups)  # groups of heterogeneous blocks differ
            worker_color = info.group * max(1, widest) + info.worker
        return {"block": info.block, "group": info.group, "worker": worker_color}

    def summary(self) -> str:
        counts = [f"{self.count(r)} {r}" for r in Role if self.count(r)]
        head = f"{self.world_size} ranks: " + ", ".join(counts)
        if self.shape.optimization:
            head += (
                f"; {len(self.blocks)} block(s) of {self.shape.blocks_text()}"
                f" x {self.shape.n_fold} fold(s)"
            )
        if self.shape.n_processes > 1 and not self.shape.allreduce:
            head += f"; {self.shape.n_processes} ranks per worker"
        return head

    def rank_map(self) -> str:
        """Compact one-line-per-run map, e.g. ``0 master | 1-2 worker``."""
        out: list[str] = []
        start = 0
        for i in range(1, self.world_size + 1):
            if i == self.world_size or _kind(self.ranks[i]) != _kind(self.ranks[start]):
                span = f"{start}" if i - 1 == start else f"{start}-{i - 1}"
                out.append(f"{span} {_kind(self.ranks[start])}")
                start = i
        return " | ".join(out)


def _kind(info: RankInfo) -> str:
    if info.role is Role.WORKER and info.member:
        return "worker(member)"
    return str(info.role)


def _layout_group(
    shape: Shape, index: int, block: int, fold: int, first: int, size: int
) -> tuple[TrainingGroup, list[RankInfo]]:
    n_workers = shape.workers_in_group(size)
    ranks = tuple(range(first, first + size))
    infos: list[RankInfo] = []
    workers: list[tuple[int, ...]] = []
    master_of: list[int | None] = []
    masters: list[int] = []
    uber: int | None = None
    k = shape.ranks_per_worker

    def add_worker(start: int, master_idx: int | None, master_rank: int | None, ranks_: int) -> None:
        w = len(workers)
        members = tuple(range(start, start + ranks_))
        workers.append(members)
        master_of.append(master_idx)
        for m, r in enumerate(members):
            parent = master_rank if m == 0 else members[0]
            infos.append(
                RankInfo(r, Role.WORKER, block, fold, index, master_idx, w, m, parent)
            )

    if shape.allreduce:
        add_worker(first, None, None, size)
    elif shape.is_solo(size):  # its own master and its only worker
        masters.append(first)
        workers.append((first,))
        master_of.append(0)
        infos.append(RankInfo(first, Role.SOLO, block, fold, index, master=0, worker=0, member=0))
    else:
        pos = first
        n_sub = shape.masters_with_workers
        if shape.n_masters > 1:
            uber = pos
            infos.append(RankInfo(pos, Role.UBER_MASTER, block, fold, index))
            pos += 1
        base, extra = divmod(n_workers, n_sub)
        for m in range(n_sub):
            mrank = pos
            masters.append(mrank)
            infos.append(RankInfo(mrank, Role.MASTER, block, fold, index, m, parent=uber))
            pos += 1
            for _ in range(base + (1 if m < extra else 0)):
                add_worker(pos, m, mrank, k)
                pos += k
        assert pos == first + size
    group = TrainingGroup(
        index, block, fold, ranks, uber, tuple(masters), tuple(workers), tuple(master_of)
    )
    return group, infos


def describe(world_size: int, shape: Shape | None = None) -> Hierarchy:
    """The role of every rank of a ``world_size``-rank run of ``shape``. Raises RoleError if impossible."""
    shape = shape or Shape()
    if world_size < 1:
        raise RoleError(f"the world size must be at least 1, got {world_size}")
    infos: list[RankInfo] = []
    groups: list[TrainingGroup] = []
    blocks: list[tuple[int, ...]] = []
    coordinator: int | None = None
    proposers: tuple[int, ...] = ()
    if not shape.optimization:
        g, gi = _layout_group(shape, 0, 0, 0, 0, world_size)
        groups.append(g)
        infos.extend(gi)
        blocks.append(g.ranks)
    else:
        shape.check_blocks()
        sizes = shape.blocks_in(world_size)
        coordinator = 0
        infos.append(RankInfo(0, Role.COORDINATOR))
        proposers = tuple(range(1, 1 + shape.proposer_ranks))
        infos.extend(RankInfo(r, Role.PROPOSER, proposer=i) for i, r in enumerate(proposers))
        start = shape.head_ranks
        for b, bs in enumerate(sizes):
            blocks.append(tuple(range(start, start + bs)))
            fold_size = bs // shape.n_fold
            for f in range(shape.n_fold):
                g, gi = _layout_group(
                    shape, len(groups), b, f, start + f * fold_size, fold_size
                )
                groups.append(g)
                infos.extend(gi)
            start += bs
    if shape.optimization:
        infos = [dataclasses.replace(r, search=True) for r in infos]
    infos.sort(key=lambda r: r.rank)
    assert [r.rank for r in infos] == list(range(world_size))
    return Hierarchy(world_size, shape, coordinator, tuple(blocks), tuple(groups), tuple(infos), proposers)
