"""Sizing a run for a cluster: from workers/blocks to nodes, or from nodes to as many workers/blocks as fit.

The process hierarchy itself comes from :func:`nnlo.roles.describe` (the same function the runtime uses to
split its communicators), so a layout's world size is, by construction, one the runtime accepts. This module
only decides how many ranks, on how many nodes, with which cores and GPUs, and refuses what cannot run
(too many GPUs per rank, a walltime past the queue's limit, more processes than the site allows...), each
time with the reason and a way out.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from nnlo.device import device_variable
from nnlo.errors import ConfigError
from nnlo.roles import RoleError, Shape, describe
from nnlo_sched.launchers import LaunchPlan, launcher_for
from nnlo_sched.launchers.base import LaunchError
from nnlo_sched.layout.model import Layout, LayoutRecord
from nnlo_sched.profiles.schema import Profile

#: No layout has more ranks than this. Why a bound at all: an oversubscribed profile (``local``) has no node
#: or process limit, so an absurd count (``--workers 1e30``) would otherwise reach the role hierarchy, which
#: lists every rank (a hang, or an OverflowError past 2**63). A million ranks is beyond today's largest runs.
MAX_RANKS = 1_000_000
#: The most ranks that may share one GPU (``--gpus-per-worker 1/64``): finer requests are refused, never
#: rounded to zero (which would silently run on CPU cores).
MAX_RANKS_PER_GPU = 64


class LayoutError(ConfigError):
    """A request that cannot be placed on the cluster; the message says why and what would work."""


def _hours(seconds: int) -> str:
    if seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    if seconds % 60 == 0:
        return f"{seconds // 60}m"
    return f"{seconds}s"


def gpu_fraction(profile: Profile, requested: float | None) -> Fraction:
    """GPUs per worker rank: a whole number, or 1/k for k ranks sharing a GPU; 0 runs on CPU cores."""
    if requested is None:
        return Fraction(1) if profile.gpus_per_node else Fraction(0)
    if requested < 0:
        raise LayoutError(f"--gpus-per-worker must be 0 or more, got {requested:g}")
    if not math.isfinite(requested):
        raise LayoutError(f"--gpus-per-worker must be a finite number, got {requested!r}; use e.g. 1, 0.5 or 0")
    if requested == 0:
        return Fraction(0)
    if requested < 1 / MAX_RANKS_PER_GPU - 1e-12:
        raise LayoutError(
            f"--gpus-per-worker {requested:g} is less than 1/{MAX_RANKS_PER_GPU} of a GPU, the finest share "
            f"nnlo lays out; use 1/{MAX_RANKS_PER_GPU} or more, or 0 to run on CPU cores only"
        )
    g = Fraction(requested).limit_denominator(MAX_RANKS_PER_GPU)
    if profile.gpus_per_node == 0:
        raise LayoutError(
            f"cluster {profile.label!r} has no GPUs; use --gpus-per-worker 0 or a profile with gpus_per_node"
        )
    if (g >= 1 and g.denominator != 1) or (g < 1 and g.numerator != 1):
        raise LayoutError(
            f"--gpus-per-worker {requested:g} is neither a whole number nor 1/k; "
            "use e.g. 1, 2, 0.5 (2 ranks per GPU) or 0.25"
        )
    if g > profile.gpus_per_node:
        raise LayoutError(
            f"--gpus-per-worker {requested:g} is more than a {profile.label} node has "
            f"({profile.gpus_per_node}); use at most {profile.gpus_per_node}, or more --n-processes "
            "ranks per worker to spread a worker over GPUs"
        )
    if g >= 1 and profile.gpus_per_node % int(g):
        raise LayoutError(
            f"--gpus-per-worker {int(g)} does not divide a {profile.label} node's {profile.gpus_per_node} GPUs; "
            f"use a divisor of {profile.gpus_per_node}"
        )
    return g


@dataclass(frozen=True)
class _Node:
    """What one node can hold: ranks (cores) and GPU-using ranks (GPU slots; None = unlimited)."""

    cores: int
    gpu_slots: int | None
    oversubscribe: bool

    def uniform_cap(self) -> int:
        """Ranks per node when every rank holds a GPU slot (jobs of several nodes)."""
        return min(self.cores, self.gpu_slots) if self.gpu_slots is not None else self.cores


def _worker_ranks(shape: Shape, world: int) -> int:
    """Ranks that need a GPU in a world of ``world`` ranks of ``shape``."""
    return world - _servers(shape, world)


def _servers(shape: Shape, world: int) -> int:
    """Ranks that need no GPU: the coordinator and proposers, and every training group's masters."""
    if not shape.optimization:
        return shape.servers_in_group(world)
    f = shape.n_fold
    return shape.head_ranks + sum(f * shape.servers_in_group(bs // f) for bs in shape.blocks_in(world))


def _fits_one_node(node: _Node, shape: Shape, world: int) -> bool:
    if world > node.cores and not node.oversubscribe:
        return False
    return node.gpu_slots is None or _worker_ranks(shape, world) <= node.gpu_slots


def _fits(node: _Node, shape: Shape, world: int, nodes: int) -> bool:
    if nodes == 1:
        return _fits_one_node(node, shape, world)
    return -(-world // nodes) <= node.uniform_cap()


def _world(shape: Shape, workers: int | None, blocks: int | None) -> int:
    try:
        if shape.optimization:
            if workers is not None:
                raise LayoutError("--workers applies to training; an optimization is sized by --blocks")
            if blocks is not None and blocks < 1:
                raise LayoutError(f"--blocks must be at least 1, got {blocks}")
            shape.check_blocks()
            return shape.search_world(blocks)
        if blocks is not None:
            raise LayoutError("--blocks applies to optimization runs (nnlo optimize --block-size ...)")
        if workers is not None and workers < 1:
            raise LayoutError(f"a run needs at least 1 worker, got --workers {workers}")
        return shape.world_size(workers or max(1, shape.masters_with_workers))
    except RoleError as e:
        raise LayoutError(str(e)) from None


def _fill(node: _Node, shape: Shape, nodes: int, cluster: str) -> int:
    """The largest world that the shape accepts and that fits ``nodes`` nodes."""
    if node.oversubscribe and nodes == 1 and node.gpu_slots is None:
        cap_ranks, cap_workers = node.cores, None
    elif nodes == 1:
        cap_ranks, cap_workers = node.cores, node.gpu_slots
    else:
        cap_ranks, cap_workers = nodes * node.uniform_cap(), None
    if shape.optimization:
        head = shape.head_ranks
        if shape.block_sizes is not None:  # heterogeneous blocks: the one world they make, if it fits
            world = shape.search_world()
            if world > cap_ranks or (cap_workers is not None and _worker_ranks(shape, world) > cap_workers):
                raise LayoutError(
                    f"{nodes} {cluster} node(s) cannot hold the {world} ranks of --block-sizes "
                    f"{shape.blocks_text()}; use more --nodes or smaller blocks"
                )
            return world
        assert shape.block_size is not None
        bs = shape.block_size
        n = (cap_ranks - head) // bs
        if cap_workers is not None:
            per_block = _worker_ranks(shape, head + bs)
            n = min(n, cap_workers // per_block)
        if n < 1:
            who = "1 coordinator" + (f" + {shape.proposer_ranks} proposers" if shape.proposer_ranks else "")
            raise LayoutError(
                f"{nodes} {cluster} node(s) cannot hold {who} + 1 block of {bs} ranks; "
                f"use more --nodes or a smaller --block-size"
            )
        return head + n * bs
    k = shape.ranks_per_worker
    w = (cap_ranks - shape.server_ranks) // k
    if cap_workers is not None:
        w = min(w, cap_workers // k)
    need = 1 if shape.allreduce else shape.masters_with_workers
    if w < need and shape.is_solo(1) and (cap_workers is None or cap_workers >= 1):
        return 1  # room for one worker alone: a solo group needs no master
    if w < need:
        raise LayoutError(
            f"{nodes} {cluster} node(s) cannot hold {shape.server_ranks} master rank(s) and {need} worker(s) "
            f"of {k} rank(s); use more --nodes, fewer --n-masters or fewer --n-processes"
        )
    return shape.server_ranks + w * k  # the masters and every worker that fits (one worker too: 2 ranks here)


def oversubscribed(ranks: int, cores: int) -> str | None:
    """The note for ``ranks`` ranks on a node of ``cores`` cores when they are more (``nnlo layout`` and
    ``nnlo train|optimize -n`` say it the same way); None when they fit."""
    return f"oversubscribed: {ranks} ranks on {cores} cores" if ranks > cores else None


def compute_layout(
    profile: Profile,
    shape: Shape,
    kind: str = "train",
    *,
    workers: int | None = None,
    blocks: int | None = None,
    nodes: int | None = None,
    gpus_per_worker: float | None = None,
    walltime_s: int | None = None,
    queue: str | None = None,
) -> Layout:
    """Place a run of ``shape`` on ``profile``'s nodes; see :mod:`nnlo_sched.layout.model` for the rule."""
    if (kind == "optimize" and not shape.optimization) or (kind == "train" and shape.optimization):
        raise LayoutError(f"a {kind} run cannot have this shape ({shape})")
    gpw = gpu_fraction(profile, gpus_per_worker)
    slots = None if gpw == 0 else int(profile.gpus_per_node / gpw)
    node = _Node(profile.cores_per_node, slots, profile.oversubscribe)
    if nodes is not None and nodes < 1:
        raise LayoutError(f"--nodes must be at least 1, got {nodes}")
    if profile.nodes is not None and nodes is not None and nodes > profile.nodes:
        raise LayoutError(f"{profile.label} has {profile.nodes} nodes; ask for at most --nodes {profile.nodes}")

    _world(shape, None, None)  # the shape itself is possible (folds divide blocks, groups hold workers)
    if nodes is not None and workers is None and blocks is None:
        world = _fill(node, shape, nodes, profile.label)
        # Step down until the launcher can express the world (jsrun's GPU-sharing sets hold k ranks each).
        # heterogeneous blocks make one world only: no smaller one to step down to
        step: int = shape.ranks_per_worker
        if shape.optimization:
            step = world if shape.block_sizes is not None else int(shape.block_size or 1)
        smallest = _world(shape, None, None)
        first: LaunchError | None = None
        for _ in range(8):  # launchers' constraints repeat within a few steps (GPU-sharing sets of <= 8)
            try:
                return _place(profile, shape, kind, world, nodes, node, gpw, walltime_s, queue)
            except LaunchError as e:
                first = first or e
            except LayoutError:
                if first is None:  # a limit that no smaller world lifts either
                    raise
            if world - step < smallest:
                break
            world -= step
        raise LayoutError(str(first)) from None
    world = _world(shape, workers, blocks)
    try:
        return _place(profile, shape, kind, world, nodes, node, gpw, walltime_s, queue)
    except LaunchError as e:
        raise LayoutError(str(e)) from None


def _place(
    profile: Profile,
    shape: Shape,
    kind: str,
    world: int,
    nodes: int | None,
    node: _Node,
    gpw: Fraction,
    walltime_s: int | None,
    queue: str | None,
) -> Layout:
    """Lay ``world`` ranks out on ``nodes`` nodes (None: as few as hold them) and check the site's limits."""
    fewer = "fewer blocks" if shape.optimization else "fewer workers"  # what to cut: a search's unit is a block
    if world > MAX_RANKS:
        raise LayoutError(f"{world} ranks are more than nnlo lays out (at most {MAX_RANKS:,}); ask for {fewer}")
    slots = node.gpu_slots
    if nodes is None:
        nodes = 1 if _fits_one_node(node, shape, world) else -(-world // node.uniform_cap())
    elif not _fits(node, shape, world, nodes):
        best = 1 if _fits_one_node(node, shape, world) else -(-world // node.uniform_cap())
        raise LayoutError(
            f"{world} ranks ({_worker_ranks(shape, world)} on GPUs) do not fit on {nodes} {profile.label} node(s) "
            f"of {profile.cores_per_node} cores and {profile.gpus_per_node} GPUs; use --nodes {best} "
            f"or {fewer}"
        )
    if nodes > world:
        raise LayoutError(f"{nodes} nodes for only {world} ranks leaves nodes empty; use --nodes {world} or fewer")
    if profile.nodes is not None and nodes > profile.nodes:
        raise LayoutError(
            f"{world} ranks need {nodes} {profile.label} nodes but the machine has {profile.nodes}; "
            f"ask for {fewer} or fewer GPUs per worker"
        )

    ranks_per_node = -(-world // nodes)
    if -(-world // ranks_per_node) < nodes:
        used = -(-world // ranks_per_node)
        raise LayoutError(
            f"{world} ranks at {ranks_per_node} per node fill {used} node(s), not {nodes}; use --nodes {used}"
        )
    unbound = nodes == 1 and slots is not None and ranks_per_node > slots
    cores_per_rank = max(1, profile.cores_per_node // ranks_per_node)
    notes: list[str] = []
    over = oversubscribed(ranks_per_node, profile.cores_per_node)
    if over:
        notes.append(over)

    q = profile.queue(queue)
    limit: int | None = None
    if q is not None:
        if nodes < q.min_nodes:
            fit = [o.name for o in profile.queues.values()
                   if o.min_nodes <= nodes and (o.max_nodes is None or nodes <= o.max_nodes)]
            other = f", or --queue {' or '.join(fit)}" if fit else ""
            raise LayoutError(f"queue {q.name!r} needs at least {q.min_nodes} nodes; use --nodes {q.min_nodes}{other}")
        if q.max_nodes is not None and nodes > q.max_nodes:
            raise LayoutError(
                f"queue {q.name!r} takes at most {q.max_nodes} nodes, the run needs {nodes}; "
                "use another --queue or fewer workers"
            )
        limit = q.walltime_limit(nodes)
        if walltime_s is not None and limit is not None and walltime_s > limit:
            raise LayoutError(
                f"walltime {_hours(walltime_s)} exceeds the {_hours(limit)} limit of queue {q.name!r} for "
                f"{nodes} node(s); use --walltime {_hours(limit)} or less (the run resubmits itself from its "
                "checkpoints, so a shorter walltime loses nothing)"
            )

    try:
        hierarchy = describe(world, shape)
    except RoleError as e:  # cannot happen for worlds built above; kept as a guard with the runtime's words
        raise LayoutError(str(e)) from None

    plan = LaunchPlan(world, nodes, ranks_per_node, cores_per_rank, gpw, unbound)
    launcher = launcher_for(profile)
    launcher.check(plan)
    binding = "none" if gpw == 0 else ("launcher" if plan.bound and launcher.binds_gpus else "layout")
    layout = Layout(
        cluster=profile.name,
        kind=kind,
        hierarchy=hierarchy,
        nodes=nodes,
        ranks_per_node=ranks_per_node,
        cores_per_rank=cores_per_rank,
        gpus_per_node=profile.gpus_per_node,
        gpus_per_worker=gpw,
        unbound=unbound,
        queue=q.name if q else None,
        walltime_s=walltime_s,
        walltime_limit_s=limit,
        launcher=launcher.argv(plan),
        notes=notes,
        gpu_binding=binding,
        device_variable=device_variable(profile.gpu_vendor),
        slot_devices=tuple(launcher.slot_device_names(plan)) if binding == "launcher" else (),
    )
    layout.notes[:0] = _server_notes(layout)
    return layout


#: how the note on the ranks that compute nothing (coordinator, masters) starts: ``nnlo layout`` prints it with
#: the layout, and every submission's checks (a dry run too) from the run's layout record (:func:`idle_gpu_notes`)
NO_GPU_RANKS = "no-GPU ranks: "


def idle_gpu_notes(layout: LayoutRecord) -> list[str]:
    """The note of a layout on GPU nodes that says which ranks have no GPU (or leave their slot's GPU idle);
    none on CPU nodes, where every rank computes on cores alike."""
    if not layout.gpus_per_worker:
        return []
    return [n for n in layout.notes if n.startswith(NO_GPU_RANKS)]


def _server_notes(layout: Layout) -> list[str]:
    servers = layout.server_ranks()
    if not servers:
        return []
    by_role: dict[str, list[int]] = {}
    for r in servers:
        by_role.setdefault(str(r.role), []).append(r.rank)
    parts = []
    for role, ranks in by_role.items():
        node_ids = sorted({layout.node_of(r) for r in ranks})
        where = f"node {node_ids[0]}" if len(node_ids) == 1 else f"nodes {_spans(node_ids)}"
        rank_txt = f"rank {ranks[0]}" if len(ranks) == 1 else f"{len(ranks)} ranks ({_spans(ranks)})"
        parts.append(f"{role} {rank_txt} on {where}")
    if layout.gpus_per_worker == 0:
        how = "on CPU cores"
    elif layout.unbound:
        how = "on the node's spare cores, without a GPU"
    else:
        how = "each in a rank slot whose GPU stays idle"
    return [f"{NO_GPU_RANKS}{'; '.join(parts)} ({how})"]


def _spans(values: list[int]) -> str:
    out: list[str] = []
    start = prev = values[0]
    for v in [*values[1:], None]:
        if v is not None and v == prev + 1:
            prev = v
            continue
        out.append(f"{start}" if start == prev else f"{start}-{prev}")
        if v is not None:
            start = prev = v
    if len(out) > 6:
        out = [*out[:3], "...", *out[-2:]]
    return ",".join(out)
