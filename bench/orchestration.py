#!/usr/bin/env python
"""Benchmark 5: orchestration - layout and dry-run submission of the full Summit, and status over 1,000 runs.

1. ``nnlo layout --cluster summit --nodes 4608`` (27,648 GPUs filled with workers) and
   ``nnlo submit --dry-run`` of the same, both in-process (click's runner: nnlo's own work) and as a CLI
   process (what a user waits for, Python start-up and imports included). The floor a CLI cannot beat,
   ``python -c pass``, is measured beside it; ``--json`` (one entry per rank) too.
2. ``nnlo status`` over N synthetic Slurm run directories (default 1,000), each with a queued job: the
   ``squeue`` on PATH is a recording stand-in, so the number of scheduler calls is counted, not assumed
   (nnlo asks once per scheduler). The alternative measured beside it is what per-run tools do: one
   ``squeue -j ID`` per job through the same stand-in (measured on a sample, scaled to N).

The third part of this issue's benchmark 5 (seconds from a job's walltime end to its successor resuming
on a real Slurm, against submitit's requeue) is ``bench/slurm_requeue.py`` - it needs root.

    bench/run.sh orchestration
    bench/run.sh orchestration --runs 5000
    bench/run.sh orchestration --quick
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as C

NAME = "orchestration"
LAYOUT_ARGS = ["layout", "--cluster", "summit", "--nodes", "4608"]
SUBMIT_ARGS = ["submit", "--cluster", "summit", "-A", "ABC123", "--nodes", "4608", "-t", "2h", "--dry-run", "--no-check",
               "train", "--model", "m.py", "--train", "train.list", "--val", "val.list"]


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--runs", type=int, default=1000, help="synthetic run directories for nnlo status")
    p.add_argument("--per-job-sample", type=int, default=100,
                   help="per-job squeue calls timed for the alternative (scaled to --runs)")
    p.add_argument("--warmup", type=int, default=1, help="untimed calls before the timed ones")
    p.add_argument("--quick", action="store_true", help="few repeats and runs, no warm-up (smoke test)")
    p.add_argument("--out", help="result JSON path (default bench/results/orchestration.json)")
    a = p.parse_args(argv)
    if a.quick:
        a.repeats, a.runs, a.per_job_sample, a.warmup = 1, 20, 5, 0
    if a.runs < 1 or a.repeats < 1 or a.warmup < 0:
        p.error("--runs and --repeats must be positive, --warmup not negative")
    return a


def cli_proc(args: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "nnlo_sched", *args], capture_output=True, text=True,
                          timeout=600, env=env, cwd=cwd or C.REPO)
    if proc.returncode != 0:
        raise RuntimeError(f"nnlo {' '.join(args[:3])} ... exited {proc.returncode}: "
                           f"{(proc.stderr or proc.stdout).strip().splitlines()[-1:]}")
    return proc


def in_process(args: list[str]) -> str:
    from click.testing import CliRunner

    from nnlo_sched.cli import cli

    res = CliRunner().invoke(cli, args, catch_exceptions=False)
    if res.exit_code != 0:
        raise RuntimeError(f"nnlo {' '.join(args[:3])} ... exited {res.exit_code}: {res.output.strip()[-200:]}")
    return res.output


# -- part 1 ---------------------------------------------------------------------------------------------
def part_layout(a: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="nnlo-bench-orch-") as tmp:
        env = dict(os.environ, NNLO_HOME=str(Path(tmp) / "runs"))
        os.environ["NNLO_HOME"] = env["NNLO_HOME"]
        cases = {"layout": LAYOUT_ARGS, "layout_json": LAYOUT_ARGS + ["--json"], "submit_dry_run": SUBMIT_ARGS}
        text = in_process(LAYOUT_ARGS)
        out["layout_summary_head"] = text.strip().splitlines()[:6]
        doc = json.loads(in_process(LAYOUT_ARGS + ["--json"]))
        ranks = {"world_size": doc.get("world_size"), "rank_entries": len(doc.get("ranks", []))}
        out["ranks_placed"] = ranks
        for name, args in cases.items():
            out[name] = {
                "in_process_s": C.summary(C.timed(lambda: in_process(args), a.repeats, warmup=a.warmup)),
                "cli_s": C.summary(C.timed(lambda: cli_proc(args, env=env, cwd=Path(tmp)), a.repeats, warmup=a.warmup)),
            }
            print(f"  {name:15s} in-process {C.fmt_time(out[name]['in_process_s']['median'])}, "
                  f"CLI {C.fmt_time(out[name]['cli_s']['median'])}", flush=True)
    out["python_startup_s"] = C.summary(C.timed(
        lambda: subprocess.run([sys.executable, "-c", "pass"], check=True), a.repeats, warmup=a.warmup))
    out["nnlo_help_cli_s"] = C.summary(C.timed(lambda: cli_proc(["--help"]), a.repeats, warmup=a.warmup))
    return out


# -- part 2 ---------------------------------------------------------------------------------------------
SQUEUE_STANDIN = """#!/bin/sh
# recording stand-in for squeue: logs its arguments, answers RUNNING for every id given with -j
echo "$*" >> "{log}"
ids=""
while [ $# -gt 0 ]; do
  if [ "$1" = "-j" ]; then ids="$2"; shift; fi
  shift
done
echo "$ids" | tr ',' '\\n' | while read -r id; do [ -n "$id" ] && echo "$id|RUNNING|None"; done
exit 0
"""


def make_runs(home: Path, n: int) -> None:
    """N run directories of a Slurm cluster, each with one queued job: one made by nnlo, the rest copies."""
    from nnlo_sched.profiles.loader import load_profile
    from nnlo_sched.runs import create_run
    from nnlo_sched.spec import RunSpec
    from nnlo_sched.state import JobRecord, read_state, write_state

    profile = load_profile("flatiron")
    spec = RunSpec.from_argv("train", ["--model", "m.py", "--train", "t.list", "--epochs", "10"], "flatiron",
                   name="bench", walltime_s=3600, workers=2, workdir=str(home))
    first = create_run(spec, profile, home=home)
    st = read_state(first.dir)
    for i in range(n):
        d = first.dir if i == 0 else home / f"bench-{i:05d}"
        if i:
            shutil.copytree(first.dir, d)
        st.run_id = d.name
        st.state = "queued"
        st.jobs = [JobRecord(job_id=str(100000 + i), submitted_at=time.time())]
        write_state(d, st)


def part_status(a: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="nnlo-bench-status-") as tmp:
        tmp_p = Path(tmp)
        home, bindir, log = tmp_p / "runs", tmp_p / "bin", tmp_p / "squeue.log"
        home.mkdir()
        bindir.mkdir()
        sq = bindir / "squeue"
        sq.write_text(SQUEUE_STANDIN.format(log=log))
        sq.chmod(sq.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        t0 = time.perf_counter()
        make_runs(home, a.runs)
        made = time.perf_counter() - t0
        env = dict(os.environ, NNLO_HOME=str(home), PATH=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")

        def status_cli() -> None:
            proc = cli_proc(["status", "--json"], env=env, cwd=tmp_p)
            views = json.loads(proc.stdout)
            if len(views) != a.runs:
                raise RuntimeError(f"nnlo status listed {len(views)} runs, expected {a.runs}")

        log.write_text("")
        times = C.timed(status_cli, a.repeats, warmup=0)
        calls = len(log.read_text().splitlines())
        calls_per_status = calls / a.repeats
        ids_in_first = len(log.read_text().splitlines()[0].split("-j ", 1)[1].split(" ", 1)[0].split(","))

        # the alternative: one squeue per job (what a per-run status tool does), same stand-in
        k = min(a.per_job_sample, a.runs)

        def per_job() -> None:
            for i in range(k):
                subprocess.run(["squeue", "-h", "-t", "all", "-j", str(100000 + i), "-o", "%i|%T|%r"],
                               env=env, capture_output=True, check=True)

        per_job_s = C.timed(per_job, max(1, a.repeats // 2), warmup=0)
    st = C.summary(times)
    per_call = min(per_job_s) / k
    res = {
        "runs": a.runs, "setup_s": made,
        "status_cli_s": st,
        "scheduler_calls_per_status": calls_per_status,
        "job_ids_in_the_one_call": ids_in_first,
        "per_job_alternative": {"sample_jobs": k, "seconds_per_call": per_call,
                                "estimated_s_for_all_runs": per_call * a.runs, "scheduler_calls": a.runs},
        "alternative_over_nnlo": per_call * a.runs / st["median"],
    }
    print(f"  nnlo status over {a.runs} runs: {C.fmt_time(st['median'])}, {calls_per_status:g} squeue call(s); "
          f"one squeue per job: ~{per_call * a.runs:.2f} s ({a.runs} calls)", flush=True)
    return res


def main(argv: list[str]) -> int:
    a = parse(argv)
    load0 = os.getloadavg()
    result = {"what": "nnlo layout / submit --dry-run on the full Summit; nnlo status over many runs",
              "layout": part_layout(a), "status": part_status(a)}
    C.write_result(NAME, result, a.out, argv=argv, mpi=False, started_load=load0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
