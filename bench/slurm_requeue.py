#!/usr/bin/env python
"""Benchmark 5b: on a real (private, single-node) Slurm, seconds from a job's walltime end to the successor's
training resuming - nnlo's checkpoint-restart chain against submitit's requeue path on the same Slurm.

* **nnlo**: ``nnlo submit --walltime 1 train ...`` (a real ``nnlo train``, 1 master + 1 worker, started by
  MPICH's ``mpirun`` inside the allocation). The chain queues the successor with ``afterany`` while the job runs; the job stops itself
  before its limit with a checkpoint (exit 75), the successor starts and restores. Measured: the first
  job's end (``nnlo job end`` in its batch script), the successor's start, and the successor's
  ``restoring from`` log line (training resumes right after it).
* **submitit**: a ``submitit.helpers.Checkpointable`` job with ``timeout_min=1``: Slurm signals it before
  the limit, submitit pickles the callable and ``scontrol requeue``s the job; the requeued job unpickles
  and calls it again. Measured: the signal (the ``checkpoint`` call), and the callable running again.

Both clocks are the same machine's, so the differences are direct. Needs root (the harness starts its own
munged, slurmctld and slurmd in a temporary folder; ``bench/private_slurm.py``, the tests' harness too) and
takes ~3 minutes; ``bench/run.sh`` runs it only when named. Where Slurm cannot start, the JSON says why and
nothing is timed. ``--quick`` (the smoke test) starts the private Slurm, asks its version and stops it: a
Slurm walltime is a minute at least, so nothing is timed.

    bench/run.sh slurm_requeue
    bench/run.sh slurm_requeue --quick      # smoke test: the harness only
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import _common as C
from private_slurm import SlurmCluster, SlurmUnavailable

NAME = "slurm_requeue"


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--skip", nargs="*", default=[], choices=["nnlo", "submitit"],
                   help="sides not to run; their last successful result is carried over from the result file")
    p.add_argument("--timeout", type=float, default=420, help="seconds to wait for each side")
    p.add_argument("--safety", type=float, default=20,
                   help="NNLO_DEADLINE_SAFETY for the nnlo jobs: seconds kept free before the limit for "
                        "stopping and leaving (nnlo's default is 10; a busy 2-core node needs more)")
    p.add_argument("--quick", action="store_true",
                   help="smoke test: start the private Slurm, ask its version, stop it; nothing timed")
    p.add_argument("--keep", action="store_true", help="keep the temporary folder (runs, logs) for inspection")
    p.add_argument("--out", help="result JSON path (default bench/results/slurm_requeue.json)")
    return p.parse_args(argv)


def wait_for(what: str, ready: Callable[[], Any], timeout: float, every: float = 0.25) -> Any:
    end = time.monotonic() + timeout
    while True:
        value = ready()
        if value:
            return value
        if time.monotonic() > end:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)


def nnlo_cli(env: dict[str, str], *args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "nnlo_sched", *args], env=env, capture_output=True, text=True,
                          timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"nnlo {' '.join(args[:2])} exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
    return proc.stdout


STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z .*restoring from")


def restore_times(run_dir: Path) -> list[float]:
    out = []
    for log in run_dir.rglob("*.log"):
        for line in log.read_text(errors="replace").splitlines():
            m = STAMP.match(line)
            if m:
                out.append(datetime.fromisoformat(m.group(1) + "+00:00").timestamp())
    return sorted(set(out))


def nnlo_side(slurm: Any, tmp: Path, a: argparse.Namespace) -> dict[str, Any]:
    clusters = tmp / "clusters"
    clusters.mkdir()
    # pip MPICH's own mpirun (hydra) inside the allocation, one thread per rank, as the chain test does: with
    # `srun --mpi=pmi2` the first MPI step of a fresh private cluster sometimes fails in MPI_Init (UCX
    # address exchange), and then srun leaves the other rank running until the time limit
    (clusters / "benchslurm.toml").write_text(
        'scheduler = "slurm"\nlauncher = "mpirun"\nlauncher_command = "auto"\ncores_per_node = 2\n'
        f'nodes = 1\npython = "{sys.executable}"\nsetup = ["export NNLO_DEADLINE_SAFETY={a.safety:g}"]\n')
    data = tmp / "data"
    subprocess.run([sys.executable, str(C.REPO / "examples" / "make_synthetic.py"), "--out", str(data),
                    "--samples", "12000", "--features", "32", "--classes", "4", "--files", "2"],
                   check=True, capture_output=True, timeout=300)
    env = dict(slurm.env, NNLO_CLUSTERS=str(clusters), NNLO_HOME=str(tmp / "runs"), OMP_NUM_THREADS="1",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
               PYTHONPATH=str(C.REPO))
    out = nnlo_cli(env, "submit", "--cluster", "benchslurm", "--workers", "1", "--walltime", "1", "--name", "req",
                   "train", "--model", str(C.REPO / "examples" / "mlp_torch.py"), "--train", str(data / "data.list"),
                   "--epochs", "200", "--batch", "50", "--mode", "downpour", "--synchronous", "--checkpoint-interval", "1")
    run_id = out.split()[2]

    def view() -> dict[str, Any]:
        return json.loads(nnlo_cli(env, "status", run_id, "--json"))

    def resumed(v: dict[str, Any]) -> bool:
        started = [j for j in v["jobs"] if j["started_at"]]
        if len(started) < 2 or not restore_times(Path(v["dir"])):
            return False
        stamps = startup_stamps(Path(v["dir"]))
        return stamps.get("first_update", 0) >= started[1]["started_at"]

    try:
        v = wait_for("the successor job to restore", lambda: (
            ((v := view())["state"] == "failed" and {"failed": v}) or (resumed(v) and v)),
            a.timeout, every=1.0)
    finally:
        subprocess.run([sys.executable, "-m", "nnlo_sched", "cancel", run_id], env=env, capture_output=True,
                       timeout=120)
    if "failed" in v:
        raise RuntimeError(f"the nnlo run failed: {v['failed'].get('error')}")
    first, second = [j for j in v["jobs"] if j["started_at"]][:2]
    restored = [t for t in restore_times(Path(v["dir"])) if t >= second["started_at"] - 1]
    stamps = startup_stamps(Path(v["dir"]))
    return {
        "first_job": {"id": first["job_id"], "status": first["status"], "rc": first["rc"]},
        "job_end_to_successor_start_s": second["started_at"] - first["ended_at"],
        "job_end_to_training_resumed_s": restored[0] - first["ended_at"],
        "successor_start_to_training_resumed_s": restored[0] - second["started_at"],
        "job_end_to_first_update_s": stamps["first_update"] - first["ended_at"],
        "breakdown_s": breakdown(first["ended_at"], second["started_at"], stamps),
    }


def startup_stamps(run_dir: Path) -> dict[str, float]:
    """The top rank's start-up stamps of the latest start (``startup.json``, :mod:`nnlo.training.startup`)."""
    try:
        return dict(json.loads((run_dir / "startup.json").read_text())["stamps"])
    except (OSError, ValueError, KeyError):
        return {}


#: the resume path's phases: (label, stamp where the phase ends); each begins where the previous ended
PHASES = (
    ("Slurm starts the successor, batch shell, `nnlo job start` interpreter and imports", "job_start"),
    ("`nnlo job start` bookkeeping and successor submission, mpirun launches the ranks", "process_start"),
    ("rank: interpreter, CLI and library imports, MPI init", "train_called"),
    ("configuration checked, roles", "checked"),
    ("session, model module (imports torch)", "model_source"),
    ("model, backend (optimizer), data opened", "built"),
    ("newest checkpoint found", "restore_found"),
    ("checkpoint parts loaded", "role_ready"),
    ("initial weights broadcast", "weights_shared"),
    ("first batch trained and applied (first update at the master)", "first_update"),
)


def breakdown(prev_end: float, job_start: float, stamps: dict[str, float]) -> list[dict[str, Any]]:
    """Seconds per phase from the predecessor's end to the first update."""
    times = dict(stamps, job_start=job_start)
    out, last = [], prev_end
    for label, key in PHASES:
        if key in times:
            out.append({"phase": label, "ends_at": key, "seconds": round(times[key] - last, 3)})
            last = times[key]
    return out


def submitit_side(slurm: Any, tmp: Path, a: argparse.Namespace) -> dict[str, Any]:
    import submitit

    sys.path.insert(0, str(C.BENCH_DIR / "models"))
    from resumable import Resumable

    log = tmp / "submitit-events.jsonl"
    old = {k: os.environ.get(k) for k in ("SLURM_CONF", "PYTHONPATH")}
    os.environ["SLURM_CONF"] = slurm.env["SLURM_CONF"]
    # sbatch exports this environment to the job: there the payload's module must import too
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(C.BENCH_DIR / "models"), str(C.REPO),
                                                           old["PYTHONPATH"]) if p)
    try:
        ex = submitit.AutoExecutor(folder=str(tmp / "submitit"), cluster="slurm")
        # signal 20 s before the 1-minute limit (submitit's default lead, 90 s, exceeds the whole job)
        ex.update_parameters(timeout_min=1, slurm_signal_delay_s=20, slurm_additional_parameters={})
        job = ex.submit(Resumable(str(log)))

        def events() -> list[dict[str, Any]]:
            return [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []

        try:
            ev = wait_for("the requeued submitit job to start again",
                          lambda: (e := events()) and sum(x["event"] == "start" for x in e) >= 2 and e, a.timeout)
            # why the requeued job waited: Slurm's own times for it (Restarts, EligibleTime, StartTime)
            shown = slurm.run("scontrol", "show", "job", str(job.job_id), check=False).stdout
            times = {k: v for k, v in re.findall(r"\b(Restarts|SubmitTime|EligibleTime|StartTime)=(\S+)", shown)}
        finally:
            job.cancel(check=False)
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    starts = [x["t"] for x in ev if x["event"] == "start"]
    signal = next(x["t"] for x in ev if x["event"] == "signal")
    return {"job": job.job_id, "signal_to_code_running_again_s": starts[1] - signal,
            "first_start_to_signal_s": signal - starts[0], "submitit": submitit.__version__,
            "signal_utc": datetime.fromtimestamp(signal, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S"),
            "slurm_times_of_requeued_job": times}


def earlier_side(out: str | None, side: str) -> dict[str, Any] | None:
    """A skipped side's result from the previous result file (each side takes minutes), marked as such."""
    path = Path(out) if out else C.RESULTS / f"{NAME}.json"
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    got = old.get(side)
    if not isinstance(got, dict) or "error" in got:
        return None
    return dict(got, carried_from_run_at=got.get("carried_from_run_at") or old.get("when_utc"))


def main(argv: list[str]) -> int:
    a = parse(argv)
    load0 = os.getloadavg()
    result: dict[str, Any] = {"what": "walltime end -> successor's training resuming: nnlo chain vs submitit "
                                      "requeue, on a private single-node Slurm", "nnlo_deadline_safety_s": a.safety}
    try:
        slurm = SlurmCluster.start()
    except SlurmUnavailable as e:
        result["skipped"] = str(e)
        print(f"slurm_requeue: not run: {e}")
        C.write_result(NAME, result, a.out, argv=argv, mpi=False, started_load=load0)
        return 0
    try:
        result["slurm"] = slurm.run("sinfo", "--version").stdout.strip()
        if a.quick:
            result["quick"] = "the private Slurm started and answered; no side run (a walltime is a minute at least)"
        tmp = tempfile.mkdtemp(prefix="nnlo-bench-requeue-", dir="/tmp")
        os.chmod(tmp, 0o755)
        try:
            for side, fn in () if a.quick else (("nnlo", nnlo_side), ("submitit", submitit_side)):
                if side in a.skip:
                    carried = earlier_side(a.out, side)
                    if carried is not None:
                        result[side] = carried
                    continue
                sub = Path(tmp) / side
                sub.mkdir()
                try:
                    result[side] = fn(slurm, sub, a)
                except Exception as e:  # noqa: BLE001 - record why one side failed, keep the other
                    result[side] = {"error": f"{type(e).__name__}: {e}"}
                print(f"  {side}: {json.dumps(result[side])}", flush=True)
        finally:
            if a.keep:
                print(f"kept {tmp}")
            else:
                shutil.rmtree(tmp, ignore_errors=True)
    finally:
        slurm.stop()
    C.write_result(NAME, result, a.out, argv=argv, mpi=False, started_load=load0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
