"""Read-ahead keeps the plan's order, raises the reader's errors where they happened and stops when closed."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from nnlo.data import H5Dataset, ShardedLoader
from nnlo.data.prefetch import prefetched


def reader_threads() -> int:
    return sum(t.name == "nnlo-prefetch" for t in threading.enumerate())


@pytest.mark.parametrize("depth", [0, 1, 3])
def test_order_is_kept(depth):
    assert list(prefetched(lambda v: v * v, range(20), depth)) == [v * v for v in range(20)]


def test_error_is_raised_at_its_batch():
    def read(v):
        if v == 3:
            raise KeyError("batch three is broken")
        return v

    got = []
    with pytest.raises(KeyError, match="batch three"):
        for v in prefetched(read, range(10), 2):
            got.append(v)
    assert got == [0, 1, 2]
    assert reader_threads() == 0


def test_closing_early_stops_the_reader():
    gen = prefetched(lambda v: v, range(10_000), 2)
    assert next(gen) == 0
    gen.close()
    assert reader_threads() == 0


def test_loader_with_and_without_read_ahead_serve_the_same(indexed_files):
    ds = H5Dataset(indexed_files)
    plain = ShardedLoader(ds, None, 2, 0, 3, seed=4, prefetch=0)
    ahead = ShardedLoader(ds, None, 2, 0, 3, seed=4, prefetch=2)
    assert ShardedLoader(ds, None, 2, 0, 3).prefetch == 1
    assert ShardedLoader(H5Dataset(indexed_files, preload=True), None, 2, 0, 3).prefetch == 0
    for (xa, ya), (xb, yb) in zip(plain.epoch(2), ahead.epoch(2), strict=True):
        np.testing.assert_array_equal(xa, xb)
        np.testing.assert_array_equal(ya, yb)
    # two loaders reading one dataset at once (training with read-ahead while validating) stay exact
    for (_, ya), (_, yb) in zip(ahead.epoch(5), ShardedLoader(ds, None, 2, 1, 3, seed=4, prefetch=2).epoch(5)):
        np.testing.assert_array_equal(ya, ya.astype(np.int64))
        assert not set(ya.tolist()) & set(yb.tolist())


def test_read_many_follows_a_given_plan(indexed_files):
    loader = ShardedLoader(H5Dataset(indexed_files), None, 1, 0, 4, seed=2, prefetch=2)
    plan = loader.batch_indices(0)[1:4]
    got = [y for _, y in loader.read_many(plan)]
    assert len(got) == 3
    for idx, y in zip(plan, got):
        np.testing.assert_array_equal(y, idx.astype(np.float32))
