"""Pure index arithmetic for data parallelism: shuffling, sharding, batching, k-fold splits.

Samples, not files, are the unit (upstream sharded files, so workers got unequal work and some files were
read twice or never). Every function is deterministic in its arguments, so every rank computes the same
global order independently and no index lists travel over MPI.
"""
from __future__ import annotations

import numpy as np

from nnlo.errors import ConfigError, DataError

IndexArray = np.ndarray


def _rng(seed: int, *stream: int) -> np.random.Generator:
    if int(seed) < 0:
        raise ConfigError(f"seed must be >= 0, got {seed}")
    return np.random.default_rng(np.random.SeedSequence([int(seed), *map(int, stream)]))


def epoch_order(n: int, epoch: int, seed: int, block: int = 1) -> IndexArray:
    """A permutation of ``range(n)`` that is the same for the same ``(seed, epoch)`` on every rank and
    different from one epoch to the next. The array is int32 below 2**31 samples (half the memory of int64
    when every rank holds the order of 100M+ samples), else int64.

    ``block > 1`` shuffles runs of ``block`` consecutive samples as units (and the samples inside each run):
    a shard then reads long contiguous stretches of each file, which parallel file systems serve far better
    than scattered rows, at the price of batches drawn from fewer places of the data. Use it for large data
    on Lustre/GPFS when samples are not stored sorted by class.
    """
    if n < 0 or epoch < 0:
        raise ValueError(f"epoch_order needs n >= 0 and epoch >= 0, got n={n}, epoch={epoch}")
    if block < 1:
        raise ConfigError(f"shuffle block must be >= 1 sample, got {block}")
    rng = _rng(seed, 0x5EED, epoch)
    dtype = np.int32 if n < 2**31 else np.int64
    if block == 1 or n <= 1:
        order = np.arange(n, dtype=dtype)
        rng.shuffle(order)
        return order
    n_blocks = -(-n // block)
    starts = rng.permutation(n_blocks).astype(np.int64) * block
    grid = starts[:, None] + np.arange(block, dtype=np.int64)[None, :]
    grid = rng.permuted(grid, axis=1)  # shuffle inside every run; the last run's overhang is dropped below
    order = grid.reshape(-1)
    return (order[order < n] if n % block else order).astype(dtype, copy=False)


def _check_part(n_parts: int, index: int, what: str) -> None:
    if n_parts < 1:
        raise ValueError(f"{what}: need at least 1 part, got {n_parts}")
    if not 0 <= index < n_parts:
        raise ValueError(f"{what}: index {index} is not in [0, {n_parts})")


def _bounds(n: int, n_parts: int, index: int) -> tuple[int, int]:
    """Start and end of part ``index`` when ``n`` items are cut into ``n_parts`` nearly equal runs (the
    first ``n % n_parts`` parts get one more)."""
    size, extra = divmod(n, n_parts)
    start = index * size + min(index, extra)
    return start, start + size + (index < extra)


def shard(order: IndexArray, n_shards: int, index: int) -> IndexArray:
    """Shard ``index`` of ``n_shards``: a contiguous run of ``order``. Shards are disjoint, together hold
    every element, and their sizes differ by at most one (a shard may be empty if there are fewer elements
    than shards; :class:`~nnlo.data.loader.ShardedLoader` refuses that case)."""
    _check_part(n_shards, index, "shard")
    start, end = _bounds(len(order), n_shards, index)
    return order[start:end]


def split_batch(batch: IndexArray, n_parts: int, part: int) -> IndexArray:
    """Part ``part`` of a batch split among ``n_parts`` ranks of an all-reduce group: disjoint, complete,
    sizes differ by at most one (a part is empty when the batch is smaller than the group; weight the
    all-reduced gradient by each part's size in that case)."""
    _check_part(n_parts, part, "split_batch")
    start, end = _bounds(len(batch), n_parts, part)
    return batch[start:end]


def batches(indices: IndexArray, batch_size: int) -> list[IndexArray]:
    """Consecutive batches of ``batch_size`` (views, in order); the last, partial batch is kept."""
    if batch_size < 1:
        raise ConfigError(f"--batch must be >= 1, got {batch_size}")
    return [indices[i:i + batch_size] for i in range(0, len(indices), batch_size)]


def n_batches(n: int, batch_size: int) -> int:
    """How many batches :func:`batches` makes of ``n`` indices."""
    if batch_size < 1:
        raise ConfigError(f"--batch must be >= 1, got {batch_size}")
    return -(-n // batch_size)


def kfold(n: int, k: int, seed: int) -> list[tuple[IndexArray, IndexArray]]:
    """``k`` (train, validation) index pairs: the samples are shuffled once (by ``seed``) and cut into ``k``
    folds of nearly equal size; pair ``i`` validates on fold ``i`` and trains on the rest. Folds are disjoint
    and complete; both arrays of a pair are sorted (cheaper HDF5 reads)."""
    if k < 2:
        raise ConfigError(f"--n-fold must be >= 2 for cross-validation, got {k}")
    if n < k:
        raise DataError(f"{n} samples cannot be split into {k} folds; use --n-fold <= {n} or more data")
    order = _rng(seed, 0xF01D).permutation(n).astype(np.int64, copy=False)
    folds = [np.sort(shard(order, k, i)) for i in range(k)]
    return [(np.sort(np.concatenate(folds[:i] + folds[i + 1:])), folds[i]) for i in range(k)]
