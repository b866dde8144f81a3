"""``nnlo layout``, ``nnlo clusters`` and ``nnlo submit --dry-run`` through the real CLI entry point."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.sched.cli_runner import run


def test_layout_summary(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "layout", "--cluster", "summit", "--nodes", "4608", "--walltime", "24h")
    assert code == 0, err
    assert "27648 ranks: 1 master, 27647 worker" in out
    assert "nodes 1-4607" in out and "6 workers each" in out
    assert "jsrun -n 27648 -r 6 -a 1 -c 7 -g 1 -b rs" in out
    assert "no-GPU ranks: master rank 0 on node 0" in out
    assert len(out.splitlines()) < 20  # compact even for the whole machine


def test_layout_json_lists_every_rank(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "layout", "-c", "cscs", "--blocks", "2", "--block-size", "6", "--n-fold", "2",
                       "--json")
    assert code == 0
    d = json.loads(out)
    assert d["world_size"] == 13 and len(d["ranks"]) == 13
    assert d["ranks"][0] == {"rank": 0, "role": "coordinator", "node": 0, "gpus": [], "device": ""}
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
    code, out, _ = run(capsys, "clusters", "show", "cscs")
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


def test_a_dry_run_says_which_ranks_leave_a_gpu_idle_as_layout_does(capsys: pytest.CaptureFixture[str],
                                                                      tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 45 item 7: a dry run that puts the coordinator and the masters on GPU nodes ("GPUs used 2 of 4")
    said nothing of it; only ``nnlo layout`` noted it. The same note, once; none on CPU nodes."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NNLO_HOME", str(tmp_path / "home"))
    shape = ("--blocks", "2", "--dry-run", "--no-check", "optimize", "--block-size", "2", "--model", "m.py")
    code, out, _ = run(capsys, "layout", "perlmutter", "--blocks", "2", "--block-size", "2")
    (said,) = [line.removeprefix("note      ") for line in out.splitlines() if "no-GPU ranks" in line]
    code, out, err = run(capsys, "submit", "-c", "perlmutter", "-A", "m1", *shape)
    assert code == 0, err
    assert err.count("no-GPU ranks") == 1 and f"nnlo: note: {said}\n" in err
    assert "coordinator rank 0" in said and "master 2 ranks (1,3)" in said
    code, out, err = run(capsys, "submit", "-c", "cscs", "-C", "mc", "-A", "s1", *shape)
    assert code == 0, err
    assert "no-GPU ranks" not in err


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


@pytest.mark.parametrize("typo, value, meant", [
    ("--wokers", "2", "'--workers'"), ("--node", "2", "'--nodes'"), ("--acount", "s1", "'--account'"),
    ("--dryrun", None, "'--dry-run'"), ("--max-resubmit", "3", "'--max-resubmits'"),
])
@pytest.mark.parametrize("kind", ["train", "optimize"])
def test_a_misspelt_submit_option_gets_clicks_did_you_mean(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch, typo: str,
                                                          value: str | None, meant: str, kind: str) -> None:
    """A typo in a submit option before the run kind is named as such, with the option meant (as nnlo layout
    says it), never turned into a "corrected" command line with the kind twice and the typo moved after it."""
    monkeypatch.chdir(tmp_path)
    typed = [typo] if value is None else [typo, value]
    code, out, err = run(capsys, "submit", "--cluster", "cscs", "-A", "s1", *typed, "--dry-run", kind,
                         "--model", "m.py")
    assert code == 2 and out == "" and list(tmp_path.iterdir()) == []
    assert err.startswith(f"nnlo: error: No such option '{typo}'") and meant in err, err
    assert err.rstrip().endswith("see `nnlo submit --help`") and f" {kind} " not in err and err.count("\n") == 1


def test_an_option_of_neither_command_without_the_kind_is_named_too(capsys: pytest.CaptureFixture[str],
                                                                    tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Forgetting the kind is one mistake and mistyping an option another: an option that neither nnlo submit
    nor train/optimize has is named, not placed after a guessed kind."""
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, "submit", "--cluster", "local", "--wokers", "2", "--model", "m.py")
    assert code == 2 and err.startswith("nnlo: error: No such option '--wokers'") and "'--workers'" in err
    # an option of the run given before its kind still gets the corrected command line
    code, _, err = run(capsys, "submit", "--cluster", "local", "--epochs", "2", "--model", "m.py")
    assert code == 2 and "type: nnlo submit --cluster local train --epochs 2 --model m.py" in err
    # ... and one given before a kind that follows is moved after it (submit options stay before it)
    code, _, err = run(capsys, "submit", "--cluster", "local", "--epochs", "2", "--workers", "2", "optimize",
                       "--model", "m.py")
    assert code == 2 and err == ("nnlo: error: --epochs is an option of nnlo optimize, not of nnlo submit; put it "
                                 "after the word optimize: nnlo submit --cluster local --workers 2 optimize --epochs "
                                 "2 --model m.py\n")


@pytest.mark.slow
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

    spec = RunSpec.from_argv(kind="train", args=["--model", "m.py"], cluster=cluster, name=name, walltime_s=600, workers=1,
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


@pytest.mark.slow
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


@pytest.mark.slow  # the submission runs an sbatch stand-in
def test_submit_into_a_run_dir_holding_a_run_is_refused_with_the_ways_on(capsys: pytest.CaptureFixture[str],
                                                                        runs_env: Path) -> None:
    """nnlo submit --run-dir DIR where DIR holds an earlier run: its ways on in one line (resume it, another
    folder, --overwrite), as a training's --checkpoint folder says them; a run still going is never deleted, a
    folder that is no run never either; --overwrite starts afresh, and its dry run deletes nothing."""
    from nnlo_sched.state import update_state

    (runs_env / "bin" / "sbatch").write_text('#!/bin/sh\necho 4242\n')
    (runs_env / "bin" / "sbatch").chmod(0o755)
    earlier = _run(runs_env, "tslurm", "old")  # its job 42 is queued
    (earlier / "checkpoints").mkdir()
    (earlier / "checkpoints" / "ckpt-e0003-u00000012").mkdir()
    argv = ["submit", "--cluster", "tslurm", "--no-check", "--run-dir", str(earlier)]
    inner = ["train", "--model", "m.py"]
    before = _snapshot(runs_env)
    for extra in ([], ["--overwrite"], ["--dry-run"], ["--overwrite", "--dry-run"]):
        code, out, err = run(capsys, *argv, *extra, *inner)
        assert (code, out) == (2, "") and err == (
            f"nnlo: error: --run-dir {earlier} holds run {earlier.name}, which is queued (job 42); `nnlo cancel "
            f"{earlier.name}` first, or submit to another --run-dir\n")
    with update_state(earlier) as st:
        st.state, st.jobs[-1].status = "failed", "failed"
    before = _snapshot(runs_env)
    for extra in ([], ["--dry-run"]):
        code, out, err = run(capsys, *argv, *extra, *inner)
        assert (code, out) == (2, "") and err == (
            f"nnlo: error: --run-dir {earlier} already holds run {earlier.name} (failed); continue it with `nnlo "
            f"resume {earlier.name}`, submit this one to another --run-dir, or pass --overwrite (before the word "
            f"train) to start afresh (deleting its checkpoints, logs and records)\n")
    with update_state(earlier) as st:  # a done training resumes only with --force: the hint says so
        st.state = "done"
    code, out, err = run(capsys, *argv, *inner)
    assert (code, out) == (2, "") and f"(done); continue it with `nnlo resume {earlier.name} --force`, " in err
    before = _snapshot(runs_env)
    code, out, err = run(capsys, *argv, "--overwrite", "--dry-run", *inner)
    assert code == 0 and f"nnlo: note: --overwrite: the earlier run {earlier.name} in {earlier} would be deleted" in err
    assert _snapshot(runs_env) == before  # a dry run deletes nothing
    code, out, err = run(capsys, *argv, "--overwrite", *inner)
    assert code == 0 and out == f"submitted run {earlier.name} as job 4242 ({earlier})\n"
    assert f"nnlo: note: --overwrite: deleted the earlier run {earlier.name} in {earlier}" in err
    assert not (earlier / "checkpoints").exists() and [j["job_id"] for j in json.loads(
        (earlier / "state.json").read_text())["jobs"]] == ["4242"]
    # a folder with files that are no run is never deleted, --overwrite or not
    other = runs_env / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    for extra in ([], ["--overwrite"]):
        code, _, err = run(capsys, "submit", "--cluster", "tslurm", "--no-check", "--run-dir", str(other), *extra,
                           *inner)
        assert code == 2 and err == (f"nnlo: error: --run-dir {other} holds files but no nnlo run; submit to a new "
                                     "or empty directory\n")
    assert (other / "notes.txt").read_text() == "keep me"


@pytest.mark.slow
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


def test_status_without_submitted_runs_names_the_trainings_run_here_with_n(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``nnlo train|optimize -n`` (and ``mpirun nnlo train``) write ./nnlo-runs/NAME and ./optimize-NAME, which
    ``nnlo status`` does not list (they are not submitted runs): the "no runs" line says where they are."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NNLO_HOME", raising=False)
    (tmp_path / "nnlo-runs" / "digits").mkdir(parents=True)
    (tmp_path / "nnlo-runs" / "digits" / "history.json").write_text("{}")
    (tmp_path / "optimize-mlp").mkdir()
    (tmp_path / "optimize-mlp" / "trials.json").write_text("[]")
    (tmp_path / "notes").mkdir()
    code, out, _ = run(capsys, "status")
    assert code == 0 and out.count("\n") == 1, out
    assert out.startswith(f"no submitted runs under {tmp_path / 'nnlo-runs'}")
    assert "run here with -n or mpirun (not listed): nnlo-runs/digits, optimize-mlp" in out and "notes" not in out
    monkeypatch.setenv("NNLO_HOME", str(tmp_path / "home"))  # the trainings still write ./nnlo-runs
    code, out, _ = run(capsys, "status")
    assert code == 0 and "nnlo-runs/digits, optimize-mlp" in out and str(tmp_path / "home") in out
