"""The example data generators: run as the user would, read back through the data layer."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

import h5py
import numpy as np

from nnlo.data import H5Dataset, read_list_file

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run(script: str, *args: str) -> list[str]:
    proc = subprocess.run([sys.executable, str(EXAMPLES / script), *args], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def load(script: str):
    """Import an example script as a module (faster than a subprocess for repeated calls)."""
    spec = importlib.util.spec_from_file_location(script.removesuffix(".py"), EXAMPLES / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_make_digits_writes_a_complete_one_hot_split_and_is_idempotent(tmp_path):
    out = tmp_path / "digits"
    printed = run("make_digits.py", "--out", str(out), "--files", "3", "--val-fraction", "0.25", "--seed", "4")
    assert printed == [str(out / "train.list"), str(out / "val.list")]
    train, val = (H5Dataset(read_list_file(out / name)) for name in ("train.list", "val.list"))
    assert len(read_list_file(out / "train.list")) == 3
    assert len(train) + len(val) == 1797 and len(val) == round(1797 * 0.25)
    x, y = train.read(np.arange(len(train)))
    assert x.dtype == np.float32 and x.shape == (len(train), 64) and 0.0 <= x.min() and x.max() <= 1.0
    assert y.dtype == np.float32 and y.shape == (len(train), 10)
    np.testing.assert_array_equal(y.sum(axis=1), 1.0)
    assert len(np.unique(y.argmax(axis=1))) == 10
    # no image is in both splits
    xv, _ = val.read(np.arange(len(val)))
    both = {r.tobytes() for r in x} & {r.tobytes() for r in xv}
    assert len(both) < 5  # a few digit images are exact duplicates in the original set
    mtimes = {p: p.stat().st_mtime_ns for p in out.glob("*.h5")}
    make_digits = load("make_digits.py").make_digits
    make_digits(out, files=3, val_fraction=0.25, seed=4)
    assert mtimes == {p: p.stat().st_mtime_ns for p in out.glob("*.h5")}, "a valid set was rewritten"
    make_digits(out, files=2, val_fraction=0.25, seed=4)
    assert len(read_list_file(out / "train.list")) == 2  # other options: regenerated


def test_make_digits_rewrites_a_damaged_file(tmp_path):
    out = tmp_path / "d"
    make_digits = load("make_digits.py").make_digits
    make_digits(out)
    victim = read_list_file(out / "train.list")[0]
    victim.write_bytes(b"broken")
    make_digits(out)
    with h5py.File(victim, "r") as f:
        assert f["features"].shape[1] == 64


@pytest.mark.slow
def test_make_synthetic_is_chunked_and_learnable(tmp_path):
    out = tmp_path / "syn"
    printed = run("make_synthetic.py", "--out", str(out), "--samples", "3001", "--features", "8", "--classes",
                  "3", "--files", "4", "--chunk", "500", "--val-samples", "600", "--separation", "3")
    assert printed == [str(out / "data.list"), str(out / "val.list")]
    train, val = H5Dataset(read_list_file(out / "data.list")), H5Dataset(read_list_file(out / "val.list"))
    assert len(train) == 3001 and sorted(train.counts.tolist()) == [750, 750, 750, 751]
    x, y = train.read(np.arange(len(train)))
    assert x.shape == (3001, 8) and y.shape == (3001, 3)
    # nearest class mean, fitted on train, must classify the validation file well
    means = np.stack([x[y.argmax(1) == c].mean(0) for c in range(3)])
    xv, yv = val.read(np.arange(len(val)))
    predicted = ((xv[:, None, :] - means[None]) ** 2).sum(-1).argmin(1)
    assert (predicted == yv.argmax(1)).mean() > 0.9
    idx = run("make_synthetic.py", "--out", str(tmp_path / "i"), "--samples", "10", "--features", "2",
              "--classes", "2", "--files", "1", "--label-format", "index")
    _, yi = H5Dataset(read_list_file(idx[0])).read([0, 1])
    assert yi.dtype == np.int64


@pytest.mark.slow
def test_make_synthetic_rejects_bad_sizes(tmp_path):
    proc = subprocess.run([sys.executable, str(EXAMPLES / "make_synthetic.py"), "--out", str(tmp_path), "--samples",
                           "3", "--features", "2", "--classes", "2", "--files", "5"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode != 0 and "3 samples cannot fill 5 files" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_make_digits_bad_options_are_one_line_errors(tmp_path):
    for args, message in ((["--files", "5000"], "1438 training images cannot fill 5000 files"),
                          (["--val-fraction", "1.5"], "--val-fraction must be in (0, 1)")):
        proc = subprocess.run([sys.executable, str(EXAMPLES / "make_digits.py"), "--out", str(tmp_path), *args],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode != 0 and message in proc.stderr and "Traceback" not in proc.stderr
