#!/usr/bin/env python
"""Benchmark 6 (issue 16, row 3): validation time per epoch when the training ranks share it.

A compute-bound MLP (``bench/models/scaling_mlp.py``) validates a large in-memory validation set after each
epoch of a small training set. **single rank**: the same :class:`nnlo.training.validation.Validator` pass in
one plain process (what the master did alone before validation was shared; every worker then waited at
the epoch barrier). **nnlo**: ``nnlo train -n R`` in a parameter-server mode (1 master + R-1 workers, all R
evaluate a share) and in ``--mode allreduce`` (R replicas); the time is the master's (rank 0's) ``validate``
span in the run's timeline: sending the weights, its own share, waiting for the others' sums. Ideal is the
single-rank time divided by the ranks that can run at once, ``min(R, cores)``; ``measured / ideal`` <= 1.2 is
the target.

    bench/run.sh validation                     # default: R = 2 and 3, downpour and allreduce
    bench/run.sh validation --ranks 2 4 8       # on a bigger node
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as C

NAME = "validation"


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, nargs="+", default=[2, 3], help="ranks of the nnlo runs")
    p.add_argument("--modes", nargs="+", choices=("downpour", "allreduce"), default=["downpour", "allreduce"])
    p.add_argument("--val-samples", type=int, default=16384)
    p.add_argument("--train-samples", type=int, default=512)
    p.add_argument("--epochs", type=int, default=6, help="validations per run (one per epoch)")
    p.add_argument("--hidden", type=int, default=512, help="MLP width (3 hidden layers, 64 inputs)")
    p.add_argument("--repeats", type=int, default=3, help="single-rank passes")
    p.add_argument("--quick", action="store_true", help="tiny sizes (smoke test; the numbers mean nothing)")
    p.add_argument("--out", help="result JSON path (default bench/results/validation.json)")
    a = p.parse_args(argv)
    if a.quick:
        a.ranks, a.modes, a.val_samples, a.train_samples, a.epochs, a.hidden, a.repeats = \
            [2], ["downpour"], 512, 128, 2, 32, 1
    if min(a.ranks) < 2:
        p.error("--ranks must be at least 2 (a master and a worker)")
    return a


def env_for(a: argparse.Namespace) -> dict[str, str]:
    return dict(os.environ, BENCH_MLP_HIDDEN=str(a.hidden), BENCH_MLP_FEATURES="64", BENCH_MLP_CLASSES="10",
                BENCH_MLP_LAYERS="3", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
                PYTHONPATH=f"{C.REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}".rstrip(os.pathsep))


def make_data(a: argparse.Namespace, folder: Path) -> tuple[Path, Path]:
    cmd = [sys.executable, str(C.REPO / "examples" / "make_synthetic.py"), "--out", str(folder),
           "--samples", str(a.train_samples), "--val-samples", str(a.val_samples), "--features", "64",
           "--classes", "10", "--files", "1"]
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=600)
    return folder / "data.list", folder / "val.list"


def single_rank(a: argparse.Namespace, val_list: Path) -> dict[str, Any]:
    """One process, the same Validator over the whole (preloaded) validation set."""
    import numpy as np
    import torch

    from nnlo.backends.torch_backend import TorchBackend
    from nnlo.data import H5Dataset, read_list_file
    from nnlo.training.validation import Validator

    os.environ.update({k: v for k, v in env_for(a).items() if k.startswith("BENCH_")})
    torch.set_num_threads(1)
    sys.path.insert(0, str(C.BENCH_DIR / "models"))
    import scaling_mlp

    torch.manual_seed(0)
    backend = TorchBackend(scaling_mlp.get_model(), "categorical_crossentropy", "adam:lr=0.001")
    ds = H5Dataset(read_list_file(str(val_list)), preload=True)
    validator = Validator(ds, np.arange(len(ds)), 256)  # the driver's batch: max(--batch, 256)
    times = C.timed(lambda: validator(backend), a.repeats, warmup=1)
    return {"seconds": C.summary(times), "params": backend.n_params}


_PART = '''
import os, sys, time, json
import numpy as np, torch
sys.path.insert(0, os.environ["BENCH_MODELS"])
import scaling_mlp
from nnlo.backends.torch_backend import TorchBackend
from nnlo.data import H5Dataset, read_list_file
from nnlo.training.validation import Validator, split_range
torch.set_num_threads(1)
part, parts, repeats = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
torch.manual_seed(0)
backend = TorchBackend(scaling_mlp.get_model(), "categorical_crossentropy", "adam:lr=0.001")
ds = H5Dataset(read_list_file(os.environ["BENCH_VAL_LIST"]), preload=True)
v = Validator(ds, np.arange(len(ds)), 256)
lo, hi = split_range(0, len(ds), [1] * parts)[part]
v.sums(backend, lo, hi)
print("ready", flush=True)
sys.stdin.readline()  # every part starts at once, when all are ready
out = []
for _ in range(repeats):
    t = time.perf_counter(); v.sums(backend, lo, hi); out.append(time.perf_counter() - t)
print(json.dumps(out))
'''


def parallel_ceiling(a: argparse.Namespace, val_list: Path, parts: int) -> dict[str, Any]:
    """The best the machine allows right now: ``parts`` plain processes (no MPI, no nnlo protocol) each
    evaluating 1/parts of the samples at the same moment; per repeat, the slowest one."""
    env = dict(env_for(a), BENCH_MODELS=str(C.BENCH_DIR / "models"), BENCH_VAL_LIST=str(val_list))
    procs = [subprocess.Popen([sys.executable, "-c", _PART, str(i), str(parts), str(a.repeats + 2)],
                              env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for i in range(parts)]
    for p in procs:  # each has imported, read its part and evaluated it once
        assert p.stdout is not None and p.stdout.readline().strip() == "ready", "a part failed to start"
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    runs = [json.loads(p.communicate(timeout=600)[0]) for p in procs]
    return {"seconds": C.summary([max(r[k] for r in runs) for k in range(len(runs[0]))])}


def nnlo_run(a: argparse.Namespace, lists: tuple[Path, Path], mode: str, ranks: int, run_dir: Path) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "nnlo_sched", "train", "-n", str(ranks), "--mode", mode,
           "--model", str(C.BENCH_DIR / "models" / "scaling_mlp.py"), "--train", str(lists[0]),
           "--val", str(lists[1]), "--epochs", str(a.epochs), "--batch", "64", "--preload-data",
           "--checkpoint", str(run_dir), "--checkpoint-interval", "0", "--log-level", "warning", "--timeline"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env_for(a), capture_output=True, text=True, timeout=900, cwd=C.REPO)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"nnlo train ({mode}, {ranks} ranks) exited {proc.returncode}: {' | '.join(tail)}")
    events = json.loads((run_dir / "timeline.json").read_text())["traceEvents"]
    spans = sorted((e["ts"], e["dur"] / 1e6) for e in events if e.get("name") == "validate" and e.get("pid") == 0)
    shares = [e["dur"] / 1e6 for e in events if e.get("name") == "validate share"]
    # ranks that evaluated samples: a share of a master's validation, or an all-reduce replica's own part
    evaluating = {e["pid"] for e in events if e.get("name") == "validate share"
                  or (mode == "allreduce" and e.get("name") == "validate")}
    hist = json.loads((run_dir / "history.json").read_text())["history"]
    return {"validate_s": C.summary([d for _, d in spans]), "ranks_with_a_share": len(evaluating),
        "share_s": C.summary(shares) if shares else None,
        "val_loss_last": hist[-1].get("val_loss"), "wall_s": time.perf_counter() - t0,
        "command": " ".join(cmd[1:])}


def main(argv: list[str]) -> int:
    a = parse(argv)
    load0 = os.getloadavg()
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="nnlo-bench-validation-") as tmp:
        lists = make_data(a, Path(tmp) / "data")
        base = single_rank(a, lists[1])
        singles = list(base["seconds"]["samples"])
        runs: dict[str, dict[str, Any]] = {}
        for mode in a.modes:
            runs[mode] = {}
            for r in a.ranks:
                got = nnlo_run(a, lists, mode, r, Path(tmp) / f"run-{mode}-{r}")
                near = single_rank(a, lists[1])["seconds"]["median"]  # the load drifts: measured beside each run
                singles.append(near)
                ceiling = parallel_ceiling(a, lists[1], r)["seconds"]["median"]
                got.update(single_rank_just_after_s=near, parallel_ceiling_s=ceiling,
                           measured_over_ceiling=got["validate_s"]["median"] / ceiling,
                           measured_over_ideal_paired=got["validate_s"]["median"] / (near / min(r, cores)))
                runs[mode][str(r)] = got
                print(f"  {mode:9s} {r} ranks: validation {got['validate_s']['median']:.3f} s, single rank "
                      f"just after {near:.3f} s, {r} plain processes in parallel {ceiling:.3f} s", flush=True)
        # the reference: the median of every single-rank pass of the run (on a shared machine one pass can be
        # 2x off; on a quiet one they agree); the paired ratio is kept beside it
        base["seconds"] = C.summary(singles)
        ref = base["seconds"]["median"]
        for by_r in runs.values():
            for r_s, got in by_r.items():
                got["ideal_s"] = ref / min(int(r_s), cores)
                got["measured_over_ideal"] = got["validate_s"]["median"] / got["ideal_s"]
    result = {
        "what": "validation time per epoch: the master's validation shared by the training ranks vs one rank",
        "model": {"kind": "MLP 64 -> 3 x hidden -> 10", "hidden": a.hidden, "params": base["params"]},
        "val_samples": a.val_samples, "epochs": a.epochs, "cores": cores,
        "single_rank": base, "runs": runs,
        "note": f"ideal = single rank / min(ranks, {cores} cores); target measured/ideal <= 1.2",
    }
    print(report(result))
    C.write_result(NAME, result, a.out, argv=argv, mpi=True, started_load=load0)
    return 0


def report(r: dict[str, Any]) -> str:
    rows = [["single rank (one process; median of all passes)", 1, C.fmt_time(r["single_rank"]["seconds"]["median"]),
             "", "", "", "", "", ""]]
    for mode, by_r in r["runs"].items():
        for ranks, g in by_r.items():
            rows.append([f"nnlo {mode}", ranks, C.fmt_time(g["validate_s"]["median"]),
                         C.fmt_time(g["ideal_s"]), f"{g['measured_over_ideal']:.2f}",
                         f"{g['measured_over_ideal_paired']:.2f}", C.fmt_time(g["parallel_ceiling_s"]),
                         f"{g['measured_over_ceiling']:.2f}", g["ranks_with_a_share"]])
    head = (f"validation of {r['val_samples']} samples, MLP {r['model']['params']:,} params, {r['cores']} cores; "
            f"median of {r['epochs']} epochs")
    return head + "\n" + C.table(rows, ["run", "ranks", "validation", "ideal", "measured/ideal",
                                        "vs the pass just after", "R plain processes at once",
                                        "measured/that", "ranks evaluating"])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
