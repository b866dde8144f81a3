"""The role hierarchy: explicit upstream shapes, every rejection, and invariants over all small shapes."""
import itertools
import re

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
)


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


def _group_holds(shape, size):
    """Independently of nnlo.roles: ``size`` ranks hold the servers and at least one worker per master, or
    are one rank that trains alone (one master asked, workers of one rank)."""
    if size == 1 and shape.n_masters == 1 and shape.n_processes == 1:
        return True
    k = shape.n_processes if shape.n_masters else 1
    need = max(1, shape.n_masters - 1) if shape.n_masters else 1
    rest = size - shape.n_masters
    return rest >= need * k and rest % k == 0


def _feasible(shape, world):
    if shape.block_size is None:
        return _group_holds(shape, world)
    return _group_holds(shape, shape.block_size) and world > 1 and (world - 1) % shape.block_size == 0


@given(shape=shapes, world=st.integers(1, 40))
def test_invariants_or_clear_error(shape, world):
    """describe() lays out exactly the feasible worlds; a refusal is one line naming a world that works."""
    try:
        h = describe(world, shape)
    except RoleError as e:
        assert not _feasible(shape, world), f"refused a feasible world: {e}"
        message = str(e)
        assert "\n" not in message
        suggested = [int(n) for n in re.findall(r"use -n (\d+)|or -n (\d+)", message) for n in n if n]
        if suggested:  # "use -n 13 (2 block(s)) or -n 19": each of them works
            for n in suggested:
                assert _feasible(shape, n), message
                describe(n, shape)
        else:  # a group (training world or block) that cannot hold its workers: the size that would
            m = re.fullmatch(r"(\d+) ranks cannot hold (1 master|1 uber-master and \d+ masters|an all-reduce group) "
                             r"plus workers of (\d+) rank\(s\) each \(need at least (\d+), then steps of \3\); "
                             r"use (\d+) ranks", message)
            assert m is not None, message
            assert int(m[1]) == (shape.block_size or world) and not _group_holds(shape, int(m[1]))
            assert _group_holds(shape, int(m[4])) and _group_holds(shape, int(m[5])) and int(m[5]) >= int(m[4])
            assert not any(_group_holds(shape, n) for n in range(int(m[4])))  # the least that holds
        return
    assert _feasible(shape, world)
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


# -- exact values: messages, defaults, labels, colors --------------------------------------------------------
@pytest.mark.parametrize("kwargs, message", [
    (dict(block_size=2, block_sizes=(2, 3)), "--block-size and --block-sizes exclude each other; give one of them"),
    (dict(block_sizes=()), "--block-sizes needs at least one size, e.g. --block-sizes 6,6,3,3"),
    (dict(block_sizes=(2, 0)), "--block-sizes must all be at least 1, got 2,0"),
    (dict(proposers=0), "--proposers must be at least 1, got 0"),
    (dict(proposers=2), "--proposers serve an optimization's coordinator; use nnlo optimize with --block-size"),
    (dict(n_masters=-1), "--n-masters must be 0 or more, got -1"),
    (dict(n_processes=0), "--n-processes must be at least 1, got 0"),
    (dict(n_fold=0, block_size=2), "--n-fold must be at least 1, got 0"),
    (dict(block_size=0), "--block-size must be at least 1, got 0"),
    (dict(n_fold=2), "--n-fold needs --block-size: folds split an optimization block"),
])
def test_shape_messages_in_full(kwargs, message):
    with pytest.raises(RoleError, match=f"^{re.escape(message)}$"):
        Shape(**kwargs)


@pytest.mark.parametrize("kwargs, message", [
    (dict(mode="allreduce", n_masters=2), "--mode allreduce has no masters; drop --n-masters 2"),
    (dict(mode="gem", n_masters=0), "--n-masters 0 is pure all-reduce data parallelism: use --mode allreduce "
                                    "(or give --n-masters 1 or more)"),
    (dict(mode="allreduce", n_processes=2), "--n-processes groups ranks under a master; --mode allreduce already "
                                            "all-reduces over every rank of the group: drop --n-processes"),
    (dict(n_fold=2), "--block-size, --block-sizes, --n-fold and --proposers shape an optimization; use nnlo optimize"),
    (dict(block_size=4), "--block-size, --block-sizes, --n-fold and --proposers shape an optimization"),
    (dict(proposers=2), "--block-size, --block-sizes, --n-fold and --proposers shape an optimization"),
    (dict(search=True, n_fold=0), "--n-fold must be at least 1, got 0"),
])
def test_run_options_refused_by_the_one_rule_in_full(kwargs, message):
    with pytest.raises(RoleError, match=f"^{re.escape(message)}"):
        Shape.for_run(**kwargs)


def test_the_one_rule_keeps_every_option():
    assert Shape.for_run() == Shape() == Shape(1, 1, None, 1, None, 1)
    assert Shape.for_run(mode=None, n_masters=0) == Shape(n_masters=0)
    s = Shape.for_run(mode="easgd", n_masters=3, n_processes=2, search=True, n_fold=2, proposers=3)
    assert (s.n_masters, s.n_processes, s.n_fold, s.proposers, s.block_size) == (3, 2, 2, 3, 2 * (3 + 2 * 2 * 1))
    assert Shape.for_run(search=True, block_size=6).block_size == 6
    assert Shape.for_run(search=True, block_sizes=(2, 4)).block_sizes == (2, 4)
    assert Shape.for_run(mode="allreduce", search=True, n_fold=3).block_size == 3


def test_sizes_and_their_messages():
    assert Shape(block_size=6).blocks_text() == "6" and Shape(block_sizes=(6, 3)).blocks_text() == "6,3"
    assert Shape(block_size=4).search_world() == 5 and Shape(block_size=4).search_world(3) == 13
    assert Shape(block_size=4, proposers=2).search_world(2) == 11
    assert Shape(block_sizes=(2, 3)).search_world(2) == 6 and Shape(block_sizes=(2, 3)).search_world() == 6
    with pytest.raises(RoleError, match=r"^--block-sizes 2,3 makes 2 blocks, not 3; drop --blocks or give 2$"):
        Shape(block_sizes=(2, 3)).search_world(3)
    assert Shape(block_size=4).world_size(3) == 5 and Shape(block_size=4).world_size(3, n_blocks=2) == 9
    assert Shape(block_sizes=(2, 3)).world_size(1) == 6
    with pytest.raises(RoleError, match=r"^a run needs at least 1 worker$"):
        Shape().world_size(0)
    six = Shape(block_size=6)
    with pytest.raises(RoleError, match=r"^5 ranks do not make 1 coordinator \+ blocks of 6; use -n 7 \(1 block\(s\)\)$"):
        six.blocks_in(5)
    with pytest.raises(RoleError, match=r"^10 ranks do not make 1 coordinator \+ blocks of 6; use -n 7 \(1 block\(s\)\) "
                                        r"or -n 13$"):
        six.blocks_in(10)
    with pytest.raises(RoleError, match=r"^21 ranks do not make 1 coordinator \+ blocks of 6; use -n 19 \(3 block\(s\)\) "
                                        r"or -n 25$"):
        six.blocks_in(21)
    assert six.blocks_in(7) == (6,) and six.blocks_in(19) == (6, 6, 6)
    assert Shape(block_sizes=(2, 3)).blocks_in(6) == (2, 3)


@pytest.mark.parametrize("shape, size, message", [
    (Shape(n_masters=3), 4, "4 ranks cannot hold 1 uber-master and 2 masters plus workers of 1 rank(s) each "
                            "(need at least 5, then steps of 1); use 5 ranks"),
    (Shape(n_masters=3, n_processes=2), 5, "need at least 7, then steps of 2); use 7 ranks"),
    (Shape(n_masters=3, n_processes=2), 8, "8 ranks cannot hold 1 uber-master and 2 masters plus workers of 2 rank(s) "
                                           "each (need at least 7, then steps of 2); use 9 ranks"),
    (Shape(n_masters=0), 0, "0 ranks cannot hold an all-reduce group plus workers of 1 rank(s) each (need at least "
                            "1, then steps of 1); use 1 ranks"),
    (Shape(n_processes=3), 3, "3 ranks cannot hold 1 master plus workers of 3 rank(s) each (need at least 4, then "
                              "steps of 3); use 4 ranks"),
])
def test_groups_that_cannot_hold_their_workers(shape, size, message):
    with pytest.raises(RoleError, match=f"{re.escape(message)}$"):
        shape.workers_in_group(size)


def test_group_sizes_at_their_boundaries():
    assert Shape(n_masters=3, n_processes=2).workers_in_group(7) == 2
    assert Shape(n_masters=3).workers_in_group(5) == 2 and Shape(n_masters=0).workers_in_group(1) == 1
    assert Shape(n_masters=0, n_processes=3).workers_in_group(2) == 2  # replicas: one rank each
    assert parse_block_sizes("1") == (1,) and parse_block_sizes("1,1") == (1, 1)


def test_every_ranks_record_in_full():
    from nnlo.roles import RankInfo

    h = describe(5, Shape(n_processes=2))
    assert h.blocks == ((0, 1, 2, 3, 4),) and h.coordinator is None and h.proposers == ()
    assert list(h) == [
        RankInfo(0, Role.MASTER, 0, 0, 0, 0, None, None, None),
        RankInfo(1, Role.WORKER, 0, 0, 0, 0, 0, 0, 0), RankInfo(2, Role.WORKER, 0, 0, 0, 0, 0, 1, 1),
        RankInfo(3, Role.WORKER, 0, 0, 0, 0, 1, 0, 0), RankInfo(4, Role.WORKER, 0, 0, 0, 0, 1, 1, 3)]
    assert [r.label() for r in h] == ["master:m0", "worker:w0", "worker:w0.1", "worker:w1", "worker:w1.1"]
    assert h.rank_map() == "0 master | 1 worker | 2 worker(member) | 3 worker | 4 worker(member)"
    assert h.summary() == "5 ranks: 1 master, 4 worker; 2 ranks per worker"
    assert [h[r].is_leader for r in range(5)] == [True, True, False, True, False]
    assert h.group_of(3) is h.groups[0] and h.groups[0].local(3) == 3 and h.groups[0].top == 0
    assert h.workers_per_group == 2 and h.block_sizes == (5,)
    opt = describe(13, Shape(n_masters=3, block_size=6))  # blocks of 1 uber-master + 2 masters + 3 workers
    assert opt[7] == RankInfo(7, Role.UBER_MASTER, 1, 0, 1, None, None, None, None, True)
    assert opt[8] == RankInfo(8, Role.MASTER, 1, 0, 1, 0, None, None, 7, True)
    assert opt[9] == RankInfo(9, Role.WORKER, 1, 0, 1, 0, 0, 0, 8, True)
    assert [opt[r].label() for r in (0, 1, 5, 7, 8, 9)] == [
        "coordinator", "b0:uber-master", "b0:master:m1", "b1:uber-master", "b1:master:m0", "b1:worker:w0"]
    assert opt.group_of(0) is None and opt.group_of(10) is opt.groups[1] and opt.groups[1].local(12) == 5
    assert opt.summary() == "13 ranks: 1 coordinator, 2 uber-master, 4 master, 6 worker; 2 block(s) of 6 x 1 fold(s)"
    folds = describe(9, Shape(block_size=4, n_fold=2))
    assert [folds[r].label() for r in (1, 3, 4, 8)] == ["b0:master:m0", "b0f1:master:m0", "b0f1:worker:w0",
                                                       "b1f1:worker:w0"]


def test_worker_group_colors_are_group_times_widest_plus_worker():
    h = describe(10, Shape(block_sizes=(3, 6)))  # groups of 2 and 5 workers: widest 5
    workers = [r for r in h if r.role is Role.WORKER]
    assert [h.colors(r.rank)["worker"] for r in workers] == [0, 1, 5, 6, 7, 8, 9]
    assert h.colors(1) == {"block": 0, "group": 0, "worker": None}
    assert describe(3, Shape(n_masters=0)).colors(2) == {"block": 0, "group": 0, "worker": 0}
    assert describe(2, Shape()).colors(1)["worker"] == 0
    pure = describe(5, Shape(n_masters=0, block_size=2))  # groups of one all-reduce worker each
    assert [pure.colors(r)["worker"] for r in range(1, 5)] == [0, 0, 1, 1]


def test_remaining_exact_values():
    assert Shape.for_run(n_processes=2) == Shape(n_processes=2)  # a training keeps its ranks per worker
    sizes = Shape(block_sizes=[6, 3.0])  # type: ignore[arg-type]
    assert sizes.block_sizes == (6, 3) and type(sizes.block_sizes) is tuple
    h = describe(13, Shape(block_size=6, n_fold=2))
    assert [g.index for g in h.groups] == [0, 1, 2, 3] and describe(3).groups[0].index == 0
    assert [r.role for r in describe(1).ranks] == [Role.SOLO]  # one rank trains alone
