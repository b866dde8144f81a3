"""The role hierarchy: explicit upstream shapes, every rejection, and invariants over all small shapes."""
import itertools

import pytest
from hypothesis import given, strategies as st

from nnlo.roles import Role, RoleError, Shape, describe, parse_block_sizes


def roles(h):
    return [r.role for r in h]


def test_three_ranks_is_one_master_two_workers():
    h = describe(3)
    assert roles(h) == [Role.MASTER, Role.WORKER, Role.WORKER]
    assert [r.parent for r in h] == [None, 0, 0]
    assert h.groups[0].workers == ((1,), (2,))
    assert h.rank_map() == "0 master | 1-2 worker"
    assert [r.label() for r in h] == ["master:m0", "worker:w0", "worker:w1"]  # no block: a plain training
    assert not h[0].needs_device and h[1].needs_device


def test_upstream_optimization_example_13_ranks():
    # mpirun -np 13 --block-size 6 --n-fold 2 = 1 coordinator + 2 blocks x 2 folds x (1 master + 2 workers)
    h = describe(13, Shape(block_size=6, n_fold=2))
    assert h.coordinator == 0 and h[0].role is Role.COORDINATOR
    assert h.blocks == ((1, 2, 3, 4, 5, 6), (7, 8, 9, 10, 11, 12))
    assert len(h.groups) == 4
    assert [g.masters for g in h.groups] == [(1,), (4,), (7,), (10,)]
    assert [(g.block, g.fold) for g in h.groups] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert h.count(Role.MASTER) == 4 and h.count(Role.WORKER) == 8
    assert h[5].label() == "b0f1:worker:w0"
    assert h.block_leader(1) == 7


def test_sub_masters_spread_workers_evenly():
    # 1 uber-master + 2 masters + 5 workers
    h = describe(8, Shape(n_masters=3))
    g = h.groups[0]
    assert g.uber_master == 0
    assert g.masters == (1, 5)
    assert g.workers == ((2,), (3,), (4,), (6,), (7,))
    assert g.master_of_worker == (0, 0, 0, 1, 1)
    assert h[1].parent == 0 and h[6].parent == 5
    assert h[0].role is Role.UBER_MASTER


def test_allreduce_worker_groups_under_a_master():
    h = describe(5, Shape(n_processes=2))
    g = h.groups[0]
    assert g.workers == ((1, 2), (3, 4))
    assert [h[r].member for r in (1, 2, 3, 4)] == [0, 1, 0, 1]
    assert h[2].parent == 1 and h[1].parent == 0
    assert g.worker_leaders() == (1, 3)
    assert h.colors(2)["worker"] == h.colors(1)["worker"] != h.colors(3)["worker"]
    assert h.colors(0)["worker"] is None


@pytest.mark.parametrize("mode", ["gem", "easgd", "downpour"])
def test_a_group_of_one_rank_trains_alone(mode):
    """nnlo train -n 1: one solo rank, its own master and only worker; the layout gives one worker one rank."""
    shape = Shape.for_run(mode=mode)
    h = describe(1, shape)
    assert roles(h) == [Role.SOLO] and h.rank_map() == "0 solo" and h[0].label() == "solo"
    assert h[0].needs_device and h[0].parent is None and h.colors(0)["worker"] is None
    assert h.groups[0].workers == ((0,),) and h.groups[0].masters == (0,) and h.groups[0].top == 0
    assert shape.world_size(1) == 1 and shape.workers_in_group(1) == 1 and shape.servers_in_group(1) == 0
    assert roles(describe(2, shape)) == [Role.MASTER, Role.WORKER]  # -n 2 is still a master with one worker
    assert shape.world_size(2) == 3 and shape.smallest_group == 2  # a search's default block keeps its master


def test_one_rank_search_blocks_and_fold_groups_are_solo():
    """optimize --block-size 1 (one trial per GPU) and --block-size 2 --n-fold 2: every fold group one rank."""
    h = describe(7, Shape.for_run(block_size=1, search=True))
    assert roles(h) == [Role.COORDINATOR] + [Role.SOLO] * 6 and h.blocks == tuple((r,) for r in range(1, 7))
    assert [h[r].label() for r in (1, 6)] == ["b0:solo", "b5:solo"]
    folds = describe(5, Shape.for_run(block_size=2, n_fold=2, search=True))
    assert [(g.block, g.fold, g.ranks) for g in folds.groups] == [(0, 0, (1,)), (0, 1, (2,)), (1, 0, (3,)),
                                                                  (1, 1, (4,))]
    assert folds[2].label() == "b0f1:solo" and "4 solo" in folds.summary()
    assert Shape.for_run(block_size=1, search=True).search_world(6) == 7


def test_pure_allreduce_mode_one_group_of_replicas():
    h = describe(3, Shape(n_masters=0))
    assert roles(h) == [Role.WORKER] * 3
    assert h.groups[0].workers == ((0, 1, 2),)
    assert describe(1, Shape(n_masters=0)).groups[0].workers == ((0,),)
    assert Shape(n_masters=0).world_size(4) == 4


@pytest.mark.parametrize(
    "world, shape, message",
    [
        (4, Shape(n_processes=2), "use 5 ranks"),
        (1, Shape(n_processes=2), "use 3 ranks"),
        (1, Shape(n_masters=3), "1 uber-master and 2 masters"),
        (2, Shape(n_masters=3), "1 uber-master and 2 masters"),
        (14, Shape(block_size=6, n_fold=2), "use -n 13"),
        (13, Shape(block_size=6, n_fold=4), "multiple of 4"),
        (5, Shape(block_size=4, n_fold=4, n_processes=2), "cannot hold 1 master"),
        (3, Shape(block_size=3), "use -n 4"),
        (0, Shape(), "at least 1"),
    ],
)
def test_impossible_shapes_name_the_problem_and_a_fix(world, shape, message):
    with pytest.raises(RoleError, match=message):
        describe(world, shape)


@pytest.mark.parametrize(
    "kwargs",
    [dict(n_masters=-1), dict(n_processes=0), dict(n_fold=0), dict(block_size=0), dict(n_fold=2)],
)
def test_invalid_shape_values(kwargs):
    with pytest.raises(RoleError):
        Shape(**kwargs)


def test_world_size_for_workers():
    assert Shape().world_size(2) == 3
    assert Shape(n_processes=2).world_size(2) == 5
    assert Shape(n_masters=3).world_size(4) == 7
    assert Shape(block_size=6, n_fold=2).world_size(2, n_blocks=2) == 13
    with pytest.raises(RoleError, match="at least 1 worker"):
        Shape().world_size(0)


shapes = st.builds(
    Shape,
    n_masters=st.integers(0, 4),
    n_processes=st.integers(1, 3),
    block_size=st.one_of(st.none(), st.integers(1, 12)),
    n_fold=st.just(1),
).filter(lambda s: True)


def check_invariants(h):
    seen = set()
    for g in h.groups:
        if h.shape.is_solo(len(g.ranks)):  # one rank: its own master and its only worker, reporting to nobody
            (r,) = g.ranks
            assert g.masters == (r,) and g.workers == ((r,),) and g.uber_master is None
            assert h[r].role is Role.SOLO and h[r].parent is None and h[r].needs_device
            assert seen.isdisjoint(g.ranks)
            seen |= set(g.ranks)
            continue
        # every group rank is either a server or in exactly one worker
        server = set(g.masters) | ({g.uber_master} if g.uber_master is not None else set())
        worker_ranks = [r for w in g.workers for r in w]
        assert len(worker_ranks) == len(set(worker_ranks))
        assert server.isdisjoint(worker_ranks)
        assert sorted(server | set(worker_ranks)) == list(g.ranks)
        assert list(g.ranks) == list(range(g.ranks[0], g.ranks[-1] + 1))  # contiguous
        assert seen.isdisjoint(g.ranks)
        seen |= set(g.ranks)
        for w, m in zip(g.workers, g.master_of_worker):
            if g.masters:
                assert h[w[0]].parent == g.masters[m]
            for member in w[1:]:
                assert h[member].parent == w[0]
        for m in g.masters:
            assert h[m].parent == g.uber_master
            if not h.shape.allreduce:
                assert g.worker_leaders(h[m].master), "every master has a worker"
    coord = {h.coordinator} if h.coordinator is not None else set()
    assert seen.isdisjoint(h.proposers) and set(h.proposers) == {r.rank for r in h if r.role is Role.PROPOSER}
    assert seen | coord | set(h.proposers) == set(range(h.world_size))
    if h.shape.optimization:  # blocks follow the coordinator and the proposers, contiguous, in order
        assert h.proposers == tuple(range(1, 1 + h.shape.proposer_ranks))
        flat = [r for b in h.blocks for r in b]
        assert flat == list(range(h.shape.head_ranks, h.world_size))
    colors = {}
    for r in h:  # every all-reduce worker group has its own color (heterogeneous groups included)
        c = h.colors(r.rank)["worker"]
        if c is not None:
            colors.setdefault(c, set()).add((r.group, r.worker))
    assert all(len(v) == 1 for v in colors.values())
    assert len(h.ranks) == h.world_size
    for r in h:
        assert r.role in Role
        assert (r.role is Role.COORDINATOR) == (r.rank == h.coordinator)


@given(shape=shapes, world=st.integers(1, 40))
def test_invariants_or_clear_error(shape, world):
    try:
        h = describe(world, shape)
    except RoleError as e:
        assert "use" in str(e) or "need" in str(e)
        return
    check_invariants(h)
    # The sizing function used by the scheduler side agrees with the runtime's description, but for a master
    # with a single worker (upstream's -np 2), which it sizes as that worker alone (one rank, no master).
    size = len(h.groups[0].ranks)
    n_workers = shape.workers_in_group(size)
    relayed = n_workers == 1 and shape.solo_capable and size == 2
    assert shape.world_size(n_workers, n_blocks=len(h.blocks)) == world - (len(h.groups) if relayed else 0)


def test_exhaustive_small_shapes_round_trip():
    """Every shape the scheduler can size is laid out by the runtime with the same rank count."""
    for n_masters, n_proc, n_workers, folds in itertools.product(
        range(0, 4), range(1, 4), range(1, 6), range(1, 4)
    ):
        if n_masters > 1 and n_workers < n_masters - 1:
            continue
        for block in (False, True):
            if folds > 1 and not block:
                continue
            base = Shape(n_masters=n_masters, n_processes=n_proc)
            group = base.group_size(n_workers)
            shape = Shape(
                n_masters=n_masters,
                n_processes=n_proc,
                block_size=group * folds if block else None,
                n_fold=folds if block else 1,
            )
            for n_blocks in (1, 2) if block else (1,):
                world = shape.world_size(n_workers, n_blocks)
                h = describe(world, shape)
                check_invariants(h)
                assert len(h.groups) == (n_blocks * folds if block else 1)
                expected_workers = n_workers * (n_proc if n_masters else 1)
                assert sum(len(w) for w in h.groups[0].workers) == expected_workers


def test_heterogeneous_blocks_with_proposers():
    # --block-sizes 6,6,3,3 --proposers 2: 1 coordinator + 2 proposers + 18 block ranks
    shape = Shape(block_sizes=(6, 6, 3, 3), proposers=2)
    h = describe(21, shape)
    assert h.proposers == (1, 2) and [h[r].label() for r in (1, 2)] == ["proposer:p0", "proposer:p1"]
    assert h.block_sizes == (6, 6, 3, 3) and h.blocks[0] == tuple(range(3, 9)) and h.blocks[3] == (18, 19, 20)
    assert [len(g.workers) for g in h.groups] == [5, 5, 2, 2]
    assert h.rank_map().startswith("0 coordinator | 1-2 proposer | 3 master | 4-8 worker | 9 master")
    assert "4 block(s) of 6,6,3,3 x 1 fold(s)" in h.summary() and "2 proposer" in h.summary()
    assert not h[1].needs_device and h[1].block is None and h.colors(1) == {"block": None, "group": None,
                                                                             "worker": None}
    check_invariants(h)
    folded = describe(13, Shape(block_sizes=(4, 8), n_fold=2))  # folds split every block
    assert [(g.block, g.fold, len(g.ranks)) for g in folded.groups] == [(0, 0, 2), (0, 1, 2), (1, 0, 4), (1, 1, 4)]
    assert describe(7, Shape(block_size=2, proposers=2)).blocks == ((3, 4), (5, 6))


@pytest.mark.parametrize("world, shape, message", [
    (20, Shape(block_sizes=(6, 6, 3, 3), proposers=2), "21 ranks|use -n 21"),
    (20, Shape(block_sizes=(6, 6, 3, 3)), "do not make 1 coordinator \\+ blocks of 6,6,3,3; use -n 19"),
    (6, Shape(block_size=2, proposers=2), "1 coordinator \\+ 2 proposers \\+ blocks of 2; use -n 5"),
    (12, Shape(block_sizes=(6, 5), n_fold=2), "block size 5 does not divide into --n-fold 2"),
    (5, Shape(block_sizes=(1, 3), n_processes=2), "1 ranks cannot hold 1 master"),
])
def test_heterogeneous_shapes_refused_with_the_nearest_size(world, shape, message):
    with pytest.raises(RoleError, match=message):
        describe(world, shape)


@pytest.mark.parametrize("kwargs, message", [
    (dict(block_size=2, block_sizes=(2, 3)), "exclude each other"),
    (dict(block_sizes=()), "at least one size"),
    (dict(block_sizes=(2, 0)), "at least 1"),
    (dict(proposers=0), "--proposers must be at least 1"),
    (dict(proposers=2), "serve an optimization"),
])
def test_invalid_heterogeneous_or_proposer_values(kwargs, message):
    with pytest.raises(RoleError, match=message):
        Shape(**kwargs)
    with pytest.raises(RoleError, match="shape an optimization"):
        Shape.for_run(block_sizes=(2, 3))


@pytest.mark.parametrize("text, sizes", [("6,6,3,3", (6, 6, 3, 3)), (" 2, 4 ", (2, 4)), ("5", (5,))])
def test_block_sizes_parse(text, sizes):
    assert parse_block_sizes(text) == sizes


@pytest.mark.parametrize("text", ["", "6,,3", "a,b", "6,-1", "0", "2.5"])
def test_block_sizes_refused_in_one_line(text):
    with pytest.raises(RoleError, match="use e.g. 6,6,3,3"):
        parse_block_sizes(text)


def test_exhaustive_small_heterogeneous_shapes():
    """Every valid mix of block sizes (two or three blocks), folds and proposers lays out with its world size."""
    for n_masters, n_proc, folds, proposers in itertools.product(range(0, 3), (1, 2), (1, 2), (1, 2, 3)):
        base = Shape(n_masters=n_masters, n_processes=n_proc)
        groups = [base.group_size(w) for w in (1, 2, 3) if n_masters < 2 or w >= n_masters - 1]
        sizes = [g * folds for g in groups]
        for combo in [*itertools.product(sizes, repeat=2), *itertools.combinations_with_replacement(sizes, 3)]:
            shape = Shape.for_run(mode=None, n_masters=n_masters, n_processes=1 if n_masters == 0 else n_proc,
                                  n_fold=folds, search=True, block_sizes=combo, proposers=proposers)
            h = describe(shape.search_world(), shape)
            assert h.block_sizes == combo and len(h.groups) == folds * len(combo)
            check_invariants(h)
            with pytest.raises(RoleError, match=f"use -n {shape.search_world()}"):
                describe(shape.search_world() + 1, shape)
