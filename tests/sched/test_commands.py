"""``nnlo layout``, ``nnlo clusters`` and ``nnlo submit --dry-run`` through the real CLI entry point."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nnlo_sched.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        main(list(argv))
        code = 0
    except SystemExit as e:
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_layout_summary(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "layout", "--cluster", "summit", "--nodes", "4608", "--walltime", "24h")
    assert code == 0, err
    assert "27648 ranks: 1 master, 27647 worker" in out
    assert "nodes 1-4607" in out and "6 workers each" in out
    assert "jsrun -n 27648 -r 6 -a 1 -c 7 -g 1 -b rs" in out
    assert "no-GPU ranks: master rank 0 on node 0" in out
    assert len(out.splitlines()) < 20  # compact even for the whole machine


def test_layout_json_lists_every_rank(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "layout", "-c", "daint", "--blocks", "2", "--block-size", "6", "--n-fold", "2",
                       "--json")
    assert code == 0
    d = json.loads(out)
    assert d["world_size"] == 13 and len(d["ranks"]) == 13
    assert d["ranks"][0] == {"rank": 0, "role": "coordinator", "node": 0, "gpus": []}
    assert d["roles"] == {"coordinator": 1, "master": 4, "worker": 8}


@pytest.mark.parametrize(
    "argv, needle",
    [
        (("layout", "-c", "summit", "--workers", "2", "--gpus-per-worker", "7"), "more than a summit node has"),
        (("layout", "-c", "summit", "--nodes", "100", "--walltime", "13h"), "exceeds the 12h limit"),
        (("layout", "-c", "titan", "--nodes", "20000"), "titan has 18688 nodes; ask for at most --nodes 18688"),
        (("layout", "-c", "summit", "--workers", "0"), "at least 1 worker"),
        (("layout", "-c", "summit", "--block-size", "5", "--n-fold", "2"), "multiple of 2"),
        (("layout", "-c", "summit", "--walltime", "2 hours"), "walltime '2 hours' is malformed"),
        (("layout", "-c", "summit", "--gpus-per-worker", "x"), "not a number of GPUs"),
        (("layout", "-c", "nowhere"), "unknown cluster 'nowhere'"),
        (("clusters", "show", "nowhere"), "unknown cluster 'nowhere'"),
    ],
)
def test_errors_are_one_line(capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], needle: str) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2 and needle in err and "Traceback" not in err
    assert len([line for line in err.splitlines() if line.strip()]) <= 3  # click usage errors add a hint line


def test_clusters_list_and_show(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NNLO_CLUSTERS", str(tmp_path))
    (tmp_path / "a100box.toml").write_text('extends = "flatiron"\ngpus_per_node = 4\nconstraint = "a100"\n')
    (tmp_path / "oops.toml").write_text('extends = "local"\ngpus_per_node = "two"\n')
    code, out, _ = run(capsys, "clusters")
    assert code == 0
    lines = {line.split()[0]: line for line in out.splitlines() if line and not line.startswith("(")}
    assert "lsf+jsrun" in lines["summit"] and "4608 x 42 cores, 6 GPUs" in lines["summit"]
    assert "a100box.toml" in lines["a100box"]
    assert "BROKEN" in lines["oops"] and "'gpus_per_node' must be an integer" in lines["oops"]
    code, out, _ = run(capsys, "clusters", "show", "daint")
    assert code == 0 and out.startswith("cscs:") and "queue normal (default): 24h" in out
    code, out, _ = run(capsys, "clusters", "show", "a100box", "--json")
    assert json.loads(out)["constraint"] == "a100"


def test_submit_dry_run_prints_and_writes_nothing(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NNLO_HOME", str(tmp_path / "home"))
    code, out, err = run(capsys, "submit", "--cluster", "cscs", "-A", "s1", "--nodes", "4", "-t", "90m",
                         "--name", "my run", "--dry-run", "--no-check", "train", "--model", "m.py", "--epochs", "2")
    assert code == 0, err
    assert out.startswith("#!/bin/bash\n#SBATCH --job-name=my_run\n")
    assert "#SBATCH --time=01:30:00" in out and "srun -n 4 --nodes=4" in out
    assert f"# submit command: sbatch --parsable {tmp_path}/home/my_run/job.sh" in out
    assert list(tmp_path.iterdir()) == []  # no run directory, nothing at all


def test_submit_dry_run_local_names_run_after_model(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "submit", "-c", "local", "--workers", "2", "--dry-run", "--run-dir", "r1",
                         "--no-check", "train", "--model", "examples/digits.py")
    assert code == 0, err
    assert "# Generated by nnlo for run digits on cluster local" in out
    assert f"export NNLO_RUN_DIR={tmp_path}/r1" in out and f"cd {tmp_path} || exit 1" in out
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "argv, needle",
    [
        (("submit", "-c", "summit", "--workers", "2", "--dry-run", "train", "--model", "m.py"),
         "needs a project to charge"),
        (("submit", "-c", "summit", "-A", "x", "-q", "debug", "--dry-run", "train", "--model", "m.py"),
         "forbids job chaining"),
        (("submit", "-c", "local", "train", "--model", "m.py", "--dry-run"), "put it before"),
        (("submit", "-c", "cscs", "-A", "s1", "-t", "25h", "--dry-run", "train", "--model", "m.py"),
         "exceeds the 24h limit"),
        (("submit", "-c", "cscs", "-A", "s1", "--dry-run", "train", "--model", "m.py", "--epochs", "many"),
         "train options: Invalid value for '--epochs'"),
        (("submit", "-c", "cscs", "-A", "s1", "--dry-run", "sing"),
         "'sing' is not a run kind (train or optimize); type: nnlo submit -c cscs -A s1 --dry-run train"),
    ],
)
def test_submit_refusals(capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                         argv: tuple[str, ...], needle: str) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, *argv)
    assert code == 2 and needle in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_console_script_end_to_end(tmp_path: Path, nnlo_env: dict[str, str]) -> None:
    """The installed entry point, in a fresh process, as a user runs it."""
    done = subprocess.run(
        [sys.executable, "-m", "nnlo_sched", "submit", "-c", "titan", "-A", "CSC1", "--workers", "3", "--dry-run",
         "--no-check", "train", "--model", "m.py"],
        cwd=tmp_path, env=nnlo_env, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "#PBS -l nodes=4" in done.stdout and "aprun -n 4 -N 1 -d 16" in done.stdout
    assert "# submit command: qsub " in done.stdout
    assert os.listdir(tmp_path) == []


# -- damaged runs, run references, job ids: status and cancel over real run directories ------------------------
@pytest.fixture
def runs_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A runs home, a Slurm and an LSF test profile, and recording stand-ins for every batch program
    (``calls`` lists one line per call: the program and its arguments)."""
    clusters, bin_dir = tmp_path / "clusters", tmp_path / "bin"
    clusters.mkdir()
    bin_dir.mkdir()
    (clusters / "tslurm.toml").write_text('scheduler = "slurm"\nlauncher = "srun"\ncores_per_node = 8\n')
    (clusters / "tlsf.toml").write_text('scheduler = "lsf"\nlauncher = "mpirun"\ncores_per_node = 8\n')
    for prog in ("squeue", "sacct", "scancel", "bjobs", "bkill"):
        (bin_dir / prog).write_text(f'#!/bin/sh\necho "$(basename "$0") $*" >> {tmp_path / "calls"}\n')
        (bin_dir / prog).chmod(0o755)
    monkeypatch.setenv("NNLO_CLUSTERS", str(clusters))
    monkeypatch.setenv("NNLO_HOME", str(tmp_path / "runs"))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("NNLO_SCHED_RETRIES", "0")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _run(env: Path, cluster: str, name: str, job_ids: tuple[str, ...] = ("41", "42")) -> Path:
    """A run made by the real code, its last job queued."""
    from nnlo_sched.profiles import load_profile
    from nnlo_sched.runs import create_run
    from nnlo_sched.spec import RunSpec
    from nnlo_sched.state import JobRecord, update_state

    spec = RunSpec(kind="train", args=["--model", "m.py"], cluster=cluster, name=name, walltime_s=600, workers=1,
                   workdir=str(env))
    run = create_run(spec, load_profile(cluster), env / "runs")
    with update_state(run.dir) as st:
        st.jobs = [JobRecord(job_id=j, submitted_at=1.0, status="walltime") for j in job_ids[:-1]]
        st.jobs.append(JobRecord(job_id=job_ids[-1], submitted_at=2.0))
    return run.dir


def _calls(env: Path) -> list[str]:
    return (env / "calls").read_text().splitlines() if (env / "calls").exists() else []


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("damage, reason", [
    (lambda d: d.update(scheduler="torque"), "unknown scheduler 'torque'"),
    (lambda d: d["jobs"][0].update(job_id=41), "'jobs[0].job_id' must be a non-empty string"),
    (lambda d: d.update(created_at="yesterday"), "'created_at' must be a finite number"),
])
def test_one_damaged_run_is_listed_as_damaged_and_hides_no_other(capsys: pytest.CaptureFixture[str],
                                                                  runs_env: Path, damage: Any, reason: str) -> None:
    bad, good = _run(runs_env, "tslurm", "bad"), _run(runs_env, "tlsf", "good")
    data = json.loads((bad / "state.json").read_text())
    damage(data)
    (bad / "state.json").write_text(json.dumps(data))
    code, out, err = run(capsys, "status", "--json")
    assert code == 0, err
    views = {v["run_id"]: v for v in json.loads(out)}
    assert views[bad.name]["state"] == "damaged" and reason in views[bad.name]["error"]
    # the other run is shown as usual (the stand-in bjobs knows no job: its queued job ended, so it failed)
    assert views[good.name]["state"] == "failed" and views[good.name]["jobs"][-1]["job_id"] == "42"
    code, out, _ = run(capsys, "status")
    assert code == 0 and f"{bad.name}: " in out and reason in out and good.name in out
    code, _, err = run(capsys, "status", bad.name)  # asked for by name: the reason, as one line
    assert code == 2 and reason in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("ref, needle", [("", "the run reference is empty"), ("  ", "is blank"),
                                         ("c", "too short"), ("cl", "too short"), ("zzzz", "no run 'zzzz'")])
def test_cancel_refuses_an_empty_blank_or_short_reference_and_changes_nothing(
        capsys: pytest.CaptureFixture[str], runs_env: Path, ref: str, needle: str) -> None:
    only = _run(runs_env, "tslurm", "cl")  # the only run: any prefix would match it
    before = _snapshot(runs_env / "runs")
    for verb in ("cancel", "resume"):
        code, out, err = run(capsys, verb, ref)
        assert code == 2 and needle in err and err.startswith("nnlo: error: ") and len(err.splitlines()) == 1
    assert _snapshot(runs_env / "runs") == before and not any(c.startswith("scancel") for c in _calls(runs_env))
    code, out, _ = run(capsys, "cancel", only.name[:4])  # 4 characters that name one run: fine, and said
    assert code == 0 and f"cancelling run {only.name} ({only})" in out
    assert _calls(runs_env)[-1] == "scancel 42"


@pytest.mark.parametrize("cluster, bad", [("tlsf", "0"), ("tlsf", "-u"), ("tslurm", "--user=x"), ("tslurm", "0"),
                                          ("tlsf", "1[0]"), ("tslurm", "1,2")])
def test_a_job_id_that_could_act_on_other_jobs_is_never_passed_to_a_scheduler(
        capsys: pytest.CaptureFixture[str], runs_env: Path, cluster: str, bad: str) -> None:
    r = _run(runs_env, cluster, "ids", job_ids=("41", bad))
    before = _snapshot(runs_env / "runs")
    code, _, err = run(capsys, "cancel", r.name)
    assert code == 2 and f"{bad!r} is not a" in err and "nothing was cancelled" in err
    assert _snapshot(runs_env / "runs") == before  # a refused cancel changes no file
    code, out, err = run(capsys, "status", "--json")
    assert code == 0, err
    assert json.loads(out)[0]["jobs"][-1]["scheduler_state"] == "UNKNOWN"
    assert not any(bad in c.split()[1:] or bad in c for c in _calls(runs_env) if not c.endswith(" 41")), \
        _calls(runs_env)


def test_click_usage_errors_are_one_nnlo_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (("layout", "-c", "summit", "--workers", "x"), ("status", "--every"), ("nosuch",),
                 ("layout", "--bogus")):
        code, _, err = run(capsys, *argv)
        assert code == 2 and err.startswith("nnlo: error: ") and len(err.splitlines()) == 1, err
        assert "--help`" in err


def test_profiles_that_are_not_utf8_or_extend_themselves_through_aliases(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NNLO_CLUSTERS", str(tmp_path))
    (tmp_path / "latin.toml").write_bytes('extends = "local"\ndescription = "caf\xe9"\n'.encode("latin-1"))
    (tmp_path / "a.toml").write_text('extends = "yy"\naliases = ["xx"]\n')
    (tmp_path / "b.toml").write_text('extends = "xx"\naliases = ["yy"]\n')
    (tmp_path / "me.toml").write_text('extends = "myself"\naliases = ["myself"]\n')
    for name, needle in (("latin", "is not UTF-8 text (byte 0xe9"), ("a", "'extends' makes a cycle"),
                         ("me", "makes a cycle (me -> myself (alias of me))")):
        code, _, err = run(capsys, "layout", "-c", name, "--workers", "1")
        assert code == 2 and needle in err and len(err.splitlines()) == 1, err
    code, out, err = run(capsys, "clusters")
    assert code == 0 and "BROKEN" in out and "Traceback" not in err
