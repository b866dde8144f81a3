"""Every bad input ends the whole job with one line naming the cause and the rank; no hang, no traceback.

Bad input runs in the warm MPI world (the ranks' checks and their one line are what is tested), one case through
a real ``mpirun`` (the launch's exit status and merged output); a rank that fails or hangs ends a real job."""
from __future__ import annotations

import h5py
import numpy as np
import pytest

from tests.helpers.runtime import MODELS
from tests.helpers.faults import COMM_LIMIT

pytestmark = [pytest.mark.mpi]


def _one_error(run, *needles: str, rc: int = 2, rank: str | None = None) -> str:
    assert run.rc == rc, (run.rc, run.err)
    lines = run.error_lines()
    assert len(lines) == 1, run.err
    line = lines[0]
    for needle in needles:
        assert needle in line, line
    if rank is not None:
        assert line.startswith(f"nnlo: error: rank {rank} ("), line
    assert "Traceback" not in run.err
    return line


def test_missing_model_file(run_train, tmp_path) -> None:
    run = run_train(2, "--epochs", "1", model=str(tmp_path / "nope.py"), launcher="mpirun")
    _one_error(run, "nope.py", "does not exist", rank="0")


def test_model_without_get_model(run_train) -> None:
    run = run_train(2, "--epochs", "1", model="no_get_model.py")
    _one_error(run, "no_get_model.py", "get_model", rank="0")


def _user_traceback(log: str, where: str) -> list[str]:
    """The rank log's traceback of an error in the user's code: it starts at their frame, none of nnlo's."""
    lines = log.splitlines()
    start = lines.index("Traceback (most recent call last, from your code on):")
    frames = [ln for ln in lines[start:] if ln.startswith('  File "')]
    assert frames[0].startswith(f'  File "{where}'), frames
    assert not [f for f in frames if "/nnlo/" in f or "/nnlo_sched/" in f], frames
    return lines[start:]


def test_get_model_that_raises(run_train) -> None:
    """The one line names the user's file and line; the rank's log has their traceback, the screen none."""
    run = run_train(2, "--epochs", "1", model="build_fails.py")
    _one_error(run, "get_model() raised ValueError: hidden size must be positive", "build_fails.py:5 in get_model)",
               rank="0")
    _user_traceback((run.out_dir / "logs" / "rank-0.log").read_text(), str(MODELS / "build_fails.py"))


def test_list_naming_a_missing_file(run_train, tmp_path, blobs) -> None:
    bad = tmp_path / "bad.list"
    bad.write_text(f"{blobs['dir'] / 'train_0.h5'}\n{tmp_path / 'gone.h5'}\n")
    run = run_train(2, "--train", str(bad), "--epochs", "1", data=False)
    _one_error(run, "gone.h5", "does not exist", rank="1")


def test_dataset_name_absent(run_train) -> None:
    run = run_train(2, "--features-name", "pixels", "--epochs", "1")
    _one_error(run, "no dataset 'pixels'", "--features-name", rank="0")


def test_fewer_samples_than_workers(run_train, tmp_path) -> None:
    with h5py.File(tmp_path / "one.h5", "w") as f:
        f["features"] = np.zeros((1, 8), np.float32)
        f["labels"] = np.eye(3, dtype=np.float32)[[0]]
    (tmp_path / "one.list").write_text("one.h5\n")
    run = run_train(3, "--train", str(tmp_path / "one.list"), "--epochs", "1", data=False)
    _one_error(run, "1 samples cannot be shared by 2 workers", rank="1")


def test_model_raising_on_one_worker_ends_the_job(run_train) -> None:
    run = run_train(3, "--mode", "gem", "--epochs", "50", model="raises_on_rank2.py", launcher="mpirun")
    line = _one_error(run, "deliberate failure in forward", "(at ", "raises_on_rank2.py:14 in forward)", rc=1,
                      rank="2")
    assert "worker" in line
    trace = _user_traceback((run.out_dir / "logs" / "rank-2.log").read_text(), str(MODELS / "raises_on_rank2.py"))
    assert trace[-1] == "RuntimeError: deliberate failure in forward"


def test_a_shape_mistake_in_the_users_forward_is_located_and_debug_shows_its_traceback(run_train) -> None:
    """nn.Linear(7, ...) meets 8 features: one line naming the user's line; at --log-level debug the trimmed
    traceback is on the screen too."""
    run = run_train(1, "--epochs", "1", "--log-level", "debug", model="wrong_width.py")
    assert run.rc == 1 and len(run.error_lines()) == 1, run.err
    assert "mat1 and mat2 shapes cannot be multiplied" in run.error_lines()[0]
    assert run.error_lines()[0].endswith("wrong_width.py:12 in forward)")
    shown = run.err[run.err.index("Traceback (most recent call last, from your code on):"):]
    assert shown.splitlines()[1].startswith(f'  File "{MODELS / "wrong_width.py"}", line 12, in forward')


@pytest.mark.parametrize("mode", [["--mode", "downpour", "--synchronous"], ["--mode", "gem"]])
def test_nan_loss_on_both_workers_prints_one_line(run_train, mode) -> None:
    run = run_train(3, *mode, "--epochs", "2", model="nan_model.py", launcher="mpirun")
    _one_error(run, "loss is nan at epoch 1, batch 1", "lower the learning rate", rc=1)


def test_bad_option_values(run_train) -> None:
    run = run_train(2, "--mode", "gem", "--synchronous", "--epochs", "1")
    _one_error(run, "--synchronous", "--mode downpour", rank="0")
    run = run_train(2, "--early-stopping", "val_loss;<;4", "--epochs", "1")
    _one_error(run, "--early-stopping", "metric,comparison,value", rank="0")
    run = run_train(2, "--worker-optimizer", "sgd:lr=fast", "--epochs", "1")
    _one_error(run, "--worker-optimizer", "lr", rank="0")


def test_contradictory_shapes_are_refused(run_train) -> None:
    run = run_train(2, "--n-masters", "0", "--mode", "gem", "--epochs", "1")
    _one_error(run, "--n-masters 0", "--mode allreduce", rank="0")
    run = run_train(2, "--n-processes", "2", "--epochs", "1")
    _one_error(run, "2 ranks cannot hold 1 master plus workers of 2 rank(s)", "use 3 ranks", rank="0")


def test_a_hanging_worker_ends_the_job_through_the_watchdog(run_train) -> None:
    run = run_train(3, "--mode", "downpour", "--epochs", "3", model="hangs_on_rank2.py",
                    env={"NNLO_COMM_TIMEOUT": COMM_LIMIT}, launcher="mpirun")
    assert run.rc != 0, run.err
    lines = run.error_lines()
    assert lines and f"for more than {COMM_LIMIT} s: a peer died or hangs" in lines[0], run.err
    assert "Traceback" not in run.err
