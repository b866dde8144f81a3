"""Damaged files: a truncated or garbled checkpoint, run state record, HDF5 file or search state.

Each must give ONE line naming the file and what to do (exit status 2), never a traceback, and must not
destroy anything: the damaged file and every good file beside it are left as they were, so the user can
restore an older checkpoint or move the bad file away.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers.faults import BRANIN, RUNTIME_MODELS, error_lines, nnlo, nnlo_argv, subprocess_env, submitted_run
from tests.helpers.world import MpiWorld, WorldRun
from nnlo.checkpoint import MANIFEST, list_checkpoints

ARGS = ["--model", str(RUNTIME_MODELS / "tiny.py"), "--mode", "downpour", "--batch", "16",
        "--checkpoint-interval", "1"]


def _digests(folder: Path) -> dict[str, str]:
    """The run's data: not its logs, nor ranks/ (each attempt records its own ranks, refused or not)."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and not {"logs", "ranks"} & set(p.parts)}


def _one_line(proc, *needles: str, rc: int = 2) -> str:
    assert proc.returncode == rc, proc.stderr[-3000:]
    lines = error_lines(proc.stderr)
    assert len(lines) == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def train(world: MpiWorld, *args: str) -> WorldRun:
    """``mpirun -np 2 nnlo train ARGS``, run in the warm MPI world: what is tested is the restore and the
    error line, not the launch (a failure on every rank before any exchange, exit 2, keeps the world)."""
    return world.run(2, ["train", *ARGS, *args], env=subprocess_env(), timeout=300)


@pytest.fixture(scope="module")
def trained(blobs, tmp_path_factory: pytest.TempPathFactory, mpi_world: MpiWorld) -> Path:
    """A finished 2-epoch run with a checkpoint per epoch (copied by each test before damaging it)."""
    out = tmp_path_factory.mktemp("trained") / "run"
    proc = train(mpi_world, "--epochs", "2", "--train", str(blobs["train"]), "--val", str(blobs["val"]),
                 "--checkpoint", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(list_checkpoints(out / "checkpoints")) == 2
    return out


@pytest.mark.mpi
@pytest.mark.parametrize("damage", ["truncated part"])  # a garbled manifest: test_checkpoint_kills.py, in-process
def test_a_damaged_newest_checkpoint_is_one_line_and_an_older_one_still_restores(
        damage: str, trained: Path, blobs, tmp_path: Path, mpi_world: MpiWorld) -> None:
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    older, newest = list_checkpoints(run / "checkpoints")
    if damage == "truncated part":
        part = newest / "worker-0.pkl"
        part.write_bytes(part.read_bytes()[: part.stat().st_size // 2])
        needles = ("worker-0.pkl", "older checkpoint")
    elif damage == "garbled manifest":
        (newest / MANIFEST).write_text('{"format": 1, "epoch": 2, "upd')
        needles = ("manifest.json", "corrupt", "older checkpoint")
    before = _digests(run / "checkpoints")
    data = ["--train", str(blobs["train"]), "--val", str(blobs["val"])]
    proc = train(mpi_world, "--epochs", "3", *data, "--checkpoint", str(run), "--restore", "auto")
    _one_line(proc, *needles)
    assert _digests(run / "checkpoints") == before, "a failed restore changed the checkpoints"
    if damage != "truncated part":
        return  # one real restore of the older checkpoint is enough (each run costs seconds of MPI start-up)
    proc = train(mpi_world, "--epochs", "3", *data, "--checkpoint", str(run), "--restore", str(older))
    assert proc.returncode == 0, proc.stderr[-3000:]
    history = json.loads((run / "history.json").read_text())
    assert [e["epoch"] for e in history["history"]] == [1, 2, 3]


@pytest.mark.mpi
def test_a_truncated_hdf5_file_is_one_line(blobs, tmp_path: Path, mpi_world: MpiWorld) -> None:
    data = tmp_path / "data"
    shutil.copytree(blobs["dir"], data)
    h5 = data / "train_0.h5"
    h5.write_bytes(h5.read_bytes()[: h5.stat().st_size // 3])
    proc = train(mpi_world, "--epochs", "1", "--train", str(data / "train.list"), "--checkpoint", str(tmp_path / "run"))
    _one_line(proc, "train_0.h5")


@pytest.mark.slow
@pytest.mark.parametrize("text", [
    '{"run_id": "x", "jobs": [', "", "\x00\x01garbage",
    '["a list"]',
])
def test_a_damaged_state_record(site: Path, text: str) -> None:
    """status lists the damaged run (and the others) without failing; commands on it say what is wrong."""
    bad = submitted_run(site, "bad")
    good = submitted_run(site, "good")
    (bad / "state.json").write_text(text)
    listing = nnlo("status")
    assert listing.returncode == 0 and "Traceback" not in listing.stderr, listing.stderr
    assert bad.name in listing.stdout and good.name in listing.stdout, listing.stdout
    for command in (["status", bad.name], ["cancel", bad.name], ["resume", bad.name]):
        proc = nnlo(*command)
        _one_line(proc, "state.json")
    assert (bad / "state.json").read_text() == text


@pytest.mark.parametrize("text", ['"a string"', "null", '{"run_id": "x", "jobs": ["not a job"]}',
                                  '{"run_id": "x", "jobs": {"1": {}}}'])
def test_a_state_record_of_the_wrong_shape_is_a_state_error(tmp_path: Path, text: str) -> None:
    """Valid JSON that is no run record (in-process: the CLI path is covered by the list case above)."""
    from nnlo_sched.state import StateError, read_state

    (tmp_path / "state.json").write_text(text)
    with pytest.raises(StateError, match=r"state\.json is corrupt"):
        read_state(tmp_path)


@pytest.mark.mpi
def test_damaged_search_state_is_one_line_and_kept(mpirun: str, tmp_path: Path) -> None:
    """A search's saved state garbled: --opt-restore refuses in one line and overwrites nothing."""
    out = tmp_path / "search"
    base = [mpirun, "-np", "3", *_optimize_argv(out)]
    proc = subprocess.run(base, capture_output=True, text=True, timeout=300, env=subprocess_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    state = out / "optimizer-state.json"
    state.write_text(state.read_text()[:40])
    before = _digests(out)
    proc = subprocess.run([*base, "--opt-restore"], capture_output=True, text=True, timeout=300,
                          env=subprocess_env())
    _one_line(proc, "optimizer-state.json")
    assert _digests(out) == before


def _optimize_argv(out: Path) -> list[str]:
    return nnlo_argv("optimize", "--model", str(BRANIN), "--block-size", "2", "--hyper-opt", "random",
                     "--num-iterations", "4", "--output", str(out))
