"""One search across many jobs, the submission side (nnlo_sched/search.py): ``nnlo submit --jobs K`` and
``--join``, job arrays on Slurm/LSF/PBS, and status / cancel / logs / wait over every chain.

The local scheduler runs a whole search for real (three chains whose jobs each stop after a few trials, as at
a walltime, so that every chain resubmits itself; each participant the stand-in ``search_payload.py`` sharing
one toy journal); LSF and PBS go through their
rendered array scripts and the recording stand-ins for bsub/bjobs/bkill and qsub/qstat/qdel
(``standin_batch.py``), the test playing the batch system."""
from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tests.helpers.chain import CHAIN as HERE, wait_for
from tests.helpers.standins import install as install_standins

from nnlo.contract import CHAINS_DIR
from nnlo_sched.chain import job_start
from nnlo_sched.state import read_state
from tests.sched.cli_runner import run as run_cli

STANDIN = HERE / "standin_batch.py"
SEARCH_PYTHON = HERE / "fake_python_search.sh"


class _Done:
    def __init__(self, code: int, out: str, err: str) -> None:
        self.returncode, self.stdout, self.stderr = code, out, err


@pytest.fixture
def cli(capsys):
    """``nnlo ...`` in this process (subprocesses would cost seconds each on a loaded machine)."""
    def nnlo(*args: str, check: bool = True) -> _Done:
        done = _Done(*run_cli(capsys, *args))
        if check and done.returncode != 0:
            raise AssertionError(f"nnlo {' '.join(args)} exited {done.returncode}: {done.stderr}")
        return done
    return nnlo


@pytest.fixture
def search_env(chain_env):
    clusters = chain_env / "clusters"
    (clusters / "srchlocal.toml").write_text(f'extends = "local"\npython = "{SEARCH_PYTHON}"\n')
    (clusters / "srchslurm.toml").write_text(
        'scheduler = "slurm"\nlauncher = "srun"\ncores_per_node = 8\nnodes = 1\nsignal = "USR2"\n'
        f'signal_lead_s = 20\npython = "{SEARCH_PYTHON}"\n')
    (clusters / "srchlsf.toml").write_text(
        'scheduler = "lsf"\nlauncher = "mpirun"\nlauncher_command = "auto"\ncores_per_node = 8\nnodes = 1\n'
        f'python = "{SEARCH_PYTHON}"\n')
    (clusters / "srchpbs.toml").write_text(
        'scheduler = "pbs"\nlauncher = "mpirun"\nlauncher_command = "auto"\ncores_per_node = 8\nnodes = 1\n'
        f'python = "{SEARCH_PYTHON}"\n')
    (chain_env / "model.py").write_text("# the stand-in payload never imports it\n")
    return chain_env


@pytest.fixture
def standins(search_env, monkeypatch):
    return install_standins(search_env, STANDIN, monkeypatch)


def one_error(done) -> bool:
    """A refusal: exit 2 and one error line (notes aside), never a traceback."""
    lines = [ln for ln in done.stderr.splitlines() if not ln.startswith("nnlo: note:")]
    return done.returncode == 2 and len(lines) == 1 and lines[0].startswith("nnlo: error:")


def calls(state: Path, prog: str) -> list[dict]:
    path = state / "calls.jsonl"
    return [c for c in map(json.loads, path.read_text().splitlines() if path.exists() else []) if c["prog"] == prog]


def inner(trials: int = 12, trial_s: float = 0.4) -> list[str]:
    return ["optimize", "--model", "model.py", "--num-iterations", str(trials), "--model-arg",
            f"trial_seconds={trial_s}"]


def submit(nnlo, *args: str) -> str:
    """``nnlo submit ...`` for real; the search run's id."""
    out = nnlo("submit", "--no-check", *args).stdout
    assert out.startswith("submitted search "), out
    return out.split()[2]


def view(nnlo, run_id: str) -> dict:
    return json.loads(nnlo("status", run_id, "--json").stdout)


def journal_results(search_dir: Path) -> list[int]:
    recs = [json.loads(ln)["rec"] for ln in (search_dir / "search-journal.jsonl").read_text().splitlines()]
    return [r["id"] for r in recs if r["kind"] == "result"]


# -- a whole search on the local scheduler -------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(180)
def test_three_local_chains_resubmit_and_finish_the_budget_exactly(search_env, cli):
    nnlo = cli
    # each job stops as at its deadline after 4 trials of its own (forced by count, not raced against a short
    # walltime): 30 trials need at least 8 jobs of the 3 chains on any machine
    run_id = submit(nnlo, "--cluster", "srchlocal", "--jobs", "3", "--walltime", "10m",
                    *inner(trials=30, trial_s=0.2), "--model-arg", "trials_per_job=4")
    search_dir = Path(os.environ["NNLO_HOME"]) / run_id
    first = view(nnlo, run_id)
    assert first["search"] and [c["run_id"] for c in first["chains"]] == [f"{run_id}/c{i}" for i in range(3)]
    for i in range(3):  # each chain's jobs take part as their chain, all in the search's folder
        script = (search_dir / "chains" / f"c{i}" / "job.sh").read_text()
        assert f"export NNLO_PARTICIPANT=c{i}" in script
        spec = json.loads((search_dir / "chains" / f"c{i}" / "spec.json").read_text())
        assert spec["search"]["output"] == str(search_dir)
    wait = subprocess.run([sys.executable, "-m", "nnlo_sched", "wait", run_id, "--every", "0.5", "--timeout", "150"],
                          capture_output=True, text=True, timeout=170)
    final = view(nnlo, run_id)
    assert wait.returncode == 0, wait.stdout + wait.stderr + json.dumps(final, indent=1)[-3000:]
    assert final["state"] == "done"
    results = journal_results(search_dir)
    assert sorted(results) == list(range(30)), "every trial once, none twice, none lost"
    rows = (search_dir / "trials.csv").read_text().splitlines()[1:]
    assert sorted(int(r.split(",")[0]) for r in rows) == list(range(30))  # trials.csv = the journal's results
    assert final["progress"]["trials_done"] == 30 and final["progress"]["trials_total"] == 30
    assert final["progress"]["best"] == 0.0
    started = [j for c in final["chains"] for j in c["jobs"] if j["started_at"]]
    assert len(started) >= 8, "at most 4 trials a job: the chains resubmitted themselves"
    assert sum(1 for j in started if j["status"] == "walltime") >= 5  # the rest may find the search complete
    assert all(c["state"] == "done" for c in final["chains"])
    assert all(j["status"] not in ("queued", "running") for j in final["jobs"])
    table = nnlo("status").stdout
    line = next(ln for ln in table.splitlines() if ln.startswith(run_id))
    assert "done" in line and "30/30 trials" in line and "c0:" in line and "c2:" in line
    logs = nnlo("logs", run_id).stdout
    assert all(f"==> chains/c{i}/logs/job-" in logs for i in range(3)) and "the search is complete" in logs


# -- arrays, rendered and submitted through the stand-ins ------------------------------------------------------
@pytest.mark.slow
def test_lsf_array_task_chains_on_its_own_element_and_cancel_ends_every_chain(standins, search_env, cli):
    nnlo = cli
    run_id = submit(nnlo, "--cluster", "srchlsf", "--jobs", "3", *inner(trial_s=60))
    search_dir = Path(os.environ["NNLO_HOME"]) / run_id
    (sub,) = calls(standins, "bsub")  # one submission: the array
    assert "#BSUB -J model[1-3]" in sub["script"] and f"#BSUB -o {search_dir}/logs/array-%J_%I.out" in sub["script"]
    assert 'id="${LSB_JOBID}[${LSB_JOBINDEX}]"' in sub["script"]
    v = view(nnlo, run_id)
    assert [c["jobs"][0]["job_id"] for c in v["chains"]] == ["1001[1]", "1001[2]", "1001[3]"]
    assert [c["run_id"].rsplit("/", 1)[1] for c in v["chains"]] == ["c1", "c2", "c3"]
    assert v["state"] == "queued" and {j["scheduler_state"] for j in v["jobs"]} == {"PENDING"}
    assert len(calls(standins, "bjobs")) == 1  # one query for every job of every chain

    # LSF starts element 2: the array script runs chain c2's script, which queues c2's successor behind
    # element 2 alone (and the successor is an ordinary job: no LSB_JOBINDEX in its environment)
    env = dict(os.environ, LSB_JOBID="1001", LSB_JOBINDEX="2")
    proc = subprocess.Popen(["/bin/bash", str(search_dir / "array.sh")], env=env, cwd=search_env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    log = search_dir / "chains" / "c2" / "logs" / "job-1001[2].out"
    wait_for("the task to start its chain's trial", lambda: log.exists() and "search-payload c2: trial 0" in
             log.read_text(), timeout=60)
    succ = calls(standins, "bsub")[1]
    assert succ["args"] == ["-w", "ended(1001[2])"] and "NNLO_PARTICIPANT=c2" in succ["script"]
    c2 = json.loads((search_dir / "chains" / "c2" / "state.json").read_text())
    assert c2["jobs"][0]["job_id"] == "1001[2]" and c2["jobs"][0]["status"] == "running"

    out = nnlo("cancel", run_id).stdout
    assert "cancelled search" in out
    kills = calls(standins, "bkill")
    assert len(kills) == 1 and sorted(kills[0]["args"]) == sorted(["1001[1]", "1001[2]", "1001[3]", "1002"])
    os.kill(proc.pid, signal.SIGTERM)  # LSF ends the running element (its batch shell relays it)
    assert proc.wait(timeout=60) == 75
    v = view(nnlo, run_id)
    assert v["state"] == "cancelled" and all(c["state"] == "cancelled" for c in v["chains"])
    assert [j["status"] for j in v["chains"][1]["jobs"]] == ["cancelled", "cancelled"]


@pytest.mark.slow
def test_pbs_array_needs_two_tasks_and_numbers_subjobs(standins, search_env, cli):
    nnlo = cli
    proc = nnlo("submit", "--no-check", "--cluster", "srchpbs", "--jobs", "1", "--array", *inner(), check=False)
    assert proc.returncode == 2 and one_error(proc) and "at least 2 tasks" in proc.stderr
    run_id = submit(nnlo, "--cluster", "srchpbs", "--jobs", "2", *inner())
    (sub,) = calls(standins, "qsub")
    assert "#PBS -J 1-2" in sub["script"] and 'dir=' in sub["script"] and "PBS_ARRAY_INDEX" in sub["script"]
    v = view(nnlo, run_id)
    assert [c["jobs"][0]["job_id"] for c in v["chains"]] == ["1001[1].pbs01", "1001[2].pbs01"]
    assert {j["scheduler_state"] for j in v["jobs"]} == {"PENDING"}
    # one chain joins on LSF (another cluster on the same file system); cancel: one qdel, one bkill
    out = nnlo("submit", "--no-check", "--join", run_id, "--cluster", "srchlsf", "-t", "30m").stdout
    assert out.startswith(f"joined search {run_id}: chain c3 on srchlsf as job 1002")
    assert calls(standins, "bsub")[0]["args"] == [] and "#BSUB -W 30" in calls(standins, "bsub")[0]["script"]
    nnlo("cancel", run_id)
    assert [c["args"] for c in calls(standins, "qdel")] == [["1001[1].pbs01", "1001[2].pbs01"]]
    assert [c["args"] for c in calls(standins, "bkill")] == [["1002"]]


def test_slurm_array_script_and_array_task_ids(search_env, cli):
    nnlo = cli
    out = nnlo("submit", "--no-check", "--cluster", "srchslurm", "--jobs", "3", "--dry-run", *inner()).stdout
    assert "#SBATCH --array=0-2" in out and "/logs/array-%A_%a.out" in out
    assert 'id="${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"' in out and "--dependency" not in out
    # the array only starts each chain's own script: the dry run shows that one too, with its launch line
    array, _, chain = out.partition("# --- the job script of chain c0 ")
    assert "#SBATCH --array=0-2" in array and "-m nnlo_sched run" not in array
    assert "export NNLO_PARTICIPANT=c0" in chain and "--array" not in chain.split("# --- dry run")[0]
    assert "srun " in chain and ' -m nnlo_sched run "$NNLO_RUN_DIR"' in chain
    assert out.rstrip().splitlines()[-1].startswith("# submit command: sbatch --parsable ")
    out = nnlo("submit", "--no-check", "--cluster", "srchslurm", "--jobs", "3", "--no-array", "--dry-run",
               *inner()).stdout
    assert "--array" not in out and "export NNLO_PARTICIPANT=c0" in out
    from nnlo_sched.schedulers.slurm import SlurmScheduler

    s = SlurmScheduler()
    assert s.array_task_id("812", 2) == "812_2"
    assert s.current_job_id({"SLURM_JOB_ID": "815", "SLURM_ARRAY_JOB_ID": "812", "SLURM_ARRAY_TASK_ID": "2"}) == "812_2"
    assert s.current_job_id({"SLURM_JOB_ID": "815"}) == "815"
    assert s.submit_argv(Path("j.sh"), "812_2") == ["sbatch", "--parsable", "--dependency=afterany:812_2", "j.sh"]


# -- refusals: one line, nothing changed ---------------------------------------------------------------------
@pytest.mark.slow
def test_jobs_with_train_and_join_refusals_are_one_line(standins, search_env, cli):
    nnlo = cli
    bad = nnlo("submit", "--no-check", "--cluster", "srchlsf", "--jobs", "2", "train", "--model", "model.py",
               check=False)
    assert bad.returncode == 2 and one_error(bad) and "needs optimize, not train" in bad.stderr
    bad = nnlo("submit", "--no-check", "--cluster", "srchlsf", "--jobs", "2", *inner(), "--output", "x", check=False)
    assert bad.returncode == 2 and "--output is set by nnlo submit" in bad.stderr
    plain = nnlo("submit", "--no-check", "--cluster", "srchlsf", *inner()).stdout.split()[2]
    bad = nnlo("submit", "--no-check", "--join", plain, "--cluster", "srchlsf", check=False)
    assert bad.returncode == 2 and one_error(bad) and "is not a search of many jobs" in bad.stderr

    run_id = submit(nnlo, "--cluster", "srchlsf", "--jobs", "2", *inner(trials=12))
    before = len(calls(standins, "bsub"))
    bad = nnlo("submit", "--no-check", "--join", run_id, "--cluster", "srchpbs", "optimize", "--model", "model.py",
               "--num-iterations", "30", "--fom", "val_accuracy", "--model-arg", "trial_seconds=0.4", check=False)
    assert bad.returncode == 2 and one_error(bad)
    assert "num-iterations 30 (the search has 12)" in bad.stderr and "fom" in bad.stderr
    ok = nnlo("submit", "--no-check", "--join", run_id, "--cluster", "srchpbs", *inner(trials=12),
              "--block-size", "2").stdout  # a block size of its own is fine
    assert "chain c3 on srchpbs" in ok and len(calls(standins, "bsub")) == before
    assert calls(standins, "qsub")[-1]["args"][-1].endswith("chains/c3/job.sh")

    search_dir = Path(os.environ["NNLO_HOME"]) / run_id
    st = json.loads((search_dir / "chains" / "c1" / "state.json").read_text())
    st["state"] = "done"
    (search_dir / "chains" / "c1" / "state.json").write_text(json.dumps(st))
    for c in ("c2", "c3"):
        st = json.loads((search_dir / "chains" / c / "state.json").read_text())
        st["state"] = "cancelled"
        (search_dir / "chains" / c / "state.json").write_text(json.dumps(st))
    bad = nnlo("submit", "--no-check", "--join", run_id, "--cluster", "srchpbs", check=False)
    assert bad.returncode == 2 and f"search {run_id} is done" in bad.stderr


@pytest.mark.slow
def test_status_counts_trials_from_the_journal(standins, search_env, cli):
    nnlo = cli
    run_id = submit(nnlo, "--cluster", "srchlsf", "--jobs", "2", *inner(trials=10))
    search_dir = Path(os.environ["NNLO_HOME"]) / run_id
    c1 = search_dir / "chains" / "c1" / "state.json"
    st = json.loads(c1.read_text())
    st["jobs"][0].update(status="running", started_at=1.0)
    st["state"] = "running"
    c1.write_text(json.dumps(st))
    # the runtime's record format (nnlo/optimize/journal.py): kind, participant p, trial id, lease until
    later = 4e9
    recs = [{"kind": "propose", "id": 0, "p": "c1", "params": {}, "until": later},
            {"kind": "result", "id": 0, "p": "c1", "trial": {"id": 0, "params": {}, "status": "ok", "fom": 0.5}},
            {"kind": "propose", "id": 1, "p": "c1", "params": {}, "until": later},
            {"kind": "propose", "id": 2, "p": "c2", "params": {}, "until": later},
            {"kind": "propose", "id": 3, "p": "c1", "params": {}, "until": later},
            {"kind": "result", "id": 3, "p": "c1", "trial": {"id": 3, "params": {}, "status": "failed", "fom": None}},
            {"kind": "propose", "id": 4, "p": "c2", "params": {}, "until": later},
            {"kind": "release", "id": 4, "p": "c2"}]
    try:
        from nnlo.optimize.journal import encode  # the runtime's own line format, checksummed
        lines = b"".join(encode(r) for r in recs).decode()
    except ImportError:
        lines = "".join(json.dumps({"crc": "00000000", "rec": r}) + "\n" for r in recs)
    (search_dir / "search-journal.jsonl").write_text(lines + "{torn")
    (search_dir / "best.json").write_text(json.dumps({"best_fom": 0.5, "fom_name": "val_loss"}))
    p = view(nnlo, run_id)["progress"]
    assert (p["trials_done"], p["trials_failed"], p["trials_leased"]) == (2, 1, 2)
    assert p["trials_running"] in (1, 2)  # held by a running chain (stand-in reader) or alive (runtime's)
    assert p["trials_total"] == 10 and p["best"] == 0.5
    detail = nnlo("status", run_id).stdout
    assert "2/10 trials (" in detail and "2 leased, 1 failed)" in detail and "chain c1: running" in detail


def test_state_records_of_searches_and_chains_are_typed(tmp_path):
    from nnlo_sched.state import RunState, StateError, read_state, write_state

    write_state(tmp_path, RunState(run_id="s", name="n", cluster="c", scheduler="slurm", chains=["c0", "c1"]))
    assert read_state(tmp_path).is_search and read_state(tmp_path).chains == ["c0", "c1"]
    for bad in (["../etc"], ["c0/x"], [".."], [""], "c0", [3]):
        data = json.loads((tmp_path / "state.json").read_text())
        data["chains"] = bad
        (tmp_path / "state.json").write_text(json.dumps(data))
        with pytest.raises(StateError, match="'chains' must be a list of chain names"):
            read_state(tmp_path)
    write_state(tmp_path, RunState(run_id="c0", name="n", cluster="c", scheduler="slurm", search_dir="/s",
                                   participant="c0"))
    st = read_state(tmp_path)
    assert not st.is_search and (st.search_dir, st.participant) == ("/s", "c0")


def test_local_profile_has_no_arrays_and_array_needs_jobs(search_env, cli):
    nnlo = cli
    bad = nnlo("submit", "--no-check", "--cluster", "srchlocal", "--jobs", "2", "--array", "--dry-run", *inner(),
               check=False)
    assert one_error(bad) and "has no job arrays" in bad.stderr
    bad = nnlo("submit", "--no-check", "--cluster", "srchslurm", "--array", "--dry-run", *inner(), check=False)
    assert one_error(bad) and "goes with --jobs K" in bad.stderr
    out = nnlo("submit", "--no-check", "--cluster", "srchlocal", "--jobs", "2", "--dry-run", *inner()).stdout
    assert "2 chain(s) c0, c1, each submitted" in out and "export NNLO_PARTICIPANT=c0" in out


@pytest.mark.slow
def test_join_dry_run_and_resume_of_a_cancelled_search(standins, search_env, cli):
    nnlo = cli
    run_id = submit(nnlo, "--cluster", "srchlsf", "--jobs", "2", "--no-array", *inner(trials=8))
    assert [c["args"] for c in calls(standins, "bsub")] == [[], []]  # --no-array: two ordinary jobs
    out = nnlo("submit", "--no-check", "--join", run_id, "--cluster", "srchpbs", "--dry-run").stdout
    assert "#PBS -l walltime" in out and "export NNLO_PARTICIPANT=cN" in out and "# submit command: qsub" in out
    bad = nnlo("submit", "--no-check", "--join", run_id, "--cluster", "srchpbs", "--dry-run", "optimize", "--model",
               "model.py", "--num-iterations", "9", check=False)
    assert one_error(bad) and "num-iterations 9 (the search has 8)" in bad.stderr
    assert not calls(standins, "qsub")  # nothing submitted by either
    nnlo("cancel", run_id)
    out = nnlo("resume", run_id).stdout
    assert f"resuming search {run_id}" in out and out.count("resumed chain") == 2
    v = view(nnlo, run_id)
    assert v["state"] == "queued" and [len(c["jobs"]) for c in v["chains"]] == [2, 2]
    assert [c["args"] for c in calls(standins, "bsub")] == [[], [], [], []]  # a new chain each, no dependency


# -- every hint a command that works as printed ------------------------------------------------------------------
HINT = re.compile(r"`(nnlo [^`]+)`")


def hints(*texts: str) -> set[str]:
    """The commands nnlo's words quote (```nnlo resume ID` continues``)."""
    return {h for text in texts for h in HINT.findall(text)}


@pytest.mark.slow
def test_every_hint_a_stopped_chain_of_a_search_prints_is_a_command_that_works(standins, search_env, cli):
    """Issue 44: a search chain's status advised "`nnlo resume c1` continues", which answers "no run 'c1'" (the
    search's id is needed), and said a job that ran to its time limit had "ended". Every quoted command of the
    status, the chain's own message and a refusal is run here as printed (in this process) and must work."""
    nnlo = cli
    run_id = submit(nnlo, "--cluster", "srchlsf", "--jobs", "2", "--no-array", *inner(trials=8))
    chain = Path(os.environ["NNLO_HOME"]) / run_id / CHAINS_DIR / "c1"
    first = read_state(chain).jobs[0].job_id
    assert job_start(chain, first, submit_successor=False).ok
    # killed with its batch shell at its time limit before any checkpoint: the next job's start stops the chain
    stopped = job_start(chain, "99999", submit_successor=False)
    assert not stopped.ok and f"job {first} was killed at its time limit" in stopped.message
    table, detail = nnlo("status").stdout, nnlo("status", run_id).stdout
    wrong = nnlo("resume", "c1", check=False)
    assert wrong.returncode != 0  # the chain's own name is no run id (as before)
    whole = nnlo("preempt", run_id, check=False)  # a search is preempted a chain at a time: status lists them
    assert whole.returncode != 0 and f"nnlo status {run_id}" in whole.stderr
    assert f"({chain})" in detail  # each chain's run directory, which nnlo preempt takes
    said = hints(stopped.message, table, detail, wrong.stderr, whole.stderr)
    assert f"nnlo resume {run_id}" in said and "nnlo resume c1" not in said and "nnlo status" in said, said
    assert " ended without" not in table + detail
    for command in sorted(said, key=lambda c: "resume" in c):  # the resume last: it changes the run
        done = nnlo(*shlex.split(command)[1:], check=False)
        assert done.returncode == 0, f"`{command}` as printed: {done.stderr}"
    assert read_state(chain).state == "queued"  # resumed: a new chain queued


# -- the Python API's dry runs: the plan nnlo submit --dry-run prints ------------------------------------------
def test_the_apis_dry_run_of_jobs_is_the_whole_plan(search_env, cli):
    """api.preflight(spec, jobs=3) returns every script and the submit command (the array's and its first
    chain's), and nnlo submit --jobs 3 --dry-run prints exactly that plan."""
    from nnlo.contract import CHAINS_DIR, SCRIPT_FILE
    from nnlo_sched import api
    from nnlo_sched.search import ARRAY_SCRIPT

    spec = api.spec("optimize", inner()[1:], "srchslurm")
    found = api.preflight(spec, jobs=3, check=False)
    array, chain = found.plan.scripts
    assert array.path == found.shown_dir / ARRAY_SCRIPT and "#SBATCH --array=0-2" in array.text
    assert chain.path == found.shown_dir / CHAINS_DIR / "c0" / SCRIPT_FILE and chain.caption
    assert "export NNLO_PARTICIPANT=c0" in chain.text and "--array" not in chain.text
    assert found.plan.argv == ("sbatch", "--parsable", str(array.path))
    assert "3 chain(s) c0, c1, c2, started as one job array" in found.plan.lines[-1]
    out = cli("submit", "--no-check", "--cluster", "srchslurm", "--jobs", "3", "--dry-run", *inner()).stdout
    assert out == found.plan.text()
    (one,) = api.preflight(spec, jobs=3, array=False, check=False).plan.scripts  # each chain a job of its own
    assert one.path == chain.path and one.caption is None


@pytest.mark.slow
def test_the_apis_dry_run_of_join_is_the_joining_chain(standins, search_env, cli):
    """api.preflight(spec, join=RUN) plans the chain that would join the search, submits nothing, and nnlo
    submit --join RUN --dry-run prints exactly that plan."""
    from nnlo.contract import CHAINS_DIR, SCRIPT_FILE
    from nnlo_sched import api

    run_id = submit(cli, "--cluster", "srchlsf", "--jobs", "2", "--no-array", *inner(trials=8))
    search = api.find(run_id)
    found = api.preflight(api.spec("optimize", inner(trials=8)[1:], "srchpbs"), join=run_id, check=False)
    (chain,) = found.plan.scripts
    assert chain.path == search.dir / CHAINS_DIR / "cN" / SCRIPT_FILE
    assert "#PBS -l walltime" in chain.text and "export NNLO_PARTICIPANT=cN" in chain.text
    assert found.plan.argv[0] == "qsub" and f"would join search {run_id}" in found.plan.lines[-1]
    out = cli("submit", "--no-check", "--join", run_id, "--cluster", "srchpbs", "--dry-run", *inner(trials=8)).stdout
    assert out == found.plan.text()
    assert not calls(standins, "qsub")  # nothing submitted by either
