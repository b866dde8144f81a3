"""A block's hardware as placement sees it: its :class:`BlockType`. Pure.

Two blocks of one type run a trial equally fast and hold the same trials in memory; a trial's cost is learnt
per (trial class, block type) (:mod:`.costs`), and a trial that ran out of memory on a type is kept off that
type and every type no larger (:mod:`.memory`). A type is what the ranks of a block have in common:

* ``ranks`` - the block's ranks (``--block-size``/``--block-sizes``);
* ``gpus`` - GPUs per worker rank (0: CPU only; 0.5: two workers share one);
* ``memory_gb`` - the memory a worker rank computes in: its GPU's memory, else the node's memory over the ranks
  placed on it (None: not known);
* ``node`` - the node type: ``$NNLO_NODE_TYPE`` where the site sets it, else the CPU model (and the GPU's name).

:func:`block_types` derives each block's type from the facts every rank reports about itself
(:class:`RankFacts`, gathered once at start-up by :func:`nnlo.optimize.placement.probe.rank_facts`). A type is
written into the search's state and journal as a small dict (:meth:`BlockType.to_dict`), so participants of a
shared search on other partitions learn from each other's trials.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RankFacts:
    """What one rank knows about the hardware it runs on."""

    host: str
    node: str  # node type label
    gpus_visible: int  # GPUs this rank sees
    gpu_memory_gb: float | None  # memory of one of those GPUs (None: unknown or none)
    host_memory_gb: float | None  # the node's memory (None: unknown)
    needs_device: bool  # a worker (computes); masters and the coordinator do not

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "node": self.node, "gpus_visible": self.gpus_visible,
                "gpu_memory_gb": self.gpu_memory_gb, "host_memory_gb": self.host_memory_gb,
                "needs_device": self.needs_device}


@dataclass(frozen=True)
class BlockType:
    """The hardware of a block (see the module's docstring)."""

    ranks: int
    gpus: float = 0.0
    memory_gb: float | None = None
    node: str = ""

    @property
    def key(self) -> str:
        """A stable name, e.g. ``4 ranks, 1 GPU/rank, 80 GiB/rank, A100``."""
        parts = [f"{self.ranks} rank{'s' if self.ranks != 1 else ''}"]
        if self.gpus:
            parts.append(f"{self.gpus:g} GPU/rank")
        if self.memory_gb is not None:
            parts.append(f"{self.memory_gb:g} GiB/rank")
        if self.node:
            parts.append(self.node)
        return ", ".join(parts)

    def __str__(self) -> str:
        return self.key

    def to_dict(self) -> dict[str, Any]:
        return {"ranks": self.ranks, "gpus": self.gpus, "memory_gb": self.memory_gb, "node": self.node}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> BlockType:
        """The type a :meth:`to_dict` wrote; ValueError/TypeError/KeyError on anything else."""
        ranks = int(d["ranks"])
        gpus = float(d.get("gpus") or 0.0)
        mem = d.get("memory_gb")
        memory = None if mem is None else float(mem)
        if ranks < 1 or gpus < 0 or (memory is not None and not memory > 0):
            raise ValueError(f"not a block type: {dict(d)}")
        return cls(ranks, gpus, memory, str(d.get("node") or ""))

    def no_larger_than(self, other: BlockType) -> bool:
        """This type has at most ``other``'s resources in every respect: what does not fit ``other`` does not
        fit here either. Memory per rank is compared where both are known; where one is not, only the same
        node type (same memory) compares."""
        if self.ranks > other.ranks or self.gpus > other.gpus:
            return False
        if self.memory_gb is not None and other.memory_gb is not None:
            return self.memory_gb <= other.memory_gb
        return self.node == other.node

    @property
    def prior_speed(self) -> float:
        """How fast a block of this type is taken to be before any trial says otherwise: its ranks (a GPU rank
        counts as one rank too: how much a GPU speeds a trial up depends on the trial's class, and is learnt)."""
        return float(self.ranks)


def block_types(blocks: Sequence[Sequence[int]], facts: Sequence[RankFacts]) -> list[BlockType]:
    """The type of each block (its world ranks in ``blocks``) from every world rank's facts."""
    # ranks that compute on a node and see the same GPUs share them
    sharing: dict[tuple[str, int], int] = {}
    per_host: dict[str, int] = {}
    for f in facts:
        per_host[f.host] = per_host.get(f.host, 0) + 1
        if f.needs_device and f.gpus_visible:
            sharing[(f.host, f.gpus_visible)] = sharing.get((f.host, f.gpus_visible), 0) + 1
    out = []
    for ranks in blocks:
        members = [facts[r] for r in ranks]
        workers = [f for f in members if f.needs_device] or members
        gpus = min(_gpus_per_rank(f, sharing) for f in workers)
        memory = [_memory(f, gpus, per_host) for f in workers]
        known = [m for m in memory if m is not None]
        nodes = sorted({f.node for f in workers})
        out.append(BlockType(len(ranks), gpus, min(known) if len(known) == len(memory) else None, "+".join(nodes)))
    return out


def _gpus_per_rank(f: RankFacts, sharing: Mapping[tuple[str, int], int]) -> float:
    if not f.needs_device or not f.gpus_visible:
        return 0.0
    share = f.gpus_visible / max(1, sharing.get((f.host, f.gpus_visible), 1))
    return math.floor(min(share, float(f.gpus_visible)) * 100) / 100 or 0.01


def _memory(f: RankFacts, gpus: float, per_host: Mapping[str, int]) -> float | None:
    if gpus > 0:
        return None if f.gpu_memory_gb is None else round(f.gpu_memory_gb * min(1.0, gpus), 1)
    if f.host_memory_gb is None:
        return None
    return round(f.host_memory_gb / max(1, per_host.get(f.host, 1)), 1)


def differ(types: Sequence[BlockType]) -> bool:
    """The blocks are not all of one type (what ``--assign auto`` asks)."""
    return len(set(types)) > 1
