"""One worker's view of the data: its shard of each epoch's shuffled order, in batches.

Every rank builds the same global order from ``(seed, epoch)`` (:func:`~nnlo.data.sampling.epoch_order`)
and takes its own contiguous shard, so the shards of an epoch are disjoint and complete without any
communication, and a restored run that knows ``(epoch, batch)`` continues exactly where it stopped.

With ``equal_batches=True`` (default) every shard of an epoch yields the *same number* of batches: shards
differ by at most one sample, and when that sample would open an extra batch of one it joins the last batch
instead. A synchronous or all-reduce step therefore never waits for a peer that has one batch more.

An all-reduce worker group (one logical worker made of several ranks) shares one shard: pass
``group=(group_size, member)`` and each member gets its own slice of every batch
(:func:`~nnlo.data.sampling.split_batch`), so the group's ranks never read the same samples (upstream they
did). All members see the same number of batches; a slice is empty only when a batch is smaller than the
group, so weight the all-reduced gradient by each member's sample count.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from nnlo.data.h5dataset import H5Dataset
from nnlo.data.prefetch import prefetched
from nnlo.data.sampling import _bounds, batches, epoch_order, n_batches, shard, split_batch
from nnlo.data.source import SourceDataset
from nnlo.errors import ConfigError, DataError


class ShardedLoader:
    """Batches of shard ``shard_index`` of ``n_shards`` over ``indices`` (a subset such as a k-fold's
    training samples; None = the whole dataset). ``dataset``: an HDF5 dataset, or any data source adapted by
    :func:`nnlo.data.source.as_dataset`.

    ``group=(size, member)``: this rank's slice of every batch in an all-reduce worker group.
    ``shuffle=False`` keeps the subset's order every epoch (validation). ``epoch(e, start_batch=b)``
    yields ``(x, y)`` from batch ``b`` on; ``batch_indices(e)`` gives the global sample indices without
    reading anything. ``prefetch`` batches are read ahead in a background thread (default: 1, or 0 for a
    preloaded dataset, where reads are memory copies). ``shuffle_block`` > 1 shuffles runs of that many
    consecutive samples (of ``indices``) as units, for contiguous reads on parallel file systems (see
    :func:`~nnlo.data.sampling.epoch_order`).
    """

    def __init__(self, dataset: H5Dataset | SourceDataset, indices: Sequence[int] | np.ndarray | None, n_shards: int,
                 shard_index: int, batch_size: int, seed: int = 0, shuffle: bool = True,
                 equal_batches: bool = True, prefetch: int | None = None, shuffle_block: int = 1,
                 group: tuple[int, int] = (1, 0)) -> None:
        if n_shards < 1 or not 0 <= shard_index < n_shards:
            raise ValueError(f"shard index {shard_index} is not in [0, {n_shards})")
        if batch_size < 1:
            raise ConfigError(f"--batch must be >= 1, got {batch_size}")
        self.dataset = dataset
        self._subset: np.ndarray | None = None  # None: every sample, without an index array of n
        if indices is not None:
            self._subset = np.asarray(indices, dtype=np.int64).reshape(-1)
            if self._subset.size and (self._subset.min() < 0 or self._subset.max() >= len(dataset)):
                raise IndexError(f"sample indices must lie in [0, {len(dataset)})")
        n = self.n_total = len(dataset) if self._subset is None else self._subset.size
        if n < n_shards:
            raise DataError(
                f"{n} samples cannot be shared by {n_shards} workers; use more data or fewer workers"
            )
        self.n_shards, self.shard_index = n_shards, shard_index
        self.batch_size, self.seed = batch_size, seed
        self.shuffle, self.equal_batches = shuffle, equal_batches
        if shuffle_block < 1:
            raise ConfigError(f"shuffle block must be >= 1 sample, got {shuffle_block}")
        self.shuffle_block = shuffle_block
        self.group_size, self.group_member = int(group[0]), int(group[1])
        if self.group_size < 1 or not 0 <= self.group_member < self.group_size:
            raise ValueError(f"group member {self.group_member} is not in [0, {self.group_size})")
        self.prefetch = (0 if dataset.preloaded else 1) if prefetch is None else max(0, int(prefetch))

    @property
    def indices(self) -> np.ndarray:
        """The samples this loader draws from (all of the dataset's when built with ``indices=None``)."""
        return np.arange(self.n_total, dtype=np.int64) if self._subset is None else self._subset

    @property
    def n_samples(self) -> int:
        """Samples in this shard (the same every epoch)."""
        start, end = _bounds(self.n_total, self.n_shards, self.shard_index)
        return end - start

    def n_batches(self, epoch: int = 0) -> int:
        """Batches this shard yields in ``epoch`` (with ``equal_batches``, the same on every shard)."""
        if self.equal_batches:
            smallest = self.n_total // self.n_shards
            return n_batches(smallest, self.batch_size)
        return n_batches(self.n_samples, self.batch_size)

    def __len__(self) -> int:
        return self.n_batches(0)

    def shard_indices(self, epoch: int) -> np.ndarray:
        """The global sample indices of this shard in ``epoch``, in the order they are served."""
        if not self.shuffle:
            return shard(self.indices, self.n_shards, self.shard_index)
        order = epoch_order(self.n_total, epoch, self.seed, self.shuffle_block)
        mine = shard(order, self.n_shards, self.shard_index)
        return mine.astype(np.int64) if self._subset is None else self._subset[mine]

    def batch_indices(self, epoch: int) -> list[np.ndarray]:
        """The global sample indices of every batch of ``epoch`` (this group member's slice of each)."""
        result = batches(self.shard_indices(epoch), self.batch_size)
        want = self.n_batches(epoch)
        if len(result) > want:  # one leftover sample: it joins the last batch
            result = [*result[:want - 1], np.concatenate(result[want - 1:])]
        if self.group_size > 1:
            result = [split_batch(b, self.group_size, self.group_member) for b in result]
        return result

    def epoch(self, epoch: int, start_batch: int = 0) -> Iterator[tuple[Any, Any]]:
        """Yield ``(x, y)`` for the batches of ``epoch`` from ``start_batch`` on (to resume mid-epoch)."""
        plan = self.batch_indices(epoch)
        if not 0 <= start_batch <= len(plan):
            raise ValueError(f"start_batch {start_batch} is not in [0, {len(plan)}] for epoch {epoch}")
        yield from self.read_many(plan[start_batch:])

    def read_many(self, plan: Sequence[np.ndarray]) -> Iterator[tuple[Any, Any]]:
        """``(x, y)`` for each index array of ``plan``, in order, read ahead by ``prefetch`` batches (for
        loops that walk :meth:`batch_indices` themselves, e.g. ``sync_every`` batches at a time)."""
        return prefetched(self.dataset.read, plan, self.prefetch)
