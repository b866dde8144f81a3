"""A stand-in for ``nnlo train`` in the chain-mechanics tests: epochs are sleeps, checkpoints are real.

Run as ``python payload.py RUN_DIR`` by the test profiles' python wrapper in place of
``python -m nnlo_sched run RUN_DIR`` (only rank 0 of the launch works; the others exit at once). It follows
the runtime's contract exactly: it writes complete checkpoints in nnlo's format
(``<run>/checkpoints/ckpt-eNNNN-u00000000/manifest.json``, published by a rename), resumes from the
newest one, stops with exit 75 after a checkpoint before ``NNLO_DEADLINE`` (margin: one epoch) or on
SIGTERM/SIGUSR2, and exits 0 when all epochs are done. The epochs and ``--model-arg epoch_seconds=S`` come
from the run spec's typed record (``spec.json``'s ``config``), as the real job reads it; a model file named
``fail*.py`` makes it fail with exit 1 after one epoch and ``nocheckpoint*.py`` makes it run past its deadline
without writing anything.

Two knobs force what a test would otherwise have to race the clock for (tests pass at any machine speed):
``--model-arg epochs_per_job=K`` stops a job after K epochs of its own exactly as at its deadline (checkpoint
written, exit 75): a walltime forced by count, so a chain needs ceil(epochs / K) jobs on any machine;
``--model-arg hold_at_epoch=K`` makes the job that trains epoch K wait there (checkpoint written) until a stop
signal or a kill ends it, so a test can signal, cancel or kill a job mid-run without the run finishing first.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

run_dir = Path(sys.argv[1])
rank = int(os.environ.get("PMI_RANK") or os.environ.get("SLURM_PROCID") or 0)
spec = json.loads((run_dir / "spec.json").read_text())
config = spec["config"]
epochs = int(config["epochs"])
epoch_s = float(config["model_args"].get("epoch_seconds", 1))
epochs_per_job = int(config["model_args"].get("epochs_per_job", 0))  # 0: no quota
hold_at_epoch = int(config["model_args"].get("hold_at_epoch", 0))  # 0: never hold
model = Path(config["model"]).name
deadline = float(os.environ.get("NNLO_DEADLINE") or 1e18)
stop = {"flag": False}


def on_signal(signum, frame):  # noqa: ARG001
    stop["flag"] = True


for s in (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2):
    signal.signal(s, on_signal)

if rank != 0:  # the launch's other ranks have nothing to do (no MPI here): rank 0 decides the exit status
    sys.exit(0)

ckdir = run_dir / "checkpoints"
done = 0
found = sorted(p for p in ckdir.glob("ckpt-e*") if (p / "manifest.json").is_file()) if ckdir.is_dir() else []
if found:
    done = json.loads((found[-1] / "manifest.json").read_text())["epoch"]
    print(f"payload: restored from {found[-1].name} at epoch {done}", flush=True)
history_file = run_dir / "history.json"
history = json.loads(history_file.read_text())["history"][:done] if history_file.exists() else []


def checkpoint(epoch: int) -> None:
    if model.startswith("nocheckpoint"):
        return
    tmp = ckdir / f".tmp-{epoch}-{os.getpid()}"
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "manifest.json").write_text(json.dumps({"format": 1, "epoch": epoch, "updates": 0,
                                                   "written": time.time()}))
    os.replace(tmp, ckdir / f"ckpt-e{epoch:04d}-u00000000") if not (ckdir / f"ckpt-e{epoch:04d}-u00000000").exists() \
        else None
    (history_file.with_suffix(".tmp")).write_text(json.dumps({"history": history, "best": {"loss": 1.0 / epoch}}))
    os.replace(history_file.with_suffix(".tmp"), history_file)


started_at_epoch = done
while done < epochs:
    if done == hold_at_epoch and done > started_at_epoch:
        print(f"payload: holding at epoch {done} until a stop signal", flush=True)
        while not stop["flag"]:
            time.sleep(0.05)
    if epochs_per_job and done - started_at_epoch >= epochs_per_job:
        print(f"payload: stopping at epoch {done} (deadline: epochs_per_job={epochs_per_job})", flush=True)
        sys.exit(75)
    if stop["flag"] or (time.time() + 1.5 * epoch_s > deadline and not model.startswith("nocheckpoint")):
        print(f"payload: stopping at epoch {done} ({'signal' if stop['flag'] else 'deadline'})", flush=True)
        sys.exit(75)
    end = time.time() + epoch_s
    while time.time() < end:
        time.sleep(0.05)
    done += 1
    history.append({"epoch": done, "loss": 1.0 / done})
    print(f"payload: epoch {done}/{epochs}", flush=True)
    if model.startswith("fail"):
        print("payload: error: the model diverged (NaN loss)", flush=True)
        sys.exit(1)
    checkpoint(done)
print("payload: finished", flush=True)
sys.exit(0)
