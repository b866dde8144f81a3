"""ShardedLoader: one worker's batches; shards of an epoch are disjoint, complete and equally many batches."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from nnlo.data import H5Dataset, ShardedLoader, kfold
from nnlo.errors import DataError


def served(loader, epoch, start=0):
    """The labels (= global indices) a loader yields in an epoch, batch by batch."""
    return [y.astype(np.int64) for _, y in loader.epoch(epoch, start_batch=start)]


def test_shards_of_an_epoch_partition_the_data_and_reshuffle(indexed_files):
    ds = H5Dataset(indexed_files)
    loaders = [ShardedLoader(ds, None, 5, i, batch_size=2, seed=7) for i in range(5)]
    per_epoch = []
    for epoch in (0, 1):
        got = [np.concatenate(served(ld, epoch)) for ld in loaders]
        assert sorted(np.concatenate(got).tolist()) == list(range(24))
        per_epoch.append(np.concatenate(got))
        # the features match the label of the same row
        for ld in loaders:
            for x, y in ld.epoch(epoch):
                np.testing.assert_array_equal(x[:, 0], y)
    assert not np.array_equal(*per_epoch)


@pytest.mark.parametrize("n_shards,batch_size", [(5, 2), (5, 4), (7, 3), (24, 1), (3, 8), (4, 5)])
def test_every_shard_yields_the_same_number_of_batches(indexed_files, n_shards, batch_size):
    ds = H5Dataset(indexed_files)
    loaders = [ShardedLoader(ds, None, n_shards, i, batch_size, seed=1) for i in range(n_shards)]
    counts = {len(list(ld.epoch(3))) for ld in loaders}
    assert counts == {loaders[0].n_batches(3)}
    total = sum(len(y) for ld in loaders for _, y in ld.epoch(3))
    assert total == 24


def test_unequal_batches_when_asked(indexed_files):
    ds = H5Dataset(indexed_files)  # 24 samples: shards of 5,5,5,5,4; batch 4 -> 2,2,2,2,1 batches
    counts = [ShardedLoader(ds, None, 5, i, 4, equal_batches=False).n_batches() for i in range(5)]
    assert counts == [2, 2, 2, 2, 1]


def test_resume_mid_epoch_serves_the_rest(indexed_files):
    ld = ShardedLoader(H5Dataset(indexed_files), None, 2, 1, batch_size=3, seed=3)
    full = served(ld, 4)
    rest = served(ld, 4, start=2)
    assert len(rest) == len(full) - 2
    for a, b in zip(full[2:], rest):
        np.testing.assert_array_equal(a, b)
    assert served(ld, 4, start=len(full)) == []
    with pytest.raises(ValueError, match="start_batch"):
        served(ld, 4, start=len(full) + 1)


def test_subset_and_no_shuffle(indexed_files):
    ds = H5Dataset(indexed_files)
    train, val = kfold(len(ds), 3, seed=0)[1]
    got = np.concatenate([np.concatenate(served(ShardedLoader(ds, train, 2, i, 4, seed=5), 0)) for i in range(2)])
    assert sorted(got.tolist()) == train.tolist()
    in_order = ShardedLoader(ds, val, 1, 0, 100, shuffle=False)
    np.testing.assert_array_equal(served(in_order, 0)[0], val)
    np.testing.assert_array_equal(served(in_order, 9)[0], val)


def test_fewer_samples_than_workers(indexed_files):
    ds = H5Dataset(indexed_files)
    with pytest.raises(DataError, match="3 samples cannot be shared by 4 workers"):
        ShardedLoader(ds, [1, 2, 3], 4, 0, 1)
    with pytest.raises(IndexError):
        ShardedLoader(ds, [30], 1, 0, 1)


MPI_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    from mpi4py import MPI
    from nnlo.data import H5Dataset, ShardedLoader
    comm = MPI.COMM_WORLD
    # one rank inspects the files; the others receive the dataset (it pickles without open files)
    dataset = comm.bcast(H5Dataset(sys.argv[1:]) if comm.rank == 0 else None, root=0)
    loader = ShardedLoader(dataset, None, comm.size, comm.rank, batch_size=4, seed=11)
    for epoch in range(2):
        mine = [y.astype(np.int64) for _, y in loader.epoch(epoch)]
        counts = comm.allgather(len(mine))
        everything = comm.gather(np.concatenate(mine), root=0)
        if comm.rank == 0:
            assert len(set(counts)) == 1, counts
            joined = np.concatenate(everything)
            assert sorted(joined.tolist()) == list(range(24)), joined
            print("epoch", epoch, "ok", counts[0], flush=True)
""")


@pytest.mark.mpi
def test_ranks_of_a_real_mpi_job_share_the_data(indexed_files, tmp_path, mpirun, nnlo_env):
    script = tmp_path / "shard_check.py"
    script.write_text(MPI_SCRIPT)
    proc = subprocess.run([mpirun, "-np", "3", sys.executable, str(script), *map(str, indexed_files)],
                          env=nnlo_env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "epoch 0 ok 2" in proc.stdout and "epoch 1 ok 2" in proc.stdout


def test_block_shuffled_shards_still_partition_and_read_runs(indexed_files):
    ds = H5Dataset(indexed_files)
    loaders = [ShardedLoader(ds, None, 2, i, 4, seed=9, shuffle_block=6) for i in range(2)]
    got = [np.concatenate(served(ld, 1)) for ld in loaders]
    assert sorted(np.concatenate(got).tolist()) == list(range(24))
    assert all(1 + np.count_nonzero(np.diff(g // 6)) == 2 for g in got)  # 12 samples = two runs of 6


def test_members_of_an_all_reduce_group_split_every_batch(indexed_files):
    ds = H5Dataset(indexed_files)
    whole = ShardedLoader(ds, None, 2, 1, 5, seed=8)
    members = [ShardedLoader(ds, None, 2, 1, 5, seed=8, group=(3, m)) for m in range(3)]
    plans = [m.batch_indices(2) for m in members]
    assert {len(p) for p in plans} == {len(whole.batch_indices(2))}
    for b, full in enumerate(whole.batch_indices(2)):
        parts = [p[b] for p in plans]
        assert sorted(np.concatenate(parts).tolist()) == sorted(full.tolist())
        assert max(map(len, parts)) - min(map(len, parts)) <= 1
    with pytest.raises(ValueError, match=r"group member 3 is not in \[0, 3\)"):
        ShardedLoader(ds, None, 1, 0, 5, group=(3, 3))
