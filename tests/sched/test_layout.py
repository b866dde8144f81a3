"""Resource layouts: upstream shapes, filling an allocation, every rejection, invariants (hypothesis)."""
from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from nnlo.errors import ConfigError
from nnlo.roles import Role, Shape, describe
from nnlo_sched.inner import parse_inner
from nnlo_sched.layout import LayoutError, compute_layout
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
    "profile, shape, kw, needle",
    [
        (SUMMIT, Shape(), dict(workers=2, gpus_per_worker=7), "more than a summit node has (6)"),
        (SUMMIT, Shape(), dict(workers=2, gpus_per_worker=4), "does not divide"),
        (SUMMIT, Shape(), dict(workers=2, gpus_per_worker=0.3), "neither a whole number nor 1/k"),
        (SUMMIT, Shape(), dict(workers=2, gpus_per_worker=-1), "0 or more"),
        (LOCAL4, Shape(), dict(workers=2, gpus_per_worker=1), "has no GPUs"),
        (SUMMIT, Shape(), dict(workers=0), "at least 1 worker"),
        (SUMMIT, Shape(), dict(workers=300, walltime_s=8 * 3600), "exceeds the 6h limit of queue 'batch'"),
        (SUMMIT, Shape(), dict(nodes=50, walltime_s=25 * 3600), "use --walltime 6h"),
        (SUMMIT, Shape(), dict(nodes=5000), "has 4608 nodes"),
        (SUMMIT, Shape(), dict(workers=30000), "the machine has 4608"),
        (SUMMIT, Shape(), dict(workers=20, nodes=1), "use --nodes 4 or fewer workers"),
        (SUMMIT, Shape(block_size=6, n_fold=2), dict(blocks=3, nodes=1), "use --nodes 4 or fewer blocks"),
        (SUMMIT, Shape(block_size=6), dict(blocks=6000), "the machine has 4608; ask for fewer blocks"),
        (SUMMIT, Shape(), dict(workers=3, nodes=5), "leaves nodes empty"),
        (SUMMIT, Shape(), dict(workers=8, nodes=4), "fill 3 node(s), not 4; use --nodes 3"),
        (SUMMIT, Shape(), dict(workers=400, queue="batch-hm"), "at most 54 nodes"),
        (SUMMIT, Shape(), dict(workers=1, queue="gpu"), "no queue 'gpu'"),
        (TITAN, Shape(), dict(workers=300, walltime_s=7 * 3600), "exceeds the 6h limit of queue 'batch' for 301"),
        (SUMMIT, Shape(), dict(workers=4, blocks=2), "--blocks applies to optimization"),
        (SUMMIT, Shape(block_size=4), dict(workers=4), "--workers applies to training"),
        (SUMMIT, Shape(block_size=4), dict(blocks=0), "--blocks must be at least 1"),
        (SUMMIT, Shape(n_masters=3), dict(nodes=1, gpus_per_worker=6, workers=1), "at least"),
        (SUMMIT, Shape(), dict(nodes=0), "--nodes must be at least 1"),
        (LOCAL4, Shape(n_masters=4, n_processes=2), dict(nodes=1), "cannot hold"),
        (SUMMIT, Shape(n_processes=2), dict(nodes=2, gpus_per_worker=0.5), "make the rank count a multiple of 2"),
        (SUMMIT, Shape(), dict(workers=30, gpus_per_worker=0.5), "make the rank count a multiple of 2"),
    ],
)
def test_impossible_requests_are_refused_with_a_way_out(
    profile: Profile, shape: Shape, kw: dict, needle: str
) -> None:
    kind = "optimize" if shape.optimization else "train"
    with pytest.raises(ConfigError) as e:
        compute_layout(profile, shape, kind, **kw)
    assert needle in str(e.value) and "\n" not in str(e.value)


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
        kw["gpus_per_worker"] = draw(st.sampled_from([None, 0, 0.5, 0.25, 1, 2]))
    return profile, shape, "optimize" if optimize else "train", kw


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests())
def test_layout_invariants(req: tuple[Profile, Shape, str, dict]) -> None:
    profile, shape, kind, kw = req
    try:
        lay = compute_layout(profile, shape, kind, **kw)
    except LayoutError:
        assume(False)
        return
    # the world is exactly what the runtime's role module lays out, every rank one role
    expected = describe(lay.world_size, shape)
    assert [(r.rank, r.role) for r in lay.hierarchy] == [(r.rank, r.role) for r in expected]
    placements = list(lay.placements())
    assert [p.rank for p in placements] == list(range(lay.world_size))
    per_node: dict[int, list] = {}
    for p in placements:
        per_node.setdefault(p.node, []).append(p)
    assert sorted(per_node) == list(range(lay.nodes))  # no empty node, none beyond the allocation
    if profile.nodes is not None:
        assert lay.nodes <= profile.nodes
    gpw = lay.gpus_per_worker
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
    if "nodes" in kw and "workers" not in kw and "blocks" not in kw and not profile.oversubscribe:
        # filling: one more worker (or block) no longer fits those nodes
        more = dict(kw)
        if shape.optimization:
            more["blocks"] = lay.blocks + 1
        else:
            more["workers"] = shape.workers_in_group(lay.world_size) + 1  # a solo rank is one worker too
        with pytest.raises(LayoutError):
            compute_layout(profile, shape, kind, **more)
    assert Fraction(lay.to_dict(ranks=False)["gpus_per_worker"]).limit_denominator(64) == gpw


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
