"""``nnlo train|optimize -n N`` on this machine, up to the launch: what is said and refused before any rank starts.

The launch itself is replaced by a recorder (the real one is tested with MPI in tests/runtime): these tests
pin what the command line decides first, once, in the ``nnlo`` process.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.sched.cli_runner import run


@pytest.fixture
def launches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, list[str]]]:
    """A two-core ``local`` profile, and every launch ``-n`` would make (none is started)."""
    from nnlo_sched import payload

    clusters = tmp_path / "clusters"
    clusters.mkdir()
    (clusters / "local.toml").write_text('extends = "local"\ncores_per_node = 2\n')
    monkeypatch.setenv("NNLO_CLUSTERS", str(clusters))
    monkeypatch.chdir(tmp_path)
    for var in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "NNLO_LAUNCHED"):
        monkeypatch.delenv(var, raising=False)
    made: list[tuple[int, list[str]]] = []
    monkeypatch.setattr(payload, "relaunch", lambda n, argv: made.append((n, list(argv))) or 0)
    return made


@pytest.mark.parametrize("ranks, note", [
    (3, "nnlo: note: oversubscribed: 3 ranks on 2 cores of this machine (the ranks share them: slower, not wrong)\n"),
    (2, ""),
])
def test_more_ranks_than_cores_is_said_once_before_the_launch(launches: list, capsys: pytest.CaptureFixture[str],
                                                              ranks: int, note: str) -> None:
    code, _, err = run(capsys, "train", "-n", str(ranks), "--model", "m.py", "--no-check", "--epochs", "1")
    assert code == 0 and len(launches) == 1 and launches[0][0] == ranks
    said = [line for line in err.splitlines(keepends=True) if "--no-check: skipped" not in line]
    assert "".join(said) == note


def test_a_search_says_it_too(launches: list, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "optimize", "-n", "5", "--block-size", "2", "--model", "m.py", "--no-check")
    assert code == 0 and launches and err.count("oversubscribed: 5 ranks on 2 cores") == 1


@pytest.mark.parametrize("workers, said", [(2, True), (1, False)])
def test_a_submission_to_the_local_profile_says_it_too(launches: list, capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                       workers: int, said: bool) -> None:
    """nnlo submit --cluster local with more ranks than the node's cores: the same note, once, from the checks
    a real submission runs too (api.preflight)."""
    monkeypatch.setenv("NNLO_HOME", str(tmp_path / "runs"))
    code, _, err = run(capsys, "submit", "--cluster", "local", "--workers", str(workers), "--no-check", "--dry-run",
                       "train", "--model", "m.py")
    note = (f"nnlo: note: oversubscribed: {workers + 1} ranks on 2 cores of a local node (the ranks share them: "
            "slower, not wrong)\n")
    assert code == 0 and err.count("oversubscribed") == said and (note in err) == said


def test_gem_lr_beside_another_worker_optimizer_is_refused_before_any_rank_starts(
        launches: list, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "train", "-n", "3", "--model", "m.py", "--no-check", "--gem-lr", "0.05",
                         "--worker-optimizer", "adam")
    assert code == 2 and launches == [] and out == ""
    assert err == ("nnlo: error: --gem-lr 0.05 sets the step of GEM's worker SGD, but --worker-optimizer adam steps "
                   "on its own; drop --worker-optimizer (GEM's paper setting, sgd:lr=0.05) or drop --gem-lr\n")


def test_n_checks_paths_here_and_leaves_the_model_import_to_the_ranks(launches: list, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """``-n`` checks the paths and data lists in this process and starts no probe interpreter (a process here
    would fail the marker audit of this process-free test): the ranks import the model themselves."""
    (tmp_path / "m.py").write_text("raise RuntimeError('only the ranks import me')\n")
    (tmp_path / "train.list").write_text("gone.h5\n")
    code, _, err = run(capsys, "train", "-n", "2", "--model", "m.py", "--epochs", "1")
    assert code == 0 and len(launches) == 1, err
    code, _, err = run(capsys, "train", "-n", "2", "--model", "missing.py")
    assert code == 2 and "model file missing.py does not exist" in err and len(launches) == 1
    code, _, err = run(capsys, "train", "-n", "2", "--model", "m.py", "--train", "train.list")
    assert code == 2 and "gone.h5" in err and "does not exist" in err and len(launches) == 1
    code, _, err = run(capsys, "train", "-n", "2", "--model", "m.py", "--train", "train.list", "--no-check")
    assert code == 0 and len(launches) == 2
    assert "skipped the checks of the model file, the data lists and their files" in err and "import" not in err


@pytest.mark.parametrize("kind, given, added", [
    ("train", [], ["--restore", "auto"]),
    ("train", ["--restore", "auto"], []),
    ("optimize", [], ["--opt-restore"]),
])
def test_a_run_stopped_with_a_checkpoint_ends_with_the_command_that_continues_it(
        launches: list, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, kind: str,
        given: list[str], added: list[str]) -> None:
    """Ctrl-C (or a deadline) during ``nnlo train -n 3``: the ranks checkpoint and exit 75; the last line says
    how to go on (running the same command again is refused while the folder holds that run)."""
    from nnlo.contract import EXIT_RESUMABLE
    from nnlo_sched import payload

    monkeypatch.setattr(payload, "relaunch", lambda n, argv: EXIT_RESUMABLE)
    args = ["-n", "2", "--model", "m.py", "--no-check", "--epochs", "5", *given]
    code, _, err = run(capsys, kind, *args)
    assert code == EXIT_RESUMABLE
    assert err.splitlines()[-1] == ("nnlo: stopped with a checkpoint; continue with: "
                                    + " ".join(["nnlo", kind, *args, *added]))


def test_the_launchers_ctrl_c_chatter_is_not_copied_beside_nnlos_own_line() -> None:
    """Hydra answers the Ctrl-C nnlo relays with its own advice ("Press Ctrl-C again to force abort"), which
    contradicts nnlo's (the second Ctrl-C goes to nnlo); the copy of the launch's output leaves those lines out
    and keeps every other byte. Process-free: a pipe in this process."""
    import io
    import os

    from nnlo_sched.launchers.local_launch import _Watch

    given = (b"epoch 3 loss 0.5\r[mpiexec@host] Sending Ctrl-C to processes as requested\n"
             b"[mpiexec@host] Press Ctrl-C again to force abort\nnnlo: stopping: checkpoint, then exit 75\n")
    r, w = os.pipe()
    os.write(w, given)
    os.close(w)
    out = io.StringIO()
    with os.fdopen(r, "rb") as src:
        _Watch().pump(src, out)
    assert out.getvalue() == "epoch 3 loss 0.5\rnnlo: stopping: checkpoint, then exit 75\n"


@pytest.mark.parametrize("reason, expect", [("signal", 75), ("completed", 130)])
def test_a_launcher_ended_by_a_second_ctrl_c_after_the_stop_checkpoint_still_exits_75(
        launches: list, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        reason: str, expect: int) -> None:
    """The first Ctrl-C checkpoints; a second one after that checkpoint was complete made Hydra abort (130, its
    internal errors): the run had stopped with its checkpoint all the same, so -n exits 75 and says how to go on.
    A checkpoint that is not the stop's (an interval checkpoint: the stop had not written its own) changes
    nothing."""
    import json

    from nnlo.contract import MANIFEST_FILE
    from nnlo_sched import payload

    def launch(n: int, argv: list[str]) -> int:  # the ranks as far as the run folder shows them
        ckpt = tmp_path / "nnlo-runs" / "m" / "checkpoints" / "ckpt-e0003-u00000030"
        ckpt.mkdir(parents=True)
        (ckpt / "weights.npy").write_bytes(b"w")
        (ckpt / MANIFEST_FILE).write_text(json.dumps({"epoch": 3, "parts": ["weights.npy"], "stopped_reason": reason}))
        return 130

    monkeypatch.setattr(payload, "relaunch", launch)
    code, _, err = run(capsys, "train", "-n", "2", "--model", "m.py", "--no-check", "--epochs", "5")
    assert code == expect
    assert ("continue with: nnlo train -n 2 --model m.py --no-check --epochs 5 --restore auto" in err) == (expect == 75)
