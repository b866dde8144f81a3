#!/usr/bin/env python
"""Benchmark 3: scaling - training samples/s with 1 and 2 workers per mode, against one plain local process.

The baseline is the strongest alternative on the same machine: the same torch model trained by one process
with no MPI at all (``TorchBackend.train_on_batch`` over the same in-memory data, one thread). Then real
``nnlo train -n K`` runs (K = workers + 1 master; with ``--mode allreduce`` K = workers: replicas, no master)
for each mode; samples/s is read from the run's
``history.json`` (the median over epochs after the first, which includes start-up).

* master overhead = 1 - (nnlo with 1 worker) / (local process): what the parameter server costs;
* parallel efficiency = (nnlo with 2 workers) / (2 x nnlo with 1 worker);
* speedup over local = (nnlo with 2 workers) / (local process).

On a machine with C cores, 1 master + W workers need W + 1 cores to run at full speed: on 2 cores, 2
workers share the cores with the master. On a machine loaded by others, the kernel shares the cores
per runnable process, so a run of 3 processes gets more of the machine than one process does: there,
"vs local" above W is an artefact of fair sharing, not of nnlo. The local process is therefore measured
again right before each nnlo run (``local_just_before``), and the JSON records the core count and load.

    bench/run.sh scaling                                # modes gem downpour easgd sync, 1 and 2 workers
    bench/run.sh scaling --workers 1 2 4 --samples 65536
    bench/run.sh scaling --quick                        # smoke test
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as C

NAME = "scaling"
MODES = ("gem", "downpour", "easgd", "sync", "allreduce")


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    p.add_argument("--samples", type=int, default=8192, help="training samples per epoch")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--hidden", type=int, default=512, help="MLP width (3 hidden layers, 64 inputs)")
    p.add_argument("--sync-every", type=int, default=1)
    p.add_argument("--data", help="folder for the synthetic HDF5 data (default: a temporary folder)")
    p.add_argument("--quick", action="store_true", help="tiny model and data, one mode (smoke test)")
    p.add_argument("--out", help="result JSON path (default bench/results/scaling.json)")
    a = p.parse_args(argv)
    if a.quick:
        a.modes, a.samples, a.epochs, a.batch, a.hidden = ["gem"], 1024, 2, 128, 64
    if a.epochs < 2:
        p.error("--epochs must be at least 2 (the first epoch includes start-up and is not counted)")
    if min(a.workers) < 1:
        p.error("--workers must be positive")
    return a


def env_for(a: argparse.Namespace) -> dict[str, str]:
    return dict(os.environ, BENCH_MLP_HIDDEN=str(a.hidden), BENCH_MLP_FEATURES="64", BENCH_MLP_CLASSES="10",
                BENCH_MLP_LAYERS="3", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")


def make_data(a: argparse.Namespace, folder: Path) -> Path:
    cmd = [sys.executable, str(C.REPO / "examples" / "make_synthetic.py"), "--out", str(folder),
           "--samples", str(a.samples), "--features", "64", "--classes", "10", "--files", "2"]
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=600)
    return folder / "data.list"


def local_rate(a: argparse.Namespace, data_list: Path, epochs: int | None = None) -> dict[str, Any]:
    """Samples/s of one plain process training the same model on the same data (in memory); the first
    epoch is a warm-up and not counted."""
    import h5py
    import numpy as np
    import torch

    from nnlo.backends.torch_backend import TorchBackend

    os.environ.update({k: v for k, v in env_for(a).items() if k.startswith("BENCH_")})
    torch.set_num_threads(1)
    sys.path.insert(0, str(C.BENCH_DIR / "models"))
    import scaling_mlp  # noqa: E402

    xs, ys = [], []
    for line in data_list.read_text().split():
        with h5py.File(line if os.path.isabs(line) else data_list.parent / line) as f:
            xs.append(f["features"][:])
            ys.append(f["labels"][:])
    x, y = np.concatenate(xs), np.concatenate(ys)
    torch.manual_seed(0)
    backend = TorchBackend(scaling_mlp.get_model(), "categorical_crossentropy", "adam:lr=0.001")
    rates = []
    order = np.random.default_rng(0).permutation(len(x))
    for epoch in range(epochs or a.epochs):
        t0 = time.perf_counter()
        for s in range(0, len(x), a.batch):
            idx = np.sort(order[s:s + a.batch])
            backend.train_on_batch(x[idx], y[idx])
        rates.append(len(x) / (time.perf_counter() - t0))
    return {"samples_per_s": C.summary(rates[1:]), "params": backend.n_params}


def nnlo_rate(a: argparse.Namespace, data_list: Path, mode: str, workers: int, run_dir: Path) -> dict[str, Any]:
    # the parameter-server modes run 1 master + W workers; --mode allreduce runs W replicas and no master
    ranks = workers if mode == "allreduce" else workers + 1
    cmd = [sys.executable, "-m", "nnlo_sched", "train", "-n", str(ranks),
           "--model", str(C.BENCH_DIR / "models" / "scaling_mlp.py"), "--train", str(data_list),
           "--epochs", str(a.epochs), "--batch", str(a.batch), "--sync-every", str(a.sync_every),
           "--preload-data", "--checkpoint", str(run_dir), "--checkpoint-interval", "0", "--log-level", "warning"]
    cmd += ["--mode", "downpour", "--synchronous"] if mode == "sync" else ["--mode", mode]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env_for(a), capture_output=True, text=True, timeout=900, cwd=C.REPO)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"nnlo train ({mode}, {workers} workers) exited {proc.returncode}: {' | '.join(tail)}")
    hist = json.loads((run_dir / "history.json").read_text())["history"]
    rates = [e["samples_per_s"] for e in hist[1:] if e.get("samples_per_s")]
    return {"samples_per_s": C.summary(rates), "wall_s": wall, "epochs": len(hist),
            "command": " ".join(cmd[1:])}


def main(argv: list[str]) -> int:
    a = parse(argv)
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="nnlo-bench-scaling-") as tmp:
        data_list = make_data(a, Path(a.data) if a.data else Path(tmp) / "data")
        # the local baseline is measured again right before every nnlo run (2 epochs, the second counted):
        # on a shared machine the load changes between runs, and each run is compared with its neighbour
        base = local_rate(a, data_list)
        paired: list[float] = []
        runs: dict[str, dict[str, Any]] = {}
        for mode in a.modes:
            runs[mode] = {}
            for w in a.workers:
                near = local_rate(a, data_list, epochs=2)["samples_per_s"]["median"]
                paired.append(near)
                r = nnlo_rate(a, data_list, mode, w, Path(tmp) / f"run-{mode}-{w}")
                r["local_just_before"] = near
                r["vs_local_just_before"] = r["samples_per_s"]["median"] / near
                runs[mode][str(w)] = r
                print(f"  {mode:8s} {w} worker(s): {r['samples_per_s']['median']:.0f} samples/s "
                      f"(local just before: {near:.0f})", flush=True)
    base["samples_per_s"] = C.summary(base["samples_per_s"]["samples"] + paired)
    local = base["samples_per_s"]["median"]
    per_mode = {}
    for mode, by_w in runs.items():
        r1 = by_w.get("1", {}).get("samples_per_s", {}).get("median")
        entry: dict[str, Any] = {"runs": by_w}
        if r1:
            entry["master_overhead"] = 1 - r1 / local
        for w, r in by_w.items():
            rw = r["samples_per_s"]["median"]
            if r1 and int(w) > 1:
                entry[f"efficiency_{w}_workers"] = rw / (int(w) * r1)
            entry[f"speedup_over_local_{w}_workers"] = rw / local
        per_mode[mode] = entry
    result = {
        "what": "training samples/s: nnlo train with 1..W workers per mode vs one plain local torch process",
        "model": {"kind": "MLP 64 -> 3 x hidden -> 10", "hidden": a.hidden, "params": base["params"],
                  "batch": a.batch, "sync_every": a.sync_every},
        "samples_per_epoch": a.samples, "epochs": a.epochs,
        "local_process": base,
        "modes": per_mode,
        "note": f"{os.cpu_count()} cores: 1 master + W workers need W+1 cores for full speed",
    }
    print(report(result))
    C.write_result(NAME, result, a.out, argv=argv, mpi=True, started_load=load0)
    return 0


def report(r: dict) -> str:
    local = r["local_process"]["samples_per_s"]["median"]
    out = [f"scaling, model {r['model']['params']:,} params, batch {r['model']['batch']}; "
           f"local process {local:.0f} samples/s"]
    tab = []
    for mode, e in r["modes"].items():
        for w, run in e["runs"].items():
            s = run["samples_per_s"]
            eff = e.get(f"efficiency_{w}_workers")
            tab.append([mode, w, f"{s['median']:.0f}", f"{s['min']:.0f}-{s['max']:.0f}",
                        f"{e[f'speedup_over_local_{w}_workers']:.2f}", "-" if eff is None else f"{eff:.2f}",
                        f"{e['master_overhead']:.2f}" if w == "1" and "master_overhead" in e else ""])
    out.append(C.table(tab, ["mode", "workers", "samples/s", "range", "vs local", "efficiency", "master overhead"]))
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
