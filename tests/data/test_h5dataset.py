"""H5Dataset reads exactly the requested rows across files, whatever the order, and explains bad files."""
from __future__ import annotations

import pickle

import h5py
import numpy as np
import pytest

from nnlo.data import H5Dataset, h5dataset
from nnlo.errors import DataError

from tests.helpers.h5 import write_indexed


def expected(idx):
    g = np.asarray(idx, dtype=np.float32)
    return g[:, None] + 0.5 * np.arange(3, dtype=np.float32)[None, :], g


@pytest.mark.parametrize("preload", [False, True])
def test_arbitrary_indices_across_files(indexed_files, preload):
    ds = H5Dataset(indexed_files, preload=preload)
    assert len(ds) == 24 and ds.preloaded == preload
    for idx in ([0], [23, 0, 7, 6, 19, 20], [5, 5, 5, 18, 5], list(range(24))[::-1], []):
        x, y = ds.read(idx)
        ex, ey = expected(idx)
        np.testing.assert_array_equal(x, ex)
        np.testing.assert_array_equal(y, ey)
        assert x.dtype == np.float32 and x.shape == (len(idx), 3)


def test_every_read_strategy_gives_the_same_rows(indexed_files, monkeypatch):
    rng = np.random.default_rng(0)
    idx = rng.choice(24, size=15, replace=True)
    ds = H5Dataset(indexed_files)
    for slab in (0, 10**9):  # point selections only / slab reads only
        monkeypatch.setattr(h5dataset, "SLAB_BYTES", slab)
        x, y = ds.read(idx)
        np.testing.assert_array_equal(y, idx.astype(np.float32))
        np.testing.assert_array_equal(x, expected(idx)[0])


def test_many_files_with_few_open_handles(tmp_path, monkeypatch):
    monkeypatch.setattr(h5dataset, "MAX_OPEN_FILES", 2)
    ds = H5Dataset(write_indexed(tmp_path, [3] * 7))
    idx = np.arange(21)[::-1]
    np.testing.assert_array_equal(ds.read(idx)[1], idx.astype(np.float32))
    assert len(ds._handles) <= 2


def test_out_of_range(indexed_files):
    with pytest.raises(IndexError, match="sample index 24 is out of range for 24 samples"):
        H5Dataset(indexed_files).read([3, 24])
    with pytest.raises(IndexError, match="-1"):
        H5Dataset(indexed_files).read([-1])


def test_adaptors_multiple_inputs_and_no_labels(tmp_path):
    path = tmp_path / "multi.h5"
    with h5py.File(path, "w") as f:
        f["img"] = np.arange(24, dtype=np.float32).reshape(6, 4)
        f["aux"] = np.arange(6, dtype=np.int32)
        f["y"] = np.arange(6, dtype=np.int64) % 2
    ds = H5Dataset([path], features=[("img", lambda a: a.reshape(-1, 2, 2)), "aux"],
                   labels=("y", lambda a: np.eye(2, dtype=np.float32)[a]))
    (img, aux), y = ds.read([4, 1])
    assert img.shape == (2, 2, 2) and img[0, 1, 1] == 19
    np.testing.assert_array_equal(aux, [4, 1])
    np.testing.assert_array_equal(y, [[1, 0], [0, 1]])
    x, none = H5Dataset([path], features="aux", labels=None).read([2])
    assert none is None and x.tolist() == [2]
    xs, ys = H5Dataset([path], features=["aux"], labels=["y"]).read([3])
    assert isinstance(xs, list) and isinstance(ys, list) and ys[0].tolist() == [1]


def test_absent_dataset_names_file_dataset_and_what_exists(indexed_files):
    with pytest.raises(DataError) as e:
        H5Dataset(indexed_files, labels="target")
    msg = str(e.value)
    assert str(indexed_files[0]) in msg and "'target'" in msg and "features, labels" in msg
    assert "--labels-name" in msg and "\n" not in msg
    with pytest.raises(DataError, match="--features-name"):
        H5Dataset(indexed_files, features="X")


def test_length_mismatch_in_a_file(tmp_path):
    path = tmp_path / "bad.h5"
    with h5py.File(path, "w") as f:
        f["features"] = np.zeros((5, 2), np.float32)
        f["labels"] = np.zeros(4, np.float32)
    with pytest.raises(DataError, match=r"bad.h5: datasets disagree in length \(features has 5, labels has 4\)"):
        H5Dataset([path])


def test_row_shape_mismatch_across_files(tmp_path):
    good = write_indexed(tmp_path, [2])[0]
    other = tmp_path / "wide.h5"
    with h5py.File(other, "w") as f:
        f["features"] = np.zeros((2, 5), np.float32)
        f["labels"] = np.zeros(2, np.float32)
    with pytest.raises(DataError, match=r"wide.h5: dataset 'features' has rows of shape \(5,\)"):
        H5Dataset([good, other])


def test_not_hdf5_missing_scalar_and_empty(tmp_path):
    junk = tmp_path / "junk.h5"
    junk.write_text("not hdf5")
    with pytest.raises(DataError, match="junk.h5 is not a readable HDF5 file"):
        H5Dataset([junk])
    with pytest.raises(DataError, match="gone.h5 does not exist"):
        H5Dataset([tmp_path / "gone.h5"])
    with pytest.raises(DataError, match="no data files"):
        H5Dataset([])
    scalar = tmp_path / "scalar.h5"
    with h5py.File(scalar, "w") as f:
        f["features"] = 1.0
        f["labels"] = 1.0
    with pytest.raises(DataError, match="is a scalar"):
        H5Dataset([scalar])
    with pytest.raises(DataError, match="must be a dataset name"):
        H5Dataset([junk], features=42)


def test_pickles_without_open_handles_and_reopens(indexed_files):
    ds = H5Dataset(indexed_files)
    ds.read([1, 2])
    clone = pickle.loads(pickle.dumps(ds))
    np.testing.assert_array_equal(clone.read([20])[1], [20])
    with ds:
        pass
    assert not ds._handles


def test_broadcast_pattern_unpickled_dataset_opens_no_file_until_read(indexed_files):
    built = H5Dataset(indexed_files)
    received = pickle.loads(pickle.dumps(built))
    assert not received._handles and len(received) == 24
    received.preload()
    assert received.preloaded and not received._handles
    np.testing.assert_array_equal(received.read([23, 1])[1], [23, 1])


@pytest.mark.parametrize("use_mmap", [True, False])
@pytest.mark.parametrize("layout", [
    dict(),                                        # contiguous: memory-mapped when allowed
    dict(chunks=(4, 3), compression="gzip"),       # chunked and compressed: always h5py
    dict(dtype=">f4"),                             # big-endian on disk
])
def test_memory_map_and_h5py_paths_agree(tmp_path, monkeypatch, use_mmap, layout):
    monkeypatch.setattr(h5dataset, "USE_MMAP", use_mmap)
    path = tmp_path / "layout.h5"
    data = np.arange(60, dtype=np.float32).reshape(20, 3)
    with h5py.File(path, "w") as f:
        f.create_dataset("features", data=data, **layout)
        f.create_dataset("labels", data=np.arange(20, dtype=np.int64))
    ds = H5Dataset([path])
    idx = np.array([19, 0, 7, 7, 3, 12, 13, 14])
    x, y = ds.read(idx)
    np.testing.assert_array_equal(x, data[idx])
    np.testing.assert_array_equal(y, idx)
    mapped = ds._maps.get((0, "features"))
    assert (mapped is not None) == (use_mmap and "chunks" not in layout)


def test_failing_adaptor_is_a_one_line_model_error(indexed_files):
    from nnlo.errors import ModelError

    ds = H5Dataset(indexed_files, features=("features", lambda a: a.reshape(5, 5)))
    with pytest.raises(ModelError, match=r"adaptor of 'features' \(from get_features\(\)\) raised ValueError.*shape \(2, 3\)"):
        ds.read([0, 1])


def test_preload_refuses_more_than_available_memory(indexed_files, monkeypatch):
    monkeypatch.setattr(h5dataset, "_available_memory", lambda: 100)
    with pytest.raises(DataError, match=r"preloading needs 384 B per rank but only 100 B of memory .* drop --preload-data"):
        H5Dataset(indexed_files, preload=True)
    monkeypatch.setattr(h5dataset, "_available_memory", lambda: None)
    assert H5Dataset(indexed_files, preload=True).preloaded
