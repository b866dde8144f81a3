"""List files: relative paths, comments, and one-line errors for every way a list can be wrong."""
from __future__ import annotations

import pytest

from nnlo.data import read_list_file
from nnlo.errors import DataError


def test_relative_paths_resolve_against_the_list_folder(tmp_path, monkeypatch):
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    for name in ("a.h5", "sub/b.h5"):
        (data / name).write_bytes(b"")
    absolute = tmp_path / "abs.h5"
    absolute.write_bytes(b"")
    listing = data / "train.list"
    listing.write_text(f"# training files\n\na.h5\n  sub/b.h5   # second\n{absolute}\n")
    monkeypatch.chdir(tmp_path)  # the working directory must not matter
    assert read_list_file("data/train.list") == [data / "a.h5", data / "sub" / "b.h5", absolute]


def test_missing_list(tmp_path):
    with pytest.raises(DataError, match=r"list file .*nope.list does not exist"):
        read_list_file(tmp_path / "nope.list")


def test_folder_instead_of_list(tmp_path):
    with pytest.raises(DataError, match="is a folder, not a list file"):
        read_list_file(tmp_path)


def test_empty_list(tmp_path):
    listing = tmp_path / "empty.list"
    listing.write_text("# nothing\n\n")
    with pytest.raises(DataError, match="names no files"):
        read_list_file(listing)


def test_missing_files_named_and_counted(tmp_path):
    (tmp_path / "ok.h5").write_bytes(b"")
    listing = tmp_path / "x.list"
    listing.write_text("ok.h5\ngone1.h5\ngone2.h5\ngone3.h5\n")
    with pytest.raises(DataError, match=r"gone1.h5 listed in .*x.list does not exist \(and 2 more of 4 listed\)") as e:
        read_list_file(listing)
    assert "\n" not in str(e.value)
    assert len(read_list_file(listing, check_exists=False)) == 4


def test_binary_list_is_refused(tmp_path):
    listing = tmp_path / "bin.list"
    listing.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(DataError, match="cannot read list file"):
        read_list_file(listing)


def test_hdf5_file_given_instead_of_a_list(tmp_path):
    import h5py

    data = tmp_path / "data.h5"
    with h5py.File(data, "w") as f:
        f["features"] = [1.0]
    with pytest.raises(DataError, match=r"data.h5 is an HDF5 file, not a list; write its path into a text file"):
        read_list_file(data)


def test_listed_folder_is_named_as_such(tmp_path):
    (tmp_path / "shards").mkdir()
    listing = tmp_path / "x.list"
    listing.write_text("shards\n")
    with pytest.raises(DataError, match="shards listed in .* is a folder, not a file"):
        read_list_file(listing)
