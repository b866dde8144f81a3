"""The HDF5 data layer: list files, a many-file dataset, and the sample arithmetic of data parallelism.

``read_list_file`` -> ``H5Dataset`` -> ``ShardedLoader`` is the whole path from ``--train my.list`` to the
batches of one worker; :mod:`nnlo.data.source` is the protocol any data follows (``len`` and batches by
sample index: HDF5 files, arrays in memory, a generator's batches); :mod:`nnlo.data.sampling` holds the
pure index functions (shuffle, shard, batch, split a batch within an all-reduce group, k-fold) that every
rank evaluates identically.
"""
from nnlo.data.h5dataset import H5Dataset
from nnlo.data.lists import read_list_file
from nnlo.data.loader import ShardedLoader
from nnlo.data.sampling import batches, epoch_order, kfold, n_batches, shard, split_batch
from nnlo.data.source import ArraySource, DataSource, GeneratorSource, as_dataset

__all__ = [
    "ArraySource", "DataSource", "GeneratorSource", "H5Dataset", "ShardedLoader", "as_dataset", "batches",
    "epoch_order", "kfold", "n_batches", "read_list_file", "shard", "split_batch",
]
