"""nnlo.atomic: whole files or nothing, for every writer of shared files (checkpoints, run state, trials)."""
import json
import threading

import numpy as np
import pytest

from nnlo.atomic import atomic_open, write_json, write_text


def test_json_with_numpy_values_round_trips(tmp_path):
    path = write_json(tmp_path / "sub" / "a.json", {"x": np.float32(1.5), "v": np.arange(3), "s": (1, 2)})
    assert json.loads(path.read_text()) == {"x": 1.5, "v": [0, 1, 2], "s": [1, 2]}


def test_strict_json_refuses_nan_and_leaves_the_old_file(tmp_path):
    path = write_json(tmp_path / "t.json", {"fom": 1.0})
    with pytest.raises(ValueError):
        write_json(path, {"fom": float("nan")}, allow_nan=False)
    assert json.loads(path.read_text()) == {"fom": 1.0}
    assert [p.name for p in tmp_path.iterdir()] == ["t.json"]  # no temporary file left behind


def test_a_failed_write_keeps_the_previous_content(tmp_path):
    path = tmp_path / "part.pkl"
    with atomic_open(path, "wb") as f:
        f.write(b"old")
    with pytest.raises(RuntimeError):
        with atomic_open(path, "wb") as f:
            f.write(b"half of the new")
            raise RuntimeError("killed mid-write")
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["part.pkl"]


def test_readers_never_see_a_torn_file_while_threads_write(tmp_path):
    path = write_text(tmp_path / "state.json", json.dumps({"n": -1, "pad": ""}))
    stop = threading.Event()
    torn: list[str] = []

    def writer(k: int) -> None:
        for i in range(200):
            write_json(path, {"n": k * 1000 + i, "pad": "x" * (i * 37 % 5000)})

    def reader() -> None:
        while not stop.is_set():
            text = path.read_text()
            try:
                json.loads(text)
            except ValueError:
                torn.append(text[:80])

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(3)]
    r = threading.Thread(target=reader)
    r.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    r.join()
    assert torn == []
    assert json.loads(path.read_text())["n"] % 1000 == 199


def test_only_whole_file_modes(tmp_path):
    with pytest.raises(ValueError, match="whole files"):
        with atomic_open(tmp_path / "x", "a"):
            pass


def test_json_layout_defaults_one_space_indent_keys_in_order_nan_allowed(tmp_path):
    """What every run file looks like (docs: one-space indent, the writer's key order, a final newline)."""
    path = write_json(tmp_path / "a.json", {"b": 1, "a": [float("nan"), float("inf")]})
    assert path.read_text() == '{\n "b": 1,\n "a": [\n  NaN,\n  Infinity\n ]\n}\n'
    write_json(path, {"b": 1, "a": 2}, indent=None, sort_keys=True)
    assert path.read_text() == '{"a": 2, "b": 1}\n'
    assert write_text(tmp_path / "t.txt", "é\n").read_bytes() == "é\n".encode()  # text, UTF-8


def test_values_json_cannot_hold_become_plain_ones(tmp_path):
    class Colour:
        def __str__(self) -> str:
            return "red"

    data = {"set": {3}, "frozen": frozenset({4}), "path": tmp_path / "p", "obj": Colour(), "i": np.int64(7),
            "m": np.ones((2, 1), dtype=np.float32)}
    assert json.loads(write_json(tmp_path / "v.json", data).read_text()) == {
        "set": [3], "frozen": [4], "path": str(tmp_path / "p"), "obj": "red", "i": 7, "m": [[1.0], [1.0]]}


def test_binary_writes_and_fsync_of_a_missing_folder_is_no_error(tmp_path):
    from nnlo.atomic import fsync_folder

    with atomic_open(tmp_path / "deep" / "b.bin", "wb") as f:
        f.write(b"\x00\xff")
    assert (tmp_path / "deep" / "b.bin").read_bytes() == b"\x00\xff"
    fsync_folder(tmp_path / "no" / "such" / "folder")  # best effort: nothing to make durable
    with pytest.raises(ValueError, match=r"^atomic_open writes whole files: mode 'w' or 'wb', not 'r\+'$"):
        with atomic_open(tmp_path / "x", "r+"):
            pass
    assert not (tmp_path / "x").exists()
