"""A computed layout: which rank runs where, with which role and device, and how it is launched.

Placement rule (uniform, so one launcher line expresses it): ranks are dealt to nodes in blocks of
``ranks_per_node`` in rank order (what srun, jsrun, aprun and mpirun do by default). On a job of several
nodes every rank holds a GPU slot: worker ranks use theirs, and the few masters / the coordinator (which need
no GPU) leave theirs idle — those ranks come first, so they sit on the first node(s). On a single node the
masters and coordinator instead take the node's spare cores beside one worker per GPU slot; the launcher then
binds no GPUs and every rank picks the device named here (``unbound``).

Who binds (``gpu_binding``): ``launcher`` — srun and jsrun give each rank slot its GPUs
(:func:`~nnlo_sched.launchers.base.slot_gpus`) and the rank sees only those; ``layout`` — unbound, or a
launcher that cannot bind (aprun, mpirun): every rank sees its node's GPUs and takes the one named here by
:func:`nnlo.device.gpu_index`, the same function the runtime calls, so this map is what runs.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from nnlo.device import gpu_index
from nnlo.errors import ConfigError
from nnlo.roles import Hierarchy, RankInfo, Role, Shape
from nnlo_sched.launchers.base import slot_gpus


@dataclass(frozen=True)
class Placement:
    rank: int
    role: str  # the role label, e.g. "master:m0", "b1f1:worker:w0"
    node: int
    gpus: tuple[int, ...]  # device indices on its node (shared by several ranks when gpus_per_worker < 1)


@dataclass(frozen=True)
class LayoutRecord:
    """A layout without its per-rank list: what a run's spec keeps (``spec.json``'s ``layout``) and what its
    batch script is rendered from. JSON-able; :meth:`to_dict` and :meth:`from_dict` round-trip it."""

    cluster: str
    kind: str
    shape: dict[str, Any]  # n_masters, n_processes, block_size, block_sizes, proposers, n_fold
    world_size: int
    nodes: int
    ranks_per_node: int
    cores_per_rank: int
    gpus_per_node: int
    gpus_per_worker: float
    ranks_per_gpu: int
    gpu_binding: str  # "launcher", "layout" (every rank picks its device), "none"
    gpus_used: int
    gpus_allocated: int
    workers_per_group: int
    blocks: int
    block_sizes: list[int]
    roles: dict[str, int]
    queue: str | None
    walltime_s: int | None
    walltime_limit_s: int | None
    launcher: list[str]
    nodes_map: list[dict[str, Any]]  # {"first": node, "last": node, "roles": {role: count}}
    notes: list[str]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LayoutRecord:
        """Inverse of :meth:`to_dict`; a missing or unknown key is a one-line :class:`ConfigError`."""
        names = [f.name for f in dataclasses.fields(cls)]
        missing = [n for n in names if n not in data]
        unknown = sorted(set(data) - set(names))
        if missing or unknown:
            raise ConfigError(f"the layout record lacks {', '.join(missing) or '-'} and has unknown "
                              f"{', '.join(unknown) or '-'}; re-create the run")
        return cls(**{n: data[n] for n in names})


@dataclass
class Layout:
    cluster: str
    kind: str
    hierarchy: Hierarchy = field(repr=False)
    nodes: int
    ranks_per_node: int
    cores_per_rank: int
    gpus_per_node: int
    gpus_per_worker: Fraction
    unbound: bool
    queue: str | None
    walltime_s: int | None
    walltime_limit_s: int | None
    launcher: list[str]
    notes: list[str] = field(default_factory=list)
    gpu_binding: str = "launcher"  # launcher | layout | none (see the module's docstring)
    #: the variable that names a rank's GPUs (nnlo.device.device_variable of the profile's vendor), and what
    #: it says for each rank slot of a node when the launcher binds (the profile's gpu_order and tiles applied)
    device_variable: str = "CUDA_VISIBLE_DEVICES"
    slot_devices: tuple[str, ...] = ()

    # -- derived -----------------------------------------------------------------------------------
    @property
    def world_size(self) -> int:
        return self.hierarchy.world_size

    @property
    def shape(self) -> Shape:
        return self.hierarchy.shape

    @property
    def blocks(self) -> int:
        return len(self.hierarchy.blocks) if self.shape.optimization else 0

    @property
    def workers_per_group(self) -> int:
        return self.hierarchy.workers_per_group

    @property
    def shares_gpus(self) -> bool:
        return 0 < self.gpus_per_worker < 1

    @property
    def ranks_per_gpu(self) -> int:
        return int(1 / self.gpus_per_worker) if self.shares_gpus else 1

    @property
    def gpus_used(self) -> int:
        """Distinct GPUs that some worker rank uses."""
        if self.gpus_per_worker == 0:
            return 0
        used = {(self.node_of(r.rank), g) for r in self.hierarchy if r.needs_device for g in self.gpus_of(r.rank)}
        return len(used)

    @property
    def gpus_allocated(self) -> int:
        return self.nodes * self.gpus_per_node

    def node_of(self, rank: int) -> int:
        return rank // self.ranks_per_node

    def gpus_of(self, rank: int) -> tuple[int, ...]:
        """Device indices on the rank's node ((): none); the first is the one it computes on."""
        info = self.hierarchy[rank]
        if not info.needs_device or self.gpus_per_worker == 0:
            return ()
        if self.gpu_binding == "launcher":
            return slot_gpus(rank % self.ranks_per_node, self.gpus_per_worker)
        # every rank sees its node's GPUs and the runtime picks by the one rule (nnlo.device.gpu_index)
        ordinal, workers = self._node_places()[rank]
        first = gpu_index(ordinal, workers, self.gpus_per_node)
        return tuple(range(first, first + max(1, int(self.gpus_per_worker))))

    def device_of(self, rank: int) -> str:
        """The rank's device as the node names it ("": none): what the launcher puts into
        :attr:`device_variable` for its slot (``3`` on Polaris' first slot, ``0.1`` an Aurora tile), or the
        index among the node's GPUs it picks when it sees them all."""
        gpus = self.gpus_of(rank)
        if not gpus:
            return ""
        if self.gpu_binding == "launcher" and self.slot_devices:
            return self.slot_devices[rank % self.ranks_per_node]
        return ",".join(str(g) for g in gpus)

    def _node_places(self) -> dict[int, tuple[int, int]]:
        """rank -> (its number among its node's worker ranks, how many workers the node has)."""
        cached = self.__dict__.get("_places")
        if cached is None:
            per_node: dict[int, list[int]] = {}
            for info in self.hierarchy:
                if info.needs_device:
                    per_node.setdefault(self.node_of(info.rank), []).append(info.rank)
            cached = {r: (i, len(ranks)) for ranks in per_node.values() for i, r in enumerate(ranks)}
            self.__dict__["_places"] = cached
        return cached

    def placements(self) -> Iterator[Placement]:
        for info in self.hierarchy:
            yield Placement(info.rank, info.label(), self.node_of(info.rank), self.gpus_of(info.rank))

    def node_runs(self) -> list[tuple[int, int, dict[str, int]]]:
        """Consecutive nodes with the same role counts: (first node, last node, {role: count})."""
        runs: list[tuple[int, int, dict[str, int]]] = []
        ranks = self.hierarchy.ranks
        t = self.ranks_per_node
        for node in range(self.nodes):
            counts: dict[str, int] = {}
            for info in ranks[node * t:(node + 1) * t]:
                counts[str(info.role)] = counts.get(str(info.role), 0) + 1
            if runs and runs[-1][2] == counts and runs[-1][1] == node - 1:
                runs[-1] = (runs[-1][0], node, counts)
            else:
                runs.append((node, node, counts))
        return runs

    def server_ranks(self) -> list[RankInfo]:
        return [r for r in self.hierarchy if not r.needs_device]

    # -- output ------------------------------------------------------------------------------------
    def record(self) -> LayoutRecord:
        """This layout without its per-rank list (what a run's spec keeps)."""
        s = self.shape
        return LayoutRecord(
            cluster=self.cluster,
            kind=self.kind,
            shape={
                "n_masters": s.n_masters,
                "n_processes": s.n_processes,
                "block_size": s.block_size,
                "block_sizes": None if s.block_sizes is None else list(s.block_sizes),
                "proposers": s.proposers,
                "n_fold": s.n_fold,
            },
            world_size=self.world_size,
            nodes=self.nodes,
            ranks_per_node=self.ranks_per_node,
            cores_per_rank=self.cores_per_rank,
            gpus_per_node=self.gpus_per_node,
            gpus_per_worker=float(self.gpus_per_worker),
            ranks_per_gpu=self.ranks_per_gpu,
            gpu_binding=self.gpu_binding,
            gpus_used=self.gpus_used,
            gpus_allocated=self.gpus_allocated,
            workers_per_group=self.workers_per_group,
            blocks=self.blocks,
            block_sizes=list(self.hierarchy.block_sizes) if self.shape.optimization else [],
            roles={str(r): self.hierarchy.count(r) for r in Role if self.hierarchy.count(r)},
            queue=self.queue,
            walltime_s=self.walltime_s,
            walltime_limit_s=self.walltime_limit_s,
            launcher=list(self.launcher),
            nodes_map=[{"first": a, "last": b, "roles": counts} for a, b, counts in self.node_runs()],
            notes=list(self.notes),
        )

    def to_dict(self, ranks: bool = True) -> dict[str, Any]:
        """A JSON-able structure; ``ranks=False`` leaves out the per-rank list (huge on a full machine)."""
        out = self.record().to_dict()
        if ranks:
            out["ranks"] = [
                {"rank": p.rank, "role": p.role, "node": p.node, "gpus": list(p.gpus),
                 "device": self.device_of(p.rank)}
                for p in self.placements()
            ]
        return out
