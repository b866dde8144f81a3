"""The HDF5 data layer: list files, a many-file dataset, and the sample arithmetic of data parallelism.

``read_list_file`` -> ``H5Dataset`` -> ``ShardedLoader`` is the whole path from ``--train my.list`` to the
batches of one worker; :mod:`nnlo.data.sampling` holds the pure index functions (shuffle, shard, batch,
split a batch within an all-reduce group, k-fold) that every rank evaluates identically.
"""
from nnlo.data.h5dataset import H5Dataset
from nnlo.data.lists import read_list_file
from nnlo.data.loader import ShardedLoader
from nnlo.data.sampling import batches, epoch_order, kfold, n_batches, shard, split_batch

__all__ = [
    "H5Dataset", "ShardedLoader", "batches", "epoch_order", "kfold", "n_batches", "read_list_file", "shard",
    "split_batch",
]
