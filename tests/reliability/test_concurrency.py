"""Concurrency: jobs updating one run's state while ``nnlo status`` and ``nnlo cancel`` run, and several
submissions at once. Nothing may be torn (every read parses) and nothing lost (every update is there)."""
from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.helpers.faults import REPO, nnlo, nnlo_argv, submitted_run, subprocess_env, write_standin

pytestmark = [pytest.mark.slow]

UPDATERS, UPDATES = 6, 25

UPDATER = """
import sys, time
from pathlib import Path
from nnlo_sched.state import JobRecord, update_state
run, who, n = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
for i in range(n):
    with update_state(run) as st:
        st.jobs.append(JobRecord(job_id=f"{who}-{i}", submitted_at=time.time(), status="finished"))
"""


def test_updates_status_and_cancel_at_once_lose_nothing(site: Path) -> None:
    run = submitted_run(site)
    write_standin(site / "bin", "squeue", 'echo "4242|RUNNING|None"')
    env = subprocess_env(PYTHONPATH=str(REPO))
    updaters = [subprocess.Popen([sys.executable, "-c", UPDATER, str(run), f"w{k}", str(UPDATES)], env=env,
                                 stderr=subprocess.PIPE, text=True) for k in range(UPDATERS)]
    torn: list[str] = []
    reads = [0]
    stop = threading.Event()

    def reader() -> None:  # a reader that never takes the lock must never see half a file
        while not stop.is_set():
            try:
                json.loads((run / "state.json").read_text())
                reads[0] += 1
            except ValueError as e:
                torn.append(str(e))

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        views = [nnlo("status", run.name, "--json") for _ in range(2)]
        cancel = nnlo("cancel", run.name)
        views.append(nnlo("status", "--json"))
        codes = [u.wait(timeout=300) for u in updaters]
    finally:
        stop.set()
        thread.join()
    assert codes == [0] * UPDATERS, [u.stderr.read() for u in updaters]
    assert cancel.returncode == 0, cancel.stderr
    for view in views:
        assert view.returncode == 0 and "Traceback" not in view.stderr, view.stderr
        json.loads(view.stdout)
    assert not torn and reads[0] > 0, torn[:3]
    state = json.loads((run / "state.json").read_text())
    ids = [j["job_id"] for j in state["jobs"]]
    assert sorted(i for i in ids if i.startswith("w")) == sorted(f"w{k}-{i}" for k in range(UPDATERS)
                                                                 for i in range(UPDATES))
    assert "4242" in ids and state["state"] == "cancelled"
    assert not (run / ".state.lock").exists()


def test_several_submissions_at_once_get_separate_runs(site: Path) -> None:
    write_standin(site / "bin", "sbatch", f"""
exec 9>"{site}/sbatch.lock"; flock 9
n=$(cat "{site}/sbatch.next" 2>/dev/null || echo 5000); echo $((n + 1)) > "{site}/sbatch.next"
echo "Submitted batch job $n"
""")
    procs = [subprocess.Popen(nnlo_argv("submit", "-c", "fakeslurm", "--name", "same", "-t", "5m", "--workers", "1", "--no-check",
                                        "train", "--model", "model.py", "--epochs", "1"),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(5)]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    assert [rc for rc, _ in results] == [0] * 5, results
    runs = sorted(p for p in (site / "runs").iterdir() if p.is_dir())
    assert len(runs) == 5, runs
    jobs = sorted(json.loads((r / "state.json").read_text())["jobs"][0]["job_id"] for r in runs)
    assert jobs == [str(5000 + k) for k in range(5)]
