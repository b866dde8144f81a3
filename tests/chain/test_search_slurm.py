"""Reliability of one search across many jobs on the private test Slurm: three concurrent chains started as a
job array, each job stopped after a few trials of its own (``NNLO_TEST_SIGNAL_AT_TRIAL``: the real signal path,
forced rather than raced against a short walltime) so that every chain resubmits itself, and participants
killed mid-job (``scancel``, once with SIGKILL so that no bookkeeping runs and a lease must expire). The search
must finish with exactly the requested number of completed trials, no trial id twice, every result in the
journal, and the final state equal to the one rebuilt from the journal.

It runs the real ``nnlo optimize --shared`` (Branin through the objective hook, ranks started by mpirun).
"""
from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

import pytest
from tests.helpers.chain import nnlo, status_view, wait_for

pytestmark = [pytest.mark.slurm]
REPO = Path(__file__).resolve().parents[2]
TRIALS = 42
PER_JOB = 4  # trials a job reports before it stops itself


def _journal_results(path: Path) -> list[int]:
    """The trial ids of the journal's result records, in order (the runtime's reader: checksums checked)."""
    from nnlo.optimize.journal import read_journal

    return [rec["id"] for rec in read_journal(path.parent)[0] if rec.get("kind") == "result"]


def _rebuilt_matches(search_dir: Path) -> None:
    """The final optimizer state equals the one rebuilt from the journal (the runtime's
    ``rebuilt_engine_state``), and trials.csv holds exactly the journal's results."""
    from nnlo.optimize.shared import rebuilt_engine_state

    final = search_dir / "optimizer-state.json"
    assert json.loads(final.read_text())["engine_state"] == rebuilt_engine_state(search_dir)
    import csv

    with open(search_dir / "trials.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    key = next(k for k in ("trial", "trial_id", "id") if rows and k in rows[0])
    assert sorted(int(r[key]) for r in rows) == sorted(_journal_results(search_dir / "search-journal.jsonl"))


def _own_results(search_dir: Path) -> dict[str, tuple[float, int]]:
    """Per participant: (when its latest ``join`` was written, trial results it reported since): the progress of
    its current job once that job's coordinator has joined."""
    from nnlo.optimize.journal import read_journal

    seen: dict[str, tuple[float, int]] = {}
    for rec in read_journal(search_dir, final=False)[0]:
        if rec.get("kind") == "join":
            seen[rec["p"]] = (float(rec.get("t", 0.0)), 0)
        elif rec.get("kind") == "result" and rec["p"] in seen:
            seen[rec["p"]] = (seen[rec["p"]][0], seen[rec["p"]][1] + 1)
    return seen


def _mid_job(job: dict, progress: tuple[float, int] | None) -> bool:
    """The job's coordinator joined after the job started (its handlers are in place) and has reported a trial
    of its own, but not all it reports before it stops itself."""
    return progress is not None and progress[0] >= job["started_at"] and 1 <= progress[1] < PER_JOB


@pytest.mark.timeout(400)
def test_three_chains_with_random_kills_finish_the_search_exactly(slurm, chain_env, monkeypatch):
    clusters = chain_env / "clusters"
    (clusters / "srch.toml").write_text('scheduler = "slurm"\nlauncher = "mpirun"\nlauncher_command = "auto"\n'
                                        f'cores_per_node = 3\nnodes = 1\npython = "{sys.executable}"\n')
    # sbatch passes the environment on to the jobs: a trial lasts at least 1 s, and every job stops (exit 75, as
    # at its walltime) after 4 trials of its own, so the 42 trials need many jobs on any machine
    monkeypatch.setenv("BRANIN_SLEEP", "1.0")
    monkeypatch.setenv("NNLO_TEST_SIGNAL_AT_TRIAL", str(PER_JOB))
    inner = ["--model", str(REPO / "examples" / "branin.py"), "--hyper-opt", "random",
             "--num-iterations", str(TRIALS), "--lease-timeout", "8", "--seed", "5"]
    out = nnlo("submit", "--no-check", "--cluster", "srch", "--jobs", "3", "--walltime", "10", "--name", "srch",
               "--directive", "--oversubscribe",  # 3 jobs x 3 ranks on the 8 CPUs of the test node
               "optimize", *inner).stdout
    assert out.startswith("submitted search srch-"), out
    run_id = out.split()[2]
    search_dir = Path(status_view(run_id)["dir"])
    assert "#SBATCH --array=0-2" in (search_dir / "array.sh").read_text()

    def view() -> dict:
        return status_view(run_id)

    rng = random.Random(18)
    kills: list[str] = []
    end = time.monotonic() + 330
    while True:
        v = view()
        if v["state"] not in ("queued", "running", "resubmitting"):
            break
        assert time.monotonic() < end, f"the search did not end: {json.dumps(v)[-3000:]}"
        # a victim is mid-job: it has reported a trial of its own and has more to do before its stop
        own = _own_results(search_dir)
        running = [j["job_id"] for c in v["chains"] for j in c["jobs"] if j["status"] == "running"
                   and j["started_at"] and j["job_id"] not in kills
                   and _mid_job(j, own.get(c["run_id"].rsplit("/", 1)[1]))]
        if len(kills) < 3 and running:
            victim = rng.choice(running)
            signal = ["-b", "-s", "KILL"] if len(kills) == 1 else []  # the batch shell: no `job end` runs
            slurm.run("scancel", *signal, victim)
            kills.append(victim)
        time.sleep(0.5)

    assert v["state"] == "done", v["error"] + "\n" + nnlo("logs", run_id).stdout[-4000:]
    assert len(kills) == 3
    results = _journal_results(search_dir / "search-journal.jsonl")
    assert len(results) == TRIALS and len(set(results)) == TRIALS, "exactly the budget, no trial id twice"
    _rebuilt_matches(search_dir)
    assert v["progress"]["trials_done"] == TRIALS
    jobs = [j for c in v["chains"] for j in c["jobs"]]
    started = [j for j in jobs if j["started_at"]]
    # a job reports at most PER_JOB + 1 trials (the one of its block running at the stop is collected)
    assert len(started) >= -(-TRIALS // (PER_JOB + 1)) and sum(j["status"] == "walltime" for j in started) >= 3
    for c in v["chains"]:  # every chain went on after its walltime or its kill
        said = (c["run_id"], c["state"], c.get("error"), [(j["job_id"], j["status"], j["rc"]) for j in c["jobs"]])
        assert c["state"] == "done" and sum(1 for j in c["jobs"] if j["started_at"]) >= 2, said
        first = c["jobs"][0]["job_id"]
        assert "_" in first  # an array task, and its successor waited for that task alone
        assert c["jobs"][1]["depends_on"] == first
    wait_for("every job to leave the queue", lambda: not slurm.run(
        "squeue", "-h", "-j", ",".join(j["job_id"] for j in jobs), check=False).stdout.strip(), timeout=60)
    line = next(ln for ln in nnlo("status").stdout.splitlines() if ln.startswith(run_id))
    assert "done" in line and f"{TRIALS}/{TRIALS} trials" in line
    plots = {Path(p).name for p in nnlo("plot", run_id).stdout.split()}  # every participant's trials in one figure
    assert {"convergence.png", "parameters.png"} <= plots and (search_dir / "plots" / "convergence.png").is_file()
