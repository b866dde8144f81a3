#!/usr/bin/env python
"""Benchmark 6: start-up - ``nnlo train -n 3`` from the command to the first batch, and where the time goes.

Two parts:

1. **End to end**: a real ``nnlo train -n 3`` (1 master, 2 workers, a tiny torch model on HDF5 files) with
   ``--timeline``; "to first batch" is the first training span's time stamp (the workers' first "read
   batch") minus the moment the command was started; "total" is the command's wall time.
2. **Breakdown**, each phase timed on its own in fresh processes (so the phases are what one rank pays):
   the interpreter (``python -c pass``), the command line's imports (``nnlo_sched.cli`` and the train
   command), the rank's own imports (every training module, no framework), ``import torch``, the first
   optimizer (``torch.optim`` imports ``torch._dynamo`` on first use: torch's cost, not nnlo's), MPI
   start-up (``mpirun -np 3`` of ``from mpi4py import MPI`` and a barrier), then in one process: the model
   module and model build, the backend, opening the data, and the first batch.

Also checked: the modules a rank of the end-to-end run imported (``python -X importtime`` through
``PYTHONPROFILEIMPORTTIME``): none of tensorflow, keras, skopt, matplotlib for a torch model.

    bench/run.sh startup                # 3 repeats
    bench/run.sh startup --quick        # 1 repeat, a tenth of the data
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as C
from blobs import write_blobs

NAME = "startup"
HERE = Path(__file__).resolve().parent
REPO = HERE.parent
MODEL = REPO / "tests" / "runtime" / "models" / "tiny.py"
FORBIDDEN = ("tensorflow", "keras", "skopt", "matplotlib")
RANK_MODULES = ("nnlo.training.driver", "nnlo.training.master", "nnlo.training.worker", "nnlo.training.serve",
                "nnlo.training.modes", "nnlo.training.allreduce", "nnlo.training.groups",
                "nnlo.training.validation", "nnlo.transport", "nnlo.backends", "nnlo.models", "nnlo.data",
                "nnlo.observe.session")

PHASES = r"""
import json, sys, time
t = {}
t0 = time.perf_counter()
from nnlo.config import TrainConfig
from nnlo.models import data_plan, load_model_source
from nnlo.backends import make_backend
from nnlo.data import H5Dataset
import numpy as np
t["nnlo modules"] = time.perf_counter() - t0
t0 = time.perf_counter()
import torch
t["import torch"] = time.perf_counter() - t0
cfg = TrainConfig(model=sys.argv[1], train=sys.argv[2], loss="categorical_crossentropy", batch=100)
t0 = time.perf_counter()
source = load_model_source(cfg.model)
model = source.build()
t["model module + build"] = time.perf_counter() - t0
t0 = time.perf_counter()
backend = make_backend(model, cfg, "cpu")
t["backend (optimizer: imports torch._dynamo)"] = time.perf_counter() - t0
t0 = time.perf_counter()
plan = data_plan(cfg, source, need=("train",))
data = H5Dataset(plan.train, features=plan.features, labels=plan.labels, preload=False)
t["data open"] = time.perf_counter() - t0
t0 = time.perf_counter()
x, y = data.read(np.arange(min(100, len(data))))
backend.train_on_batch(x, y)
t["first batch"] = time.perf_counter() - t0
print(json.dumps(t))
"""

MPI_INIT = r"""
import time
t0 = time.perf_counter()
from mpi4py import MPI
MPI.COMM_WORLD.Barrier()
dt = MPI.COMM_WORLD.allreduce(time.perf_counter() - t0, op=MPI.MAX)
if MPI.COMM_WORLD.Get_rank() == 0:
    print(dt)
"""


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="one repeat, a tenth of the data (smoke test)")
    p.add_argument("--out", help="result JSON path (default bench/results/startup.json)")
    a = p.parse_args(argv)
    if a.quick:
        a.repeats = 1
    return a


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = f"{REPO}{os.pathsep}{e.get('PYTHONPATH', '')}".rstrip(os.pathsep)
    e["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{e.get('PATH', '')}"
    e.setdefault("OMP_NUM_THREADS", "1")
    return e


def wall(cmd: list[str], **kw: Any) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    run = subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=600, **kw)
    if run.returncode != 0:
        raise SystemExit(f"startup: {' '.join(cmd[:6])} failed ({run.returncode}):\n{run.stderr[-2000:]}")
    return time.perf_counter() - t0, run


def importtime(stderr: str) -> dict[str, Any]:
    """Top-level imports (cumulative seconds) from ``-X importtime`` output, and every module's name."""
    top: dict[str, float] = {}
    names = set()
    for line in stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)", line)
        if not m:
            continue
        names.add(m.group(4))
        if len(m.group(3)) == 1:  # one space: a top-level import
            top[m.group(4)] = top.get(m.group(4), 0.0) + int(m.group(2)) / 1e6
    return {"total_s": sum(top.values()), "top": dict(sorted(top.items(), key=lambda kv: -kv[1])[:8]),
            "modules": names}


def write_data(folder: Path, quick: bool = False) -> dict[str, Path]:
    return write_blobs(folder, n_train=200 if quick else 2000, n_val=20 if quick else 200, files=2)


def end_to_end(work: Path, data: dict[str, Path], i: int) -> dict[str, Any]:
    cmd = [str(Path(sys.executable).parent / "nnlo"), "train", "-n", "3", "--model", str(MODEL),
           "--train", str(data["train"]), "--val", str(data["val"]), "--epochs", "1", "--timeline",
           "--trial-name", f"startup{i}"]
    e = env()
    e["PYTHONPROFILEIMPORTTIME"] = "1"  # every rank prints -X importtime to stderr
    t_start = time.time()
    t0 = time.perf_counter()
    run = subprocess.run(cmd, capture_output=True, text=True, env=e, cwd=work, timeout=600)
    total = time.perf_counter() - t0
    if run.returncode != 0:
        raise SystemExit(f"startup: nnlo train -n 3 failed ({run.returncode}):\n{run.stderr[-3000:]}")
    timeline = json.loads((work / "nnlo-runs" / f"startup{i}" / "timeline.json").read_text())
    firsts = [ev["ts"] / 1e6 for ev in timeline["traceEvents"]
              if ev.get("ph") == "X" and ev.get("name") in ("read batch", "train batch")]
    imports = importtime(run.stderr)
    return {"total_s": total, "to_first_batch_s": min(firsts) - t_start if firsts else None,
            "forbidden_imported": sorted({m for m in imports["modules"] if m.split(".")[0] in FORBIDDEN}),
            "top_imports_all_ranks_s": imports["top"]}


def main(argv: list[str]) -> int:
    a = parse(argv)
    load0 = os.getloadavg()
    py = sys.executable
    with tempfile.TemporaryDirectory(prefix="nnlo-startup-") as tmp:
        work = Path(tmp)
        data = write_data(work / "data", a.quick)
        samples: dict[str, list[float]] = {}
        e2e = []
        top_imports: dict[str, Any] = {}

        def add(name: str, value: float) -> None:
            samples.setdefault(name, []).append(value)

        for i in range(a.repeats):
            add("interpreter (python -c pass)", wall([py, "-c", "pass"])[0])
            _, run = wall([py, "-X", "importtime", "-c", "import nnlo_sched.cli, nnlo_sched.commands.train"])
            it = importtime(run.stderr)
            add("command-line imports", it["total_s"])
            top_imports["command line"] = it["top"]
            _, run = wall([py, "-X", "importtime", "-c", "import " + ", ".join(RANK_MODULES)])
            it = importtime(run.stderr)
            add("rank imports (nnlo, mpi4py, numpy, h5py)", it["total_s"])
            top_imports["rank"] = it["top"]
            forbidden_rank = sorted({m for m in it["modules"] if m.split(".")[0] in FORBIDDEN + ("torch",)})
            _, run = wall([C.mpirun(), "-np", "3", py, "-c", MPI_INIT])
            add("MPI start-up (3 ranks: import mpi4py.MPI + barrier)", float(run.stdout.strip().splitlines()[-1]))
            _, run = wall([py, "-c", PHASES, str(MODEL), str(data["train"])])
            for k, v in json.loads(run.stdout.strip().splitlines()[-1]).items():
                add(k, v)
            e2e.append(end_to_end(work, data, i))

    result = {
        "what": "nnlo train -n 3 (tiny torch model, HDF5 data): command to first batch, and each phase alone",
        "target": "measured and broken down; nothing imported that the run does not use (no TensorFlow for "
                  "torch models, no plotting, no skopt for training)",
        "end_to_end": {
            "total_s": C.summary([r["total_s"] for r in e2e]),
            "to_first_batch_s": C.summary([r["to_first_batch_s"] for r in e2e if r["to_first_batch_s"]]),
            "forbidden_imported": sorted({m for r in e2e for m in r["forbidden_imported"]}),
            "top_imports_all_ranks_s": e2e[-1]["top_imports_all_ranks_s"],
        },
        "phases_s": {k: C.summary(v) for k, v in samples.items()},
        "rank_imports_without_a_model": forbidden_rank,  # the rank's modules import no framework by themselves
        "top_imports_s": top_imports,
    }
    print(report(result))
    C.write_result(NAME, result, a.out, argv=argv, started_load=load0)
    return 0


def report(r: dict[str, Any]) -> str:
    e = r["end_to_end"]
    rows = [[k, C.fmt_time(v["median"]), f"{C.fmt_time(v['min'])}-{C.fmt_time(v['max'])}"]
            for k, v in r["phases_s"].items()]
    rows.append(["**nnlo train -n 3: to the first batch**", C.fmt_time(e["to_first_batch_s"]["median"]),
                 f"{C.fmt_time(e['to_first_batch_s']['min'])}-{C.fmt_time(e['to_first_batch_s']['max'])}"])
    rows.append(["nnlo train -n 3: whole run (1 epoch)", C.fmt_time(e["total_s"]["median"]),
                 f"{C.fmt_time(e['total_s']['min'])}-{C.fmt_time(e['total_s']['max'])}"])
    out = [C.table(rows, ["phase", "median", "range"])]
    out.append("imported by the ranks of the real run from " + ", ".join(FORBIDDEN) + ": "
               + (", ".join(e["forbidden_imported"]) or "none"))
    tops = e["top_imports_all_ranks_s"]
    out.append("slowest top-level imports (all ranks' -X importtime together): "
               + ", ".join(f"{k} {C.fmt_time(v)}" for k, v in list(tops.items())[:6]))
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
