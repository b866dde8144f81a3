"""Resource layouts: upstream shapes, filling an allocation, every rejection, invariants (hypothesis)."""
from __future__ import annotations

import re
from dataclasses import replace
from fractions import Fraction

import click
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from nnlo.errors import ConfigError
from nnlo.roles import Role, Shape, describe
from nnlo_sched.inner import parse_inner
from nnlo_sched.layout import LayoutError, compute_layout
from nnlo_sched.walltime import DEFAULT_WALLTIME
from nnlo_sched.profiles import Profile, load_profile


def shape_from_args(kind: str, args: list[str]) -> Shape:
    """The shape the one inner parser reads from a command line (a model is required; its name is moot)."""
    return parse_inner(kind, ["--model", "m.py", *args]).shape


SUMMIT = load_profile("summit")
TITAN = load_profile("titan")
DAINT = load_profile("cscs")
FLATIRON = load_profile("flatiron")
LOCAL4 = replace(load_profile("local"), cores_per_node=4, launcher_command="mpirun")


def test_one_master_six_workers_fit_one_summit_node() -> None:
    lay = compute_layout(SUMMIT, Shape(), workers=6)
    assert (lay.world_size, lay.nodes, lay.ranks_per_node, lay.cores_per_rank) == (7, 1, 7, 6)
    assert lay.unbound  # the master takes a spare core; the six workers take the six GPUs
    assert [lay.gpus_of(r) for r in range(7)] == [(), (0,), (1,), (2,), (3,), (4,), (5,)]
    assert lay.launcher == ["jsrun", "-n", "1", "-r", "1", "-a", "7", "-c", "42", "-g", "6", "-b", "packed:6"]
    assert "spare cores" in lay.notes[0] and "master rank 0 on node 0" in lay.notes[0]


def test_two_summit_nodes_use_one_resource_set_per_gpu() -> None:
    lay = compute_layout(SUMMIT, Shape(), workers=11)
    assert (lay.world_size, lay.nodes, lay.ranks_per_node) == (12, 2, 6)
    assert lay.launcher == ["jsrun", "-n", "12", "-r", "6", "-a", "1", "-c", "7", "-g", "1", "-b", "rs"]
    assert lay.gpus_of(0) == () and lay.gpus_of(1) == (1,) and lay.gpus_of(6) == (0,)
    assert lay.gpus_used == 11 and lay.gpus_allocated == 12
    assert "GPU stays idle" in lay.notes[0]


def test_upstream_optimization_shape_13_ranks() -> None:
    shape = shape_from_args("optimize", ["--block-size", "6", "--n-fold", "2", "--model", "m.py"])
    lay = compute_layout(DAINT, shape, "optimize", blocks=2)
    assert lay.world_size == 13 and lay.blocks == 2 and lay.nodes == 13
    h = lay.hierarchy
    assert (h.count(Role.COORDINATOR), h.count(Role.MASTER), h.count(Role.WORKER)) == (1, 4, 8)
    assert lay.launcher == ["srun", "-n", "13", "--nodes=13", "--ntasks-per-node=1", "--cpus-per-task=12",
                            "--wait=120", "--gpus-per-task=1", "--gpu-bind=map_gpu:0"]


def test_titan_aprun_and_uber_master() -> None:
    lay = compute_layout(TITAN, Shape(n_masters=3, n_processes=2), workers=4)
    assert lay.world_size == 1 + 2 + 4 * 2
    assert lay.launcher == ["aprun", "-n", "11", "-N", "1", "-d", "16"]


def test_gpu_sharing_on_summit_uses_mps_resource_sets() -> None:
    lay = compute_layout(SUMMIT, Shape(n_masters=0), nodes=2, gpus_per_worker=0.5)
    assert (lay.world_size, lay.ranks_per_node, lay.ranks_per_gpu) == (24, 12, 2)
    assert lay.launcher == ["jsrun", "-n", "12", "-r", "6", "-a", "2", "-c", "6", "-g", "1", "-b", "packed:3"]
    assert [lay.gpus_of(r) for r in range(4)] == [(0,), (0,), (1,), (1,)]


def test_local_mpirun_oversubscribes() -> None:
    local = load_profile("local")
    lay = compute_layout(local, Shape(), workers=5)
    assert lay.launcher[0].endswith("mpirun") and lay.launcher[1:] == ["-np", "6"]
    if local.cores_per_node < 6:
        assert any("oversubscribed" in n for n in lay.notes)


def test_cpu_only_run_on_a_gpu_cluster() -> None:
    lay = compute_layout(SUMMIT, Shape(), nodes=1, gpus_per_worker=0)
    assert lay.world_size == 42 and lay.gpus_used == 0
    assert lay.launcher[-4:] == ["-g", "0", "-b", "rs"]


def test_full_summit_fills_every_gpu() -> None:
    lay = compute_layout(SUMMIT, Shape(), nodes=4608, walltime_s=24 * 3600)
    assert lay.world_size == 4608 * 6 and lay.nodes == 4608
    assert lay.hierarchy.count(Role.WORKER) == 27647
    assert lay.gpus_allocated == 27648
    runs = lay.node_runs()
    assert runs == [(0, 0, {"master": 1, "worker": 5}), (1, 4607, {"worker": 6})]
    d = lay.to_dict(ranks=False)
    assert "ranks" not in d and d["world_size"] == 27648


@pytest.mark.parametrize(
    "profile, shape, kw, expect_world",
    [
        (SUMMIT, Shape(), dict(nodes=3), 18),
        (SUMMIT, Shape(n_processes=4), dict(nodes=3), 17),  # 1 master + 4 workers of 4 ranks
        (SUMMIT, Shape(block_size=6, n_fold=2), dict(nodes=3), 13),
        (DAINT, Shape(block_size=3), dict(nodes=10), 10),
        (TITAN, Shape(n_masters=0), dict(nodes=7), 7),
        (FLATIRON, Shape(), dict(nodes=1), 5),  # master on a spare core + 4 GPU workers
        (FLATIRON, Shape(), dict(nodes=1, gpus_per_worker=2), 3),
    ],
)
def test_nodes_alone_fill_the_allocation(profile: Profile, shape: Shape, kw: dict, expect_world: int) -> None:
    kind = "optimize" if shape.optimization else "train"
    lay = compute_layout(profile, shape, kind, **kw)
    assert lay.world_size == expect_world
    describe(lay.world_size, shape)  # the runtime accepts this world


@pytest.mark.parametrize(
    "profile, shape, kw, message",
    [
        (SUMMIT, Shape(), dict(workers=2, gpus_per_worker=7),
         "--gpus-per-worker 7 is more than a summit node has (6); use at most 6, or more --n-processes ranks "
         "per worker to spread a worker over GPUs"),
        (SUMMIT, Shape(), dict(workers=2, gpus_per_worker=4),
         "--gpus-per-worker 4 does not divide a summit node's 6 GPUs; use a divisor of 6"),
        (SUMMIT, Shape(), dict(workers=2, gpus_per_worker=0.3),
         "--gpus-per-worker 0.3 is neither a whole number nor 1/k; use e.g. 1, 2, 0.5 (2 ranks per GPU) or "
         "0.25"),
        (SUMMIT, Shape(), dict(workers=2, gpus_per_worker=-1),
         "--gpus-per-worker must be 0 or more, got -1"),
        (LOCAL4, Shape(), dict(workers=2, gpus_per_worker=1),
         "cluster 'local' has no GPUs; use --gpus-per-worker 0 or a profile with gpus_per_node"),
        (SUMMIT, Shape(), dict(workers=0),
         "a run needs at least 1 worker, got --workers 0"),
        (SUMMIT, Shape(), dict(workers=300, walltime_s=8 * 3600),
         "walltime 8h exceeds the 6h limit of queue 'batch' for 51 node(s); use --walltime 6h or less (the "
         "run resubmits itself from its checkpoints, so a shorter walltime loses nothing)"),
        (SUMMIT, Shape(), dict(nodes=50, walltime_s=25 * 3600),
         "walltime 25h exceeds the 6h limit of queue 'batch' for 50 node(s); use --walltime 6h or less (the "
         "run resubmits itself from its checkpoints, so a shorter walltime loses nothing)"),
        (SUMMIT, Shape(), dict(nodes=5000),
         "summit has 4608 nodes; ask for at most --nodes 4608"),
        (SUMMIT, Shape(), dict(workers=30000),
         "30001 ranks need 5001 summit nodes but the machine has 4608; ask for fewer workers or fewer "
         "GPUs per worker"),
        (SUMMIT, Shape(block_size=6), dict(blocks=6000),
         "36001 ranks need 6001 summit nodes but the machine has 4608; ask for fewer blocks or fewer "
         "GPUs per worker"),
        (SUMMIT, Shape(), dict(workers=20, nodes=1),
         "21 ranks (20 on GPUs) do not fit on 1 summit node(s) of 42 cores and 6 GPUs; use --nodes 4 or fewer "
         "workers"),
        (SUMMIT, Shape(block_size=6, n_fold=2), dict(blocks=3, nodes=1),
         "19 ranks (12 on GPUs) do not fit on 1 summit node(s) of 42 cores and 6 GPUs; use --nodes 4 or fewer "
         "blocks"),
        (SUMMIT, Shape(), dict(workers=3, nodes=5),
         "5 nodes for only 4 ranks leaves nodes empty; use --nodes 4 or fewer"),
        (SUMMIT, Shape(), dict(workers=8, nodes=4),
         "9 ranks at 3 per node fill 3 node(s), not 4; use --nodes 3"),
        (SUMMIT, Shape(), dict(workers=400, queue="batch-hm"),
         "queue 'batch-hm' takes at most 54 nodes, the run needs 67; use another --queue or fewer workers"),
        (SUMMIT, Shape(), dict(workers=1, queue="gpu"),
         "cluster 'summit' has no queue 'gpu'; use one of batch, batch-hm, debug, killable"),
        (TITAN, Shape(), dict(workers=300, walltime_s=7 * 3600),
         "walltime 7h exceeds the 6h limit of queue 'batch' for 301 node(s); use --walltime 6h or less (the "
         "run resubmits itself from its checkpoints, so a shorter walltime loses nothing)"),
        (SUMMIT, Shape(), dict(workers=4, blocks=2),
         "--blocks applies to optimization runs (nnlo optimize --block-size ...)"),
        (SUMMIT, Shape(block_size=4), dict(workers=4),
         "--workers applies to training; an optimization is sized by --blocks"),
        (SUMMIT, Shape(block_size=4), dict(blocks=0),
         "--blocks must be at least 1, got 0"),
        (SUMMIT, Shape(n_masters=3), dict(nodes=1, gpus_per_worker=6, workers=1),
         "4 ranks cannot hold 1 uber-master and 2 masters plus workers of 1 rank(s) each (need at least 5, "
         "then steps of 1); use 5 ranks"),
        (SUMMIT, Shape(), dict(nodes=0),
         "--nodes must be at least 1, got 0"),
        (LOCAL4, Shape(n_masters=4, n_processes=2), dict(nodes=1),
         "1 local node(s) cannot hold 4 master rank(s) and 3 worker(s) of 2 rank(s); use more --nodes, fewer "
         "--n-masters or fewer --n-processes"),
        (SUMMIT, Shape(n_processes=2), dict(nodes=2, gpus_per_worker=0.5),
         "jsrun resource sets of 2 rank(s) cannot start exactly 23 ranks at 12 per node; make the rank count "
         "a multiple of 2 (change the number of workers, --n-masters or --n-processes) or use "
         "--gpus-per-worker 1"),
        (SUMMIT, Shape(), dict(workers=30, gpus_per_worker=0.5),
         "jsrun resource sets of 2 rank(s) cannot start exactly 31 ranks at 11 per node; make the rank count "
         "a multiple of 2 (change the number of workers, --n-masters or --n-processes) or use "
         "--gpus-per-worker 1"),
    ],
)
def test_impossible_requests_are_refused_with_a_way_out(
    profile: Profile, shape: Shape, kw: dict, message: str
) -> None:
    kind = "optimize" if shape.optimization else "train"
    with pytest.raises(ConfigError) as e:
        compute_layout(profile, shape, kind, **kw)
    assert str(e.value) == message  # the whole line: what is wrong and the way out


@pytest.mark.parametrize("kw", [{}, {"nodes": 5}, {"blocks": 3}])
def test_block_size_that_does_not_split_into_folds(kw: dict) -> None:
    with pytest.raises(ConfigError, match="multiple of 2"):
        compute_layout(SUMMIT, shape_from_args("optimize", ["--block-size", "5", "--n-fold", "2"]), "optimize",
                       **kw)


def test_shape_from_inner_args() -> None:
    assert Shape.for_run(mode="allreduce", n_masters=1).n_masters == 0
    assert shape_from_args("train", ["--n-masters=3", "--n-processes", "2"]) == Shape(3, 2)
    s = shape_from_args("optimize", ["--n-fold", "2"])  # default block: n-fold x (1 master + 1 worker)
    assert (s.block_size, s.n_fold) == (4, 2)
    s = shape_from_args("optimize", ["--n-masters", "3"])  # the smallest block holds 2 masters with a worker each
    assert s.block_size == 5
    with pytest.raises(ConfigError, match="--n-masters"):
        shape_from_args("train", ["--n-masters", "-1"])


# -- invariants -------------------------------------------------------------------------------------
PROFILES = [SUMMIT, TITAN, DAINT, FLATIRON, LOCAL4, replace(FLATIRON, gpus_per_node=8, cores_per_node=64)]


@st.composite
def requests(draw: st.DrawFn) -> tuple[Profile, Shape, str, dict]:
    profile = draw(st.sampled_from(PROFILES))
    n_masters = draw(st.integers(0, 3))
    n_processes = draw(st.integers(1, 3))
    optimize = draw(st.booleans())
    kw: dict = {}
    if optimize:
        n_fold = draw(st.integers(1, 3))
        group = Shape(n_masters, n_processes).group_size(draw(st.integers(1, 3)))
        shape = Shape(n_masters, n_processes, block_size=group * n_fold, n_fold=n_fold)
        if draw(st.booleans()):
            kw["blocks"] = draw(st.integers(1, 12))
    else:
        shape = Shape(n_masters, n_processes)
        if draw(st.booleans()):
            kw["workers"] = draw(st.integers(1, 60))
    if draw(st.booleans()) or not kw:
        kw["nodes"] = draw(st.integers(1, 24))
    if profile.gpus_per_node:
        # jsrun's GPU-sharing resource sets add a launcher rule of their own (tested above): whole GPUs there
        shares = [None, 0, 1, 2] if profile.launcher == "jsrun" else [None, 0, 0.5, 0.25, 1, 2]
        kw["gpus_per_worker"] = draw(st.sampled_from(shares))
    return profile, shape, "optimize" if optimize else "train", kw


class _Oracle:
    """The placement rule of docs/clusters.md written out plainly, independently of nnlo_sched.layout: which
    worlds a request means, and whether a world fits on a number of nodes."""

    def __init__(self, profile: Profile, shape: Shape, gpus_per_worker: float | None) -> None:
        self.profile, self.shape = profile, shape
        g = Fraction(1 if profile.gpus_per_node else 0) if gpus_per_worker is None else Fraction(gpus_per_worker)
        self.gpw = g.limit_denominator(64)
        # ranks of one node that may hold a GPU: each rank takes g GPUs, or 1/g ranks share one
        self.slots = None if g == 0 else int(profile.gpus_per_node / g)
        queue = profile.queue(None)
        self.min_nodes = queue.min_nodes if queue else 1
        self.max_nodes = min(profile.nodes or 10**9, queue.max_nodes or 10**9 if queue else 10**9)

    @property
    def solo(self) -> bool:
        """A training group of one rank trains alone (no master) when one master and one-rank workers are asked."""
        return self.shape.n_masters == 1 and self.shape.n_processes == 1

    def world(self, units: int) -> int:
        """Ranks of ``units`` blocks (an optimization) or logical workers (a training; one worker: one rank)."""
        s = self.shape
        if s.optimization:
            assert s.block_size is not None
            return 1 + units * s.block_size
        if units == 1 and self.solo:
            return 1
        return s.n_masters + units * (s.n_processes if s.n_masters else 1)

    def servers(self, world: int) -> int:
        s = self.shape
        if s.optimization:
            assert s.block_size is not None
            masters = 0 if s.block_size // s.n_fold == 1 and self.solo else s.n_masters
            return 1 + (world - 1) // s.block_size * s.n_fold * masters
        return 0 if world == 1 and self.solo else s.n_masters

    def holds(self, world: int, nodes: int, *, fill: bool = False) -> bool:
        """``world`` ranks fit ``nodes`` nodes: on one node the server ranks may use cores without a GPU; on
        several, every rank takes a GPU slot. Filling never oversubscribes."""
        if not self.min_nodes <= nodes <= self.max_nodes or nodes > world:
            return False
        cores = self.profile.cores_per_node
        if nodes == 1:
            return ((world <= cores or (self.profile.oversubscribe and not fill))
                    and (self.slots is None or world - self.servers(world) <= self.slots))
        return -(-world // nodes) <= min(cores, self.slots if self.slots is not None else cores)

    @staticmethod
    def spread(world: int, nodes: int) -> int:
        """How many nodes ``world`` ranks fill at the same count on each (all but maybe the last)."""
        return -(-world // -(-world // nodes))

    def smallest_units(self) -> int:
        s = self.shape
        return 1 if s.optimization or s.n_masters == 0 else max(1, s.n_masters - 1)

    def possible(self, units: int) -> bool:
        """Every master has a worker: in a training of ``units`` workers, and in each fold group of a block."""
        s = self.shape
        if not s.optimization:
            return units >= self.smallest_units()
        assert s.block_size is not None
        if s.block_size // s.n_fold == 1 and self.solo:
            return True  # fold groups of one rank, each training alone
        k = s.n_processes if s.n_masters else 1
        workers, rest = divmod(s.block_size // s.n_fold - s.n_masters, k)
        return rest == 0 and workers >= (1 if s.n_masters == 0 else max(1, s.n_masters - 1))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests())
def test_layout_invariants(req: tuple[Profile, Shape, str, dict]) -> None:
    """Every request is placed exactly when the oracle says it fits, with the oracle's world and node count;
    a refusal is one line; a placement puts every rank of the runtime's hierarchy on a node it fits on."""
    profile, shape, kind, kw = req
    oracle = _Oracle(profile, shape, kw.get("gpus_per_worker"))
    units = kw.get("blocks", kw.get("workers"))
    expected: tuple[int, int] | None = None
    suggested: int | None = None
    if units is not None and oracle.possible(units):
        world = oracle.world(units)
        node_counts = [kw["nodes"]] if "nodes" in kw else range(1, world + 1)
        expected = next(((world, n) for n in node_counts
                         if oracle.holds(world, n) and oracle.spread(world, n) == n), None)
    elif units is None:  # --nodes alone: as many workers (blocks) as those nodes hold
        n = kw["nodes"]
        worlds = [oracle.world(u) for u in range(oracle.smallest_units(), n * profile.cores_per_node + 1)
                  if oracle.possible(u)]
        if oracle.solo and not shape.optimization:
            worlds.append(2)  # one worker under its master (upstream's -np 2), where a solo rank is 1
        fitting = [w for w in worlds if oracle.holds(w, n, fill=True)]
        if fitting and oracle.spread(max(fitting), n) == n:
            expected = (max(fitting), n)
        elif fitting:  # the most ranks would leave a node empty: refused, naming the node count they fill
            suggested = oracle.spread(max(fitting), n)
    try:
        lay = compute_layout(profile, shape, kind, **kw)
    except LayoutError as e:
        assert expected is None, f"refused a request that fits as {expected}: {e}"
        assert "\n" not in str(e) and re.search(r"\b(use|ask for)\b", str(e)), str(e)  # one line, a way out
        if suggested is not None:  # ... and that way out works
            assert f"use --nodes {suggested}" in str(e)
            assert compute_layout(profile, shape, kind, **{**kw, "nodes": suggested}).nodes == suggested
        return
    assert (lay.world_size, lay.nodes) == expected
    # the world is the one the runtime's role module lays out, every rank one role
    infos = list(lay.hierarchy)
    assert [r.rank for r in infos] == list(range(lay.world_size))
    servers = [r.rank for r in infos if not r.needs_device]
    assert len(servers) == oracle.servers(lay.world_size)
    assert lay.hierarchy.count(Role.WORKER) + lay.hierarchy.count(Role.SOLO) == lay.world_size - len(servers)
    placements = list(lay.placements())
    assert [p.rank for p in placements] == list(range(lay.world_size))
    per_node: dict[int, list] = {}
    for p in placements:
        per_node.setdefault(p.node, []).append(p)
    assert sorted(per_node) == list(range(lay.nodes))  # no empty node, none beyond the allocation
    gpw = lay.gpus_per_worker
    assert gpw == oracle.gpw
    for node, ps in per_node.items():
        assert len(ps) <= lay.ranks_per_node
        if not profile.oversubscribe:
            assert len(ps) * lay.cores_per_rank <= profile.cores_per_node
        users: dict[int, int] = {}
        for p in ps:
            info = lay.hierarchy[p.rank]
            if not info.needs_device or gpw == 0:
                assert p.gpus == ()
                continue
            assert len(p.gpus) == max(1, int(gpw))
            for g in p.gpus:
                assert 0 <= g < profile.gpus_per_node
                users[g] = users.get(g, 0) + 1
        limit = lay.ranks_per_gpu if gpw < 1 else 1
        assert all(n <= limit for n in users.values()), (node, users)
    assert Fraction(lay.to_dict(ranks=False)["gpus_per_worker"]).limit_denominator(64) == gpw


# -- what nnlo layout prints and stores, in full ------------------------------------------------------------
def test_a_shared_gpu_search_on_one_node_in_full() -> None:
    from nnlo_sched.layout import summary

    lay = compute_layout(SUMMIT, Shape(n_masters=0, block_size=4, n_fold=2), "optimize", blocks=3,
                         gpus_per_worker=0.5, walltime_s=5400)
    assert summary(lay).splitlines() == [
        "cluster   summit (queue batch)",
        "run       optimize: 13 ranks: 1 coordinator, 12 worker; 3 block(s) of 4 x 2 fold(s)",
        "nodes     1 x 13 ranks/node, 3 cores/rank, 0.5 GPU per worker rank, 2 ranks per GPU; GPUs used 6 of 6",
        "walltime  1h30 (queue limit for 1 node(s): 2h00)",
        "node map",
        "  node 0           1 coordinator, 12 workers",
        "rank map  0 coordinator | 1 worker | 2 worker(member) | 3 worker | 4 worker(member) | 5 worker | "
        "6 worker(member) | 7 worker | 8 worker(member) | 9 worker | 10 worker(member) | 11 worker | "
        "12 worker(member)",
        "gpu map   each rank sees its node's GPUs and computes on the one listed (nnlo.device.gpu_index) "
        "(CUDA_VISIBLE_DEVICES)",
        "  node 0           ranks 0-12: GPUs - 0 1 2 3 4 5 0 1 2 3 4 5",
        "note      no-GPU ranks: coordinator rank 0 on node 0 (on the node's spare cores, without a GPU)",
        "launch    jsrun -n 1 -r 1 -a 13 -c 39 -g 6 -b packed:3 <python> -m nnlo_sched run <run dir>"]
    d = lay.to_dict()
    ranks = d.pop("ranks")
    assert d == {
        "cluster": "summit", "kind": "optimize",
        "shape": {"n_masters": 0, "n_processes": 1, "block_size": 4, "block_sizes": None, "proposers": 1,
                  "n_fold": 2},
        "world_size": 13, "nodes": 1, "ranks_per_node": 13, "cores_per_rank": 3, "gpus_per_node": 6,
        "gpus_per_worker": 0.5, "ranks_per_gpu": 2, "gpu_binding": "layout", "gpus_used": 6, "gpus_allocated": 6,
        "workers_per_group": 1, "blocks": 3, "block_sizes": [4, 4, 4], "roles": {"coordinator": 1, "worker": 12},
        "queue": "batch", "walltime_s": 5400, "walltime_limit_s": 7200,
        "launcher": ["jsrun", "-n", "1", "-r", "1", "-a", "13", "-c", "39", "-g", "6", "-b", "packed:3"],
        "nodes_map": [{"first": 0, "last": 0, "roles": {"coordinator": 1, "worker": 12}}],
        "notes": ["no-GPU ranks: coordinator rank 0 on node 0 (on the node's spare cores, without a GPU)"]}
    assert ranks[:3] == [{"rank": 0, "role": "coordinator", "node": 0, "gpus": [], "device": ""},
                         {"rank": 1, "role": "b0:worker:w0", "node": 0, "gpus": [0], "device": "0"},
                         {"rank": 2, "role": "b0:worker:w0.1", "node": 0, "gpus": [1], "device": "1"}]
    # every worker rank of the node is dealt a GPU round-robin: 12 ranks on 6 GPUs, 2 each
    assert [r["gpus"][0] for r in ranks[1:]] == [0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5]
    assert lay.shares_gpus and lay.ranks_per_gpu == 2 and lay.unbound and lay.blocks == 3
    assert [lay.node_of(r) for r in (0, 12)] == [0, 0] and [s.rank for s in lay.server_ranks()] == [0]


def test_an_uber_master_training_over_three_nodes_in_full() -> None:
    from nnlo_sched.layout import summary

    lay = compute_layout(FLATIRON, Shape(n_masters=3, n_processes=2), workers=3, walltime_s=2 * 86400 + 3900)
    assert summary(lay).splitlines() == [
        "cluster   flatiron (queue gpu)",
        "run       train: 9 ranks: 1 uber-master, 2 master, 6 worker; 2 ranks per worker",
        "nodes     3 x 3 ranks/node, 12 cores/rank, 1 GPU per worker rank; GPUs used 6 of 12",
        "walltime  2d1h05 (queue limit for 3 node(s): 7d)",
        "node map",
        "  node 0           1 uber-master, 1 master, 1 worker",
        "  node 1           3 workers",
        "  node 2           1 master, 2 workers",
        "rank map  0 uber-master | 1 master | 2 worker | 3 worker(member) | 4 worker | 5 worker(member) | 6 master | "
        "7 worker | 8 worker(member)",
        "gpu map   bound by the launcher: each rank sees only its own GPU(s) and computes on the first "
        "(CUDA_VISIBLE_DEVICES)",
        "  node 0           ranks 0-2: GPUs - - 2",
        "  node 1           ranks 3-5: GPUs 0 1 2",
        "  node 2           ranks 6-8: GPUs - 1 2",
        "note      no-GPU ranks: uber-master rank 0 on node 0; master 2 ranks (1,6) on nodes 0,2 (each in a rank "
        "slot whose GPU stays idle)",
        "launch    srun --mpi=pmix -n 9 --nodes=3 --ntasks-per-node=3 --cpus-per-task=12 --wait=120 "
        "--gpus-per-task=1 --gpu-bind=map_gpu:0,1,2 <python> -m nnlo_sched run <run dir>"]
    d = lay.to_dict(ranks=False)
    assert (d["gpu_binding"], d["blocks"], d["block_sizes"], d["workers_per_group"], d["gpus_per_worker"]) == (
        "launcher", 0, [], 3, 1.0)
    assert d["roles"] == {"uber-master": 1, "master": 2, "worker": 6}
    assert [(p.rank, p.node, p.gpus) for p in lay.placements()] == [
        (0, 0, ()), (1, 0, ()), (2, 0, (2,)), (3, 1, (0,)), (4, 1, (1,)), (5, 1, (2,)), (6, 2, ()), (7, 2, (1,)),
        (8, 2, (2,))]
    assert not lay.shares_gpus and lay.ranks_per_gpu == 1 and lay.gpus_used == 6 and lay.gpus_allocated == 12


def test_a_filled_machine_collapses_its_node_map() -> None:
    from nnlo_sched.layout import summary

    lay = compute_layout(SUMMIT, Shape(n_processes=2), nodes=20, walltime_s=7200)
    text = summary(lay).splitlines()
    assert text[1] == "run       train: 119 ranks: 1 master, 118 worker; 2 ranks per worker"
    assert text[3] == "walltime  2h00 (queue limit for 20 node(s): 2h00)"
    assert text[4:8] == ["node map", "  node 0           1 master, 5 workers", "  nodes 1-18       6 workers each",
                         "  node 19          5 workers"]
    one = compute_layout(SUMMIT, Shape(), workers=1)
    assert summary(one).splitlines()[3] == "walltime  not given (queue limit for 1 node(s): 2h00)"
    cpu = compute_layout(LOCAL4, Shape(), workers=1)
    assert summary(cpu).splitlines()[:3] == ["cluster   local", "run       train: 1 ranks: 1 solo",
                                             "nodes     1 x 1 ranks/node, 4 cores/rank"]  # one worker trains alone
    assert "walltime" not in summary(cpu)  # no queue, no walltime given
    assert cpu.to_dict(ranks=False)["gpu_binding"] == "none" and cpu.gpus_used == 0
    long_map = compute_layout(SUMMIT, Shape(n_processes=2), nodes=100)
    rank_map = next(line for line in summary(long_map).splitlines() if line.startswith("rank map"))
    assert len(rank_map) == len("rank map  ") + 400 + len(" ... ") and " ... " in rank_map
    search = compute_layout(SUMMIT, Shape(block_size=7), "optimize", nodes=40)
    text = summary(search).splitlines()
    shown = text[text.index("node map") + 1:next(i for i, ln in enumerate(text) if ln.startswith("rank map"))]
    assert len(search.node_runs()) > 8 and len(shown) == 8  # 5 first groups, the elision, 2 last groups
    assert shown[5] == f"  ... {len(search.node_runs()) - 7} more node groups ..."
    assert shown[:2] == ["  node 0           1 coordinator, 1 master, 4 workers",
                         "  nodes 1-4        5 workers, 1 master each"]


def test_a_run_spec_is_laid_out_on_the_nodes_its_constraint_picks() -> None:
    from nnlo_sched.spec import RunSpec

    spec = RunSpec.from_argv("train", ["--model", "m.py"], "cscs", nodes=2, constraint="mc", walltime_s=1800, queue="debug")
    lay = spec.layout_on(DAINT)  # -C mc: 36 cores and no GPU per node
    assert (lay.world_size, lay.nodes, lay.cores_per_rank, lay.gpus_per_node, lay.queue, lay.walltime_s) == (
        72, 2, 1, 0, "debug", 1800)
    assert lay.launcher == ["srun", "-n", "72", "--nodes=2", "--ntasks-per-node=36", "--cpus-per-task=1", "--wait=120"]
    search = RunSpec.from_argv("optimize", ["--model", "m.py", "--block-size", "3"], "cscs", blocks=2, gpus_per_worker=1)
    lay = search.layout_on(DAINT)
    assert (lay.world_size, lay.nodes, lay.kind, lay.gpus_per_node, lay.queue, lay.blocks) == (7, 7, "optimize", 1,
                                                                                             "normal", 2)
    trained = RunSpec.from_argv("train", ["--model", "m.py"], "cscs", workers=3)
    assert trained.layout_on(DAINT).world_size == 4


def test_gpu_shares_at_their_limits() -> None:
    from fractions import Fraction

    from nnlo_sched.layout import gpu_fraction

    assert gpu_fraction(SUMMIT, None) == 1 and gpu_fraction(LOCAL4, None) == 0 and gpu_fraction(SUMMIT, 0) == 0
    assert gpu_fraction(SUMMIT, 1 / 64) == Fraction(1, 64) and gpu_fraction(SUMMIT, 0.5) == Fraction(1, 2)
    assert gpu_fraction(SUMMIT, 1) == 1 and gpu_fraction(SUMMIT, 6) == 6 and gpu_fraction(SUMMIT, 3) == 3
    for value, message in [
        (1 / 65, "--gpus-per-worker 0.0153846 is less than 1/64 of a GPU, the finest share nnlo lays out; use 1/64 "
                 "or more, or 0 to run on CPU cores only"),
        (float("inf"), "--gpus-per-worker must be a finite number, got inf; use e.g. 1, 0.5 or 0"),
        (1.5, "--gpus-per-worker 1.5 is neither a whole number nor 1/k; use e.g. 1, 2, 0.5 (2 ranks per GPU) or 0.25"),
        (0.4, "--gpus-per-worker 0.4 is neither a whole number nor 1/k; use e.g. 1, 2, 0.5 (2 ranks per GPU) or 0.25"),
        (4, "--gpus-per-worker 4 does not divide a summit node's 6 GPUs; use a divisor of 6"),
    ]:
        with pytest.raises(LayoutError) as e:
            gpu_fraction(SUMMIT, value)
        assert str(e.value) == message


def test_walltimes_and_server_notes_in_words() -> None:
    from nnlo_sched.layout import summary

    lines = summary(compute_layout(SUMMIT, Shape(), workers=1, walltime_s=90 * 60)).splitlines()
    assert lines[3] == "walltime  1h30 (queue limit for 1 node(s): 2h00)"
    lines = summary(compute_layout(SUMMIT, Shape(), workers=1, walltime_s=45 * 60)).splitlines()
    assert lines[3] == "walltime  45m (queue limit for 1 node(s): 2h00)"
    lines = summary(compute_layout(FLATIRON, Shape(), workers=1, walltime_s=2 * 86400)).splitlines()
    assert lines[3] == "walltime  2d (queue limit for 1 node(s): 7d)"
    lines = summary(compute_layout(FLATIRON, Shape(), workers=1, walltime_s=2 * 86400 - 60)).splitlines()
    assert lines[3] == "walltime  47h59 (queue limit for 1 node(s): 7d)"
    for walltime, shown in [(7 * 3600 + 60, "421m"), (7 * 3600 + 1, "25201s"), (3 * 3600, "3h")]:
        with pytest.raises(LayoutError, match=rf"^walltime {shown} exceeds the 2h limit of queue 'batch' for 1 node"):
            compute_layout(SUMMIT, Shape(), workers=1, walltime_s=walltime)
    cpu = compute_layout(SUMMIT, Shape(n_masters=3), workers=2, gpus_per_worker=0)
    assert cpu.notes == ["no-GPU ranks: uber-master rank 0 on node 0; master 2 ranks (1,3) on node 0 (on CPU cores)"]
    many = compute_layout(DAINT, Shape(block_size=2), "optimize", blocks=9)  # 1 node per rank: a master per block
    assert many.notes[0] == ("no-GPU ranks: coordinator rank 0 on node 0; master 9 ranks (1,3,5,...,15,17) on "
                             "nodes 1,3,5,...,15,17 (each in a rank slot whose GPU stays idle)")


def test_every_example_of_layout_help_runs_as_written() -> None:
    """The examples `nnlo layout --help` prints are commands a user copies: each one lays its run out."""
    import shlex

    from click.testing import CliRunner

    from nnlo_sched.commands.layout import layout_command

    examples = [line.split("#")[0].split() for line in (layout_command.help or "").splitlines()
                if line.strip().startswith("nnlo layout ")]
    assert len(examples) >= 5
    for words in examples:
        result = CliRunner().invoke(layout_command, words[2:])
        assert result.exit_code == 0, f"{shlex.join(words)}: {result.output}"
        assert "rank map" in result.output or "node map" in result.output or "nodes" in result.output


def test_layout_takes_the_declarations_of_submit_and_of_the_run() -> None:
    """One declaration per option: nnlo layout's resource options are nnlo submit's (the walltime's default
    included), its shape options nnlo train's and optimize's; only a kind it does not choose leaves --mode,
    --n-fold and --proposers without a default."""
    from nnlo_sched.commands.layout import layout_command
    from nnlo_sched.commands.submit import submit_command
    from nnlo_sched.options import command

    def options(cmd):
        return {p.opts[0] if p.opts[0].startswith("--") else p.opts[-1]: p for p in cmd.params
                if isinstance(p, click.Option)}

    def declaration(p: click.Option) -> tuple:
        return p.opts, p.secondary_opts, p.type, p.help, p.callback

    layout, submit = options(layout_command), options(submit_command)
    run = {**options(command("train")), **options(command("optimize"))}
    for name in ("--cluster", "--constraint", "--workers", "--nodes", "--gpus-per-worker", "--blocks", "--walltime",
                 "--queue"):
        assert declaration(layout[name]) == declaration(submit[name]), name
        assert layout[name].default == submit[name].default, name
    assert layout["--walltime"].default == DEFAULT_WALLTIME  # it was none: not checked against the queue's limit
    for name in ("--n-masters", "--n-processes", "--mode", "--block-size", "--block-sizes", "--n-fold", "--proposers"):
        assert declaration(layout[name]) == declaration(run[name]), name
        expected = None if name in ("--mode", "--n-fold", "--proposers") else run[name].default
        assert layout[name].default == expected, name
