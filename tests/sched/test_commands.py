"""``nnlo layout``, ``nnlo clusters`` and ``nnlo submit --dry-run`` through the real CLI entry point."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

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
