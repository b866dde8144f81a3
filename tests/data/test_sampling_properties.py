"""Property tests: shuffles, shards, batch splits and folds are disjoint, complete, balanced and deterministic."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nnlo.data import batches, epoch_order, kfold, n_batches, shard, split_batch
from nnlo.errors import ConfigError, DataError

FAST = settings(max_examples=60, deadline=None)
sizes = st.integers(min_value=0, max_value=400)
seeds = st.integers(min_value=0, max_value=2**32 - 1)


def _assert_partition(parts, universe):
    joined = np.concatenate(parts) if parts else np.array([], dtype=np.int64)
    assert len(joined) == len(universe), "parts overlap or miss elements"
    assert sorted(joined.tolist()) == sorted(np.asarray(universe).tolist())


@FAST
@given(n=sizes, epoch=st.integers(0, 1000), seed=seeds)
def test_epoch_order_is_a_deterministic_permutation(n, epoch, seed):
    order = epoch_order(n, epoch, seed)
    assert sorted(order.tolist()) == list(range(n))
    np.testing.assert_array_equal(order, epoch_order(n, epoch, seed))


@FAST
@given(epoch=st.integers(0, 1000), seed=seeds)
def test_epoch_order_reshuffles_per_epoch_and_seed(epoch, seed):
    n = 64  # 64! orders: equal permutations would mean the epoch or seed was ignored
    base = epoch_order(n, epoch, seed)
    assert not np.array_equal(base, epoch_order(n, epoch + 1, seed))
    assert not np.array_equal(base, epoch_order(n, epoch, seed + 1))


@FAST
@given(n=sizes, n_shards=st.integers(1, 40), seed=seeds)
def test_shards_are_disjoint_complete_and_balanced(n, n_shards, seed):
    order = epoch_order(n, 0, seed)
    parts = [shard(order, n_shards, i) for i in range(n_shards)]
    _assert_partition(parts, range(n))
    lengths = [len(p) for p in parts]
    assert max(lengths) - min(lengths) <= 1


@FAST
@given(n=st.integers(0, 200), n_parts=st.integers(1, 12), data=st.data())
def test_split_batch_is_a_balanced_partition(n, n_parts, data):
    batch = np.asarray(data.draw(st.permutations(range(n))), dtype=np.int64)
    parts = [split_batch(batch, n_parts, p) for p in range(n_parts)]
    _assert_partition(parts, batch)
    lengths = [len(p) for p in parts]
    assert max(lengths) - min(lengths) <= 1


@FAST
@given(n=sizes, batch_size=st.integers(1, 50))
def test_batches_keep_order_and_the_last_partial_batch(n, batch_size):
    idx = np.arange(n)[::-1]
    result = batches(idx, batch_size)
    assert len(result) == n_batches(n, batch_size) == -(-n // batch_size)
    np.testing.assert_array_equal(np.concatenate(result) if result else idx, idx)
    assert all(len(b) == batch_size for b in result[:-1])


@FAST
@given(n=st.integers(2, 300), k=st.integers(2, 10), seed=seeds)
def test_kfold_folds_partition_the_samples(n, k, seed):
    if n < k:
        with pytest.raises(DataError, match=f"{n} samples cannot be split into {k} folds"):
            kfold(n, k, seed)
        return
    pairs = kfold(n, k, seed)
    assert len(pairs) == k
    _assert_partition([val for _, val in pairs], range(n))
    for train, val in pairs:
        _assert_partition([train, val], range(n))
        assert np.all(np.diff(train) > 0) and np.all(np.diff(val) > 0)
    sizes_ = [len(v) for _, v in pairs]
    assert max(sizes_) - min(sizes_) <= 1
    again = kfold(n, k, seed)
    assert all(np.array_equal(a[1], b[1]) for a, b in zip(pairs, again))


def test_kfold_depends_on_seed():
    assert not np.array_equal(kfold(100, 4, 1)[0][1], kfold(100, 4, 2)[0][1])


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"index 3 is not in \[0, 3\)"):
        shard(np.arange(5), 3, 3)
    with pytest.raises(ValueError, match="at least 1 part"):
        split_batch(np.arange(5), 0, 0)
    with pytest.raises(ConfigError, match="--batch must be >= 1"):
        batches(np.arange(5), 0)
    with pytest.raises(ConfigError, match="--n-fold must be >= 2"):
        kfold(10, 1, 0)
    with pytest.raises(ConfigError, match="seed must be >= 0"):
        epoch_order(10, 0, -1)


@FAST
@given(n=sizes, block=st.integers(1, 50), epoch=st.integers(0, 100), seed=seeds)
def test_block_shuffle_is_a_permutation_of_whole_runs(n, block, epoch, seed):
    order = epoch_order(n, epoch, seed, block)
    assert sorted(order.tolist()) == list(range(n))
    np.testing.assert_array_equal(order, epoch_order(n, epoch, seed, block))
    if n:  # every run of `block` consecutive samples appears as one unbroken stretch of the order
        stretches = 1 + np.count_nonzero(np.diff(order // block))
        assert stretches == -(-n // block)


def test_block_shuffle_reshuffles_runs_and_inside_runs():
    a, b = epoch_order(1000, 0, 3, block=10), epoch_order(1000, 1, 3, block=10)
    assert not np.array_equal(a // 10, b // 10)
    assert not np.array_equal(a[:10], np.sort(a[:10]))  # shuffled inside the run (10! orders)
    with pytest.raises(ConfigError, match="shuffle block must be >= 1"):
        epoch_order(10, 0, 0, block=0)
