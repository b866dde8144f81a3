#!/usr/bin/env python
"""Write a large, learnable synthetic classification set to HDF5, for benchmarks and scaling tests.

Samples are Gaussian blobs: each of ``--classes`` classes has a random center in ``--features`` dimensions
(spread ``--separation``), and a sample is its class center plus unit Gaussian noise, so a linear model
already learns it and deeper models reach near-perfect accuracy. Files hold:

- ``features``: float32, N x F;
- ``labels``: float32 one-hot, N x C (``--label-format index`` writes int64 class indices instead).

The ``--samples`` are spread over ``--files`` files (sizes differ by at most one) and written in chunks of
``--chunk`` rows, so sets far larger than memory can be made. Output: ``DIR/part_XXXX.h5`` and
``DIR/data.list``; ``--val-samples`` adds ``DIR/val.h5`` and ``DIR/val.list`` from the same distribution.
Re-running with identical options does nothing when the files are complete (attributes record the options).

    python examples/make_synthetic.py --out /scratch/synth --samples 1000000 --features 256 --classes 10 --files 16
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import h5py
import numpy as np

GENERATOR = "nnlo-make-synthetic-2"


def _centers(features: int, classes: int, separation: float, seed: int) -> np.ndarray:
    return np.random.default_rng([seed, 0]).normal(0.0, separation, size=(classes, features)).astype(np.float32)


def _write(path: Path, n: int, centers: np.ndarray, stream: int, seed: int, chunk: int, label_format: str,
           attrs: dict) -> None:
    classes, features = centers.shape
    rng = np.random.default_rng([seed, 1, stream])
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    rows = max(1, min(chunk, n))
    with h5py.File(tmp, "w") as f:
        # contiguous layout (the size is known up front): the fastest for shuffled row reads, which touch
        # whole chunks of a chunked dataset; still written chunk by chunk, so memory stays bounded
        fx = f.create_dataset("features", shape=(n, features), dtype="float32")
        if label_format == "onehot":
            fy = f.create_dataset("labels", shape=(n, classes), dtype="float32")
        else:
            fy = f.create_dataset("labels", shape=(n,), dtype="int64")
        for start in range(0, n, rows):
            m = min(rows, n - start)
            y = rng.integers(0, classes, size=m)
            x = rng.standard_normal(size=(m, features), dtype=np.float32)
            x += centers[y]
            fx[start:start + m] = x
            fy[start:start + m] = np.eye(classes, dtype=np.float32)[y] if label_format == "onehot" else y
        for k, v in attrs.items():
            f.attrs[k] = v
        f.attrs["complete"] = True
    os.replace(tmp, path)


def _valid(path: Path, attrs: dict, n: int) -> bool:
    try:
        with h5py.File(path, "r") as f:
            return bool(f.attrs.get("complete") and all(f.attrs.get(k) == v for k, v in attrs.items())
                        and f["features"].shape[0] == n)
    except (OSError, KeyError):
        return False


def make_synthetic(out: Path, samples: int, features: int, classes: int, files: int, seed: int = 0,
                   separation: float = 1.0, chunk: int = 65536, label_format: str = "onehot",
                   val_samples: int = 0) -> list[Path]:
    """Create (or keep, when complete) the files and lists; return the list paths written."""
    for name, value, low in (("--samples", samples, 1), ("--features", features, 1), ("--classes", classes, 2),
                             ("--files", files, 1), ("--chunk", chunk, 1)):
        if value < low:
            raise SystemExit(f"make_synthetic: {name} must be >= {low}, got {value}")
    if files > samples:
        raise SystemExit(f"make_synthetic: {samples} samples cannot fill {files} files; use --files <= {samples}")
    out.mkdir(parents=True, exist_ok=True)
    attrs = {"generator": GENERATOR, "seed": seed, "features_dim": features, "classes": classes,
             "separation": separation, "label_format": label_format, "total_samples": samples}
    centers = _centers(features, classes, separation, seed)
    sizes = [len(part) for part in np.array_split(np.arange(samples), files)]
    names = []
    for k, n in enumerate(sizes):
        path = out / f"part_{k:04d}.h5"
        if not _valid(path, attrs, n):
            _write(path, n, centers, k, seed, chunk, label_format, attrs)
        names.append(path.name)
    lists = [out / "data.list"]
    lists[0].write_text("\n".join(names) + "\n")
    if val_samples > 0:
        val = out / "val.h5"
        vattrs = dict(attrs, total_samples=val_samples)
        if not _valid(val, vattrs, val_samples):
            _write(val, val_samples, centers, 10**6, seed, chunk, label_format, vattrs)
        lists.append(out / "val.list")
        lists[1].write_text("val.h5\n")
    return lists


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, type=Path, help="output folder")
    p.add_argument("--samples", required=True, type=int, help="training samples in total")
    p.add_argument("--features", required=True, type=int, help="features per sample")
    p.add_argument("--classes", required=True, type=int, help="number of classes (>= 2)")
    p.add_argument("--files", required=True, type=int, help="number of HDF5 files")
    p.add_argument("--val-samples", type=int, default=0, help="also write a validation file of this size")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--separation", type=float, default=1.0, help="spread of class centers (larger = easier)")
    p.add_argument("--chunk", type=int, default=65536, help="rows generated and written at a time")
    p.add_argument("--label-format", choices=("onehot", "index"), default="onehot")
    a = p.parse_args(argv)
    for path in make_synthetic(a.out, a.samples, a.features, a.classes, a.files, a.seed, a.separation,
                               a.chunk, a.label_format, a.val_samples):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
