"""Who reads what: every training sample once per epoch, over every rank of every hierarchy shape.

Property test over shapes with sub-masters (--n-masters M > 1), all-reduce worker groups
(--n-processes K) and pure all-reduce (--n-masters 0): the data split each worker rank gets from
:attr:`RunContext.data_split` (the one the driver gives :class:`~nnlo.data.ShardedLoader`) yields disjoint
samples whose union is the whole training set, every epoch.
"""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from nnlo.config import TrainConfig
from nnlo.data import ShardedLoader
from nnlo.roles import Role, Shape, describe
from nnlo.training.context import RunContext


class _Comm:
    def __init__(self, rank: int) -> None:
        self.rank = rank

    def Get_rank(self) -> int:  # noqa: N802 - mpi4py spelling
        return self.rank


class _Data:
    preloaded = True

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n


def _epoch_samples(shape: Shape, world: int, n: int, batch: int, epoch: int, seed: int) -> list[np.ndarray]:
    hierarchy = describe(world, shape)
    out = []
    for info in hierarchy:
        if not info.trains:  # workers, and a solo rank (a group of one)
            continue
        ctx = RunContext(_Comm(info.rank), TrainConfig(model="m"), hierarchy, None, None)  # type: ignore[arg-type]
        n_shards, index, members, member = ctx.data_split
        loader = ShardedLoader(_Data(n), None, n_shards, index, batch * members, seed=seed,  # type: ignore[arg-type]
                               group=(members, member))
        out.extend(loader.batch_indices(epoch))
    return out


shapes = st.one_of(
    st.builds(Shape, n_masters=st.integers(2, 4), n_processes=st.integers(1, 3)),  # sub-masters
    st.builds(Shape, n_masters=st.just(1), n_processes=st.integers(1, 4)),  # worker groups
    st.builds(Shape, n_masters=st.just(0)),  # pure all-reduce
)


@settings(max_examples=150, deadline=None)
@given(shape=shapes, extra=st.integers(0, 4), n=st.integers(12, 300), batch=st.integers(1, 17),
       epoch=st.integers(0, 3), seed=st.integers(0, 5))
def test_every_sample_read_once_per_epoch_by_exactly_one_rank(shape: Shape, extra: int, n: int, batch: int,
                                                                  epoch: int, seed: int) -> None:
    workers = shape.masters_with_workers + extra if not shape.allreduce else 1 + extra
    world = shape.group_size(workers) if not shape.allreduce else workers
    if n < (workers if not shape.allreduce else 1):
        return
    parts = _epoch_samples(shape, world, n, batch, epoch, seed)
    seen = np.concatenate(parts) if parts else np.empty(0, np.int64)
    assert len(seen) == n, f"{len(seen)} reads of {n} samples"
    assert np.array_equal(np.sort(seen), np.arange(n))


def test_sub_master_workers_shard_over_all_logical_workers() -> None:
    # -n 7 --n-masters 3: uber-master, then master m0 with 2 workers and master m1 with 2 workers
    hierarchy = describe(7, Shape(n_masters=3))
    splits = [RunContext(_Comm(r.rank), TrainConfig(model="m"), hierarchy, None, None).data_split  # type: ignore[arg-type]
              for r in hierarchy if r.role is Role.WORKER]
    assert [s[:2] for s in splits] == [(4, 0), (4, 1), (4, 2), (4, 3)]  # 4 shards, one per logical worker


def test_group_members_split_one_batch_of_k_times_batch() -> None:
    hierarchy = describe(5, Shape(n_processes=2))  # master + 2 groups of 2
    ctx = [RunContext(_Comm(r), TrainConfig(model="m"), hierarchy, None, None) for r in (1, 2)]  # type: ignore[arg-type]
    assert [c.data_split for c in ctx] == [(2, 0, 2, 0), (2, 0, 2, 1)]
