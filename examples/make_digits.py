#!/usr/bin/env python
"""Turn scikit-learn's bundled 8x8 digits (1,797 images, shipped with the package: no download) into HDF5.

Writes ``DIR/train_XX.h5`` and ``DIR/val_XX.h5`` with two datasets each:

- ``features``: float32, N x 64, pixel values scaled to [0, 1];
- ``labels``:   float32, N x 10, one-hot (what a categorical cross-entropy / softmax model expects; take
  ``argmax(axis=1)`` for class indices),

and ``DIR/train.list`` / ``DIR/val.list`` naming them (paths relative to DIR, so the folder can be moved).
The split is shuffled by ``--seed`` (not stratified). Re-running with the same options does nothing if
the files are present and valid (checked via attributes stored in every file), so scripts can call it
unconditionally. Prints the two list paths.

    python examples/make_digits.py --out examples/data/digits [--files 4] [--val-fraction 0.2] [--seed 0]
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import h5py
import numpy as np

GENERATOR = "nnlo-make-digits-1"


def _write_file(path: Path, x: np.ndarray, y: np.ndarray, attrs: dict) -> None:
    """Write atomically: a crash never leaves a half-written file under the final name."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with h5py.File(tmp, "w") as f:
        f.create_dataset("features", data=x)
        f.create_dataset("labels", data=y)
        for k, v in attrs.items():
            f.attrs[k] = v
    os.replace(tmp, path)


def _valid(path: Path, attrs: dict) -> bool:
    try:
        with h5py.File(path, "r") as f:
            ok = all(f.attrs.get(k) == v for k, v in attrs.items())
            return bool(ok and "features" in f and "labels" in f and f["features"].shape[0] == f["labels"].shape[0])
    except OSError:
        return False


def _listed(list_path: Path) -> list[Path]:
    if not list_path.is_file():
        return []
    lines = [ln.strip() for ln in list_path.read_text().splitlines()]
    return [list_path.parent / ln for ln in lines if ln and not ln.startswith("#")]


def make_digits(out: Path, files: int = 4, val_fraction: float = 0.2, seed: int = 0) -> tuple[Path, Path]:
    """Create (or keep, if already valid) the digits HDF5 files and lists in ``out``; return the lists."""
    if files < 1:
        raise SystemExit("make_digits: --files must be >= 1")
    if not 0.0 < val_fraction < 1.0:
        raise SystemExit("make_digits: --val-fraction must be in (0, 1), e.g. 0.2")
    out.mkdir(parents=True, exist_ok=True)
    attrs = {"generator": GENERATOR, "seed": seed, "files": files, "val_fraction": val_fraction}
    train_list, val_list = out / "train.list", out / "val.list"
    present = _listed(train_list) + _listed(val_list)
    if len(present) >= 2 and all(_valid(p, attrs) for p in present):
        return train_list, val_list

    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise SystemExit("make_digits: needs scikit-learn (pip install scikit-learn); it ships the digits") from None

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = np.eye(10, dtype=np.float32)[digits.target]
    order = np.random.default_rng(seed).permutation(len(x))
    n_val = max(1, int(round(len(x) * val_fraction)))
    n_val_files = max(1, min(files // 2, n_val))
    if files > len(x) - n_val:
        raise SystemExit(f"make_digits: {len(x) - n_val} training images cannot fill {files} files; lower --files")
    split = {"val": order[:n_val], "train": order[n_val:]}
    counts = {"train": files, "val": n_val_files}
    for name, idx in split.items():
        names = []
        for k, part in enumerate(np.array_split(idx, counts[name])):
            path = out / f"{name}_{k:02d}.h5"
            _write_file(path, x[part], y[part], attrs)
            names.append(path.name)
        listing = out / f"{name}.list"
        tmp = listing.with_name(f".{listing.name}.tmp")
        tmp.write_text("\n".join(names) + "\n")
        os.replace(tmp, listing)
    return train_list, val_list


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path, help="folder for the HDF5 files and lists")
    parser.add_argument("--files", type=int, default=4, help="number of training files (default 4)")
    parser.add_argument("--val-fraction", type=float, default=0.2, help="share of images for validation")
    parser.add_argument("--seed", type=int, default=0, help="shuffle seed of the split")
    args = parser.parse_args(argv)
    train, val = make_digits(args.out, args.files, args.val_fraction, args.seed)
    print(train)
    print(val)
    return 0


if __name__ == "__main__":
    sys.exit(main())
