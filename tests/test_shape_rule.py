"""One shape rule (``Shape.for_run``) for the runtime, the CLI and the layout: for every option combination the
layout's rank count is one the runtime accepts, and every world the runtime accepts is one the layout can size."""
from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings, strategies as st

from nnlo.config import MODES, TrainConfig
from nnlo.errors import ConfigError
from nnlo.optimize.options import SearchConfig
from nnlo.optimize.run import check_fold_groups
from nnlo.roles import RoleError, Shape, describe
from nnlo_sched.inner import parse_inner
from nnlo_sched.layout import LayoutError, compute_layout
from nnlo_sched.profiles import load_profile

BIG = replace(load_profile("local"), cores_per_node=4096)
OPTIONS = dict(mode=st.sampled_from(MODES), n_masters=st.integers(0, 4), n_processes=st.integers(1, 3),
               block_size=st.none() | st.integers(1, 14), n_fold=st.integers(1, 3), search=st.booleans(),
               block_sizes=st.none() | st.lists(st.integers(0, 9), min_size=1, max_size=3).map(tuple),
               proposers=st.sampled_from([1, 1, 2, 3]))


def _shape(mode: str, n_masters: int, n_processes: int, block_size: int | None, n_fold: int,
           search: bool, block_sizes: tuple[int, ...] | None = None, proposers: int = 1) -> Shape | None:
    try:
        return Shape.for_run(mode=mode, n_masters=n_masters, n_processes=n_processes, block_size=block_size,
                             n_fold=n_fold, search=search, block_sizes=block_sizes, proposers=proposers)
    except RoleError:
        return None


@settings(max_examples=400, deadline=None)
@given(**OPTIONS, workers=st.integers(1, 6), blocks=st.integers(1, 3))
def test_a_world_the_layout_sizes_is_one_the_runtime_accepts(mode: str, n_masters: int, n_processes: int,
                                                             block_size: int | None, n_fold: int, search: bool,
                                                             block_sizes: tuple[int, ...] | None, proposers: int,
                                                             workers: int, blocks: int) -> None:
    shape = _shape(mode, n_masters, n_processes, block_size, n_fold, search, block_sizes, proposers)
    config = TrainConfig(model="m.py", mode=mode, n_masters=n_masters, n_processes=n_processes)
    if block_sizes is not None:
        blocks = len(block_sizes)  # heterogeneous blocks fix their number
    if shape is None:  # the rule refuses: so do the training options (the runtime) and the search options
        if search:
            with pytest.raises(ConfigError):
                SearchConfig(block_size=block_size, n_fold=n_fold, block_sizes=block_sizes,
                             proposers=proposers).shape(config)
        elif block_size is None and n_fold == 1 and block_sizes is None and proposers == 1:
            with pytest.raises(ConfigError):
                config.validate()
        return
    if not search:
        assert config.validate().training_group_shape == shape  # the runtime's shape is the layout's
    try:
        layout = compute_layout(BIG, shape, "optimize" if search else "train",
                                workers=None if search else workers, blocks=blocks if search else None)
    except LayoutError:
        with pytest.raises((RoleError, ConfigError)):  # the layout refuses only what the runtime refuses
            if search:
                check_fold_groups(shape)
                describe(shape.search_world(blocks), shape)
            else:
                describe(shape.world_size(workers), shape)
        return
    hierarchy = describe(layout.world_size, shape)  # the runtime splits this world without complaint
    if search:
        check_fold_groups(shape)
        assert len(hierarchy.blocks) == blocks and len(hierarchy.proposers) == shape.proposer_ranks
        if block_sizes is not None:
            assert hierarchy.block_sizes == block_sizes
    else:  # workers as the layout counts them: logical workers, or replicas in all-reduce mode
        assert shape.workers_in_group(len(hierarchy.groups[0].ranks)) == workers


@settings(max_examples=300, deadline=None)
@given(**OPTIONS, world=st.integers(1, 40))
def test_a_world_the_runtime_accepts_is_one_the_layout_sizes(mode: str, n_masters: int, n_processes: int,
                                                             block_size: int | None, n_fold: int, search: bool,
                                                             block_sizes: tuple[int, ...] | None, proposers: int,
                                                             world: int) -> None:
    shape = _shape(mode, n_masters, n_processes, block_size, n_fold, search, block_sizes, proposers)
    if shape is None:
        return
    try:
        hierarchy = describe(world, shape)
        if search:
            check_fold_groups(shape)
    except (RoleError, ConfigError):
        return
    if search:
        layout = compute_layout(BIG, shape, "optimize", blocks=len(hierarchy.blocks))
    else:
        layout = compute_layout(BIG, shape, "train", workers=shape.workers_in_group(world))
    assert layout.world_size == world - _relayed(shape, world, search)


def _relayed(shape: Shape, world: int, search: bool) -> int:
    """The one world the layout sizes smaller: a training of a master and a single worker (upstream's -np 2)
    runs, but the layout gives one worker one rank of its own (a solo group, no master to relay it)."""
    return 1 if not search and world == 2 and shape.solo_capable else 0


@pytest.mark.parametrize("mode", ["gem", "easgd", "downpour"])
def test_one_rank_trains_alone_in_the_runtime_and_the_layout(mode: str) -> None:
    """nnlo train -n 1 and nnlo layout/submit --workers 1: one rank, which holds a GPU (it trains)."""
    shape = TrainConfig(model="m.py", mode=mode).validate().training_group_shape
    assert [str(r.role) for r in describe(1, shape)] == ["solo"]
    summit = load_profile("summit")
    layout = compute_layout(summit, shape, "train", workers=1)
    assert layout.world_size == 1 and layout.gpus_used == 1 and not layout.server_ranks()
    assert describe(layout.world_size, shape).rank_map() == "0 solo"
    assert layout.world_size == _relayed(shape, 2, False) == 1  # the -np 2 of upstream command lines: 1 rank here


@pytest.mark.parametrize("n_fold, per_node", [(1, 6), (2, 3)])
def test_one_rank_fold_groups_fill_a_summit_node_one_trial_per_gpu(n_fold: int, per_node: int) -> None:
    """optimize --block-size 1 (or blocks of 2 with 2 folds): every fold group one GPU rank, a GPU each."""
    config = TrainConfig(model="m.py")
    shape = SearchConfig(block_size=n_fold, n_fold=n_fold).shape(config)
    check_fold_groups(shape)
    layout = compute_layout(load_profile("summit"), shape, "optimize", nodes=1)
    hierarchy = describe(layout.world_size, shape)
    assert layout.blocks == per_node and layout.gpus_used == 6
    assert [str(r.role) for r in hierarchy][1:] == ["solo"] * 6 and len(hierarchy.groups) == 6
    assert [r.rank for r in layout.server_ranks()] == [0]  # only the coordinator goes without a GPU


def test_the_api_sizes_one_rank_groups_from_the_same_rule() -> None:
    from nnlo_sched import api

    assert api.layout("local", workers=1).world_size == 1
    assert api.layout("local", block_size=1, blocks=4).world_size == 5
    assert api.layout("local", block_size=2, n_fold=2, blocks=2).hierarchy.rank_map() == "0 coordinator | 1-4 solo"
    spec = api.spec("optimize", ["--model", "m.py", "--block-size", "1"], "local", blocks=3)
    assert spec.layout is not None and spec.layout.world_size == 4 and spec.layout.roles == {"coordinator": 1, "solo": 3}


@pytest.mark.parametrize("argv, expected", [
    (["--mode", "allreduce"], Shape(n_masters=0)),
    (["--n-masters", "3", "--n-processes", "2"], Shape(n_masters=3, n_processes=2)),
    (["--mode", "easgd"], Shape()),
])
def test_the_cli_parser_and_the_rule_agree_for_training(argv: list[str], expected: Shape) -> None:
    assert parse_inner("train", ["--model", "m.py", *argv]).shape == expected


@pytest.mark.parametrize("argv, needle", [
    (["--mode", "allreduce", "--n-masters", "2"], "drop --n-masters"),
    (["--n-masters", "0"], "use --mode allreduce"),
    (["--mode", "allreduce", "--n-processes", "2"], "drop --n-processes"),
])
def test_contradictions_are_refused_by_the_one_rule(argv: list[str], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        parse_inner("train", ["--model", "m.py", *argv])
    with pytest.raises(RoleError, match=needle):
        Shape.for_run(**{"mode": "gem", **_options(argv)})


def _options(argv: list[str]) -> dict[str, object]:
    out: dict[str, object] = {}
    for flag, value in zip(argv[::2], argv[1::2]):
        key = flag.lstrip("-").replace("-", "_")
        out[key] = value if key == "mode" else int(value)
    return out
