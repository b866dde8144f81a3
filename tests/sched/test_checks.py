"""Checks before queueing: a submit or dry-run naming a missing model, list, HDF5 file or dataset fails in one
line with exit 2, queues nothing and leaves no run directory; a valid one renders; ``--no-check`` skips."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import h5py
import numpy as np
import pytest

from tests.sched.cli_runner import run

TINY = """from torch import nn


def get_model(hidden=16):
    return nn.Sequential(nn.Linear(8, hidden), nn.Tanh(), nn.Linear(hidden, 3))
"""
SEARCHABLE = TINY + """

from skopt.space import Integer
get_model.parameter_range = [Integer(4, 32, name="hidden")]
"""


def h5(path: Path, names: tuple[str, ...] = ("features", "labels"), rows: int = 6) -> Path:
    with h5py.File(path, "w") as f:
        for n in names:
            f[n] = np.zeros((rows, 8 if n == "features" else 3), dtype=np.float32)
    return path


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory with a model, two data files and their lists; runs go to ./home."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NNLO_HOME", str(tmp_path / "home"))
    (tmp_path / "model.py").write_text(TINY)
    (tmp_path / "search.py").write_text(SEARCHABLE)
    data = tmp_path / "data"
    data.mkdir()
    h5(data / "a.h5")
    h5(data / "b.h5")
    (tmp_path / "train.list").write_text("data/a.h5\n")
    (tmp_path / "val.list").write_text(f"{data / 'b.h5'}\n")
    return tmp_path


def submit(capsys: pytest.CaptureFixture[str], kind: str, *inner: str, dry_run: bool = True,
           extra: tuple[str, ...] = ()) -> tuple[int, str, str]:
    size = ["--blocks", "1"] if kind == "optimize" else ["--workers", "1"]
    argv = ["submit", "-c", "local", *size, *extra, *(["--dry-run"] if dry_run else []), kind, *inner]
    return run(capsys, *argv)


def refused(code: int, err: str, *needles: str) -> None:
    lines = [ln for ln in err.splitlines() if ln.startswith("nnlo: error:")]
    assert code == 2 and len(lines) == 1, err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.slow
def test_a_valid_run_renders_and_its_checks_pass(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = submit(capsys, "train", "--model", "model.py", "--train", "train.list", "--val", "val.list")
    assert code == 0, err
    assert out.startswith("#!/bin/bash") and "# --- dry run" in out
    assert not (project / "home").exists()


@pytest.mark.parametrize("dry_run", [True, False])
@pytest.mark.parametrize("case, needles", [
    ("no model", ("nope.py", "does not exist")),
    ("no list", ("missing.list", "does not exist")),
    ("no h5 file", ("gone.h5", "does not exist")),
    ("no dataset", ("a.h5", "'labels'")),
    ("no get_model", ("no_get_model.py", "get_model")),
    ("broken import", ("broken.py", "ZeroDivisionError")),
])
def test_bad_inputs_are_refused_before_anything_is_queued(probe_in_process: None, project: Path, capsys: pytest.CaptureFixture[str],
                                                          case: str, needles: tuple[str, ...],
                                                          dry_run: bool) -> None:
    inner = ["--model", "model.py", "--train", "train.list"]
    if case == "no model":
        inner[1] = "nope.py"
    elif case == "no list":
        inner[3] = "missing.list"
    elif case == "no h5 file":
        (project / "train.list").write_text("data/a.h5\ndata/gone.h5\n")
    elif case == "no dataset":
        h5(project / "data" / "a.h5", names=("features",))
    elif case == "no get_model":
        (project / "no_get_model.py").write_text("def build():\n    return None\n")
        inner[1] = "no_get_model.py"
    elif case == "broken import":
        (project / "broken.py").write_text("x = 1 / 0\n\ndef get_model():\n    return None\n")
        inner[1] = "broken.py"
    before = sorted(p.name for p in project.iterdir())
    code, out, err = submit(capsys, "train", *inner, dry_run=dry_run)
    refused(code, err, *needles)
    assert out == ""
    assert sorted(p.name for p in project.iterdir()) == before  # no run directory, no runs home, nothing


def test_a_model_without_data_and_without_get_train_is_refused(probe_in_process: None, project: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = submit(capsys, "train", "--model", "model.py")
    refused(code, err, "no training data", "--train")


def test_data_from_the_model_module_is_checked(probe_in_process: None, project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (project / "withdata.py").write_text(TINY + f"\n\ndef get_train():\n    return [{str(project / 'data' / 'a.h5')!r}]"
                                         "\n\n\ndef get_features():\n    return 'inputs'\n")
    code, _, err = submit(capsys, "train", "--model", "withdata.py")
    refused(code, err, "a.h5", "'inputs'", "get_train() of withdata.py")
    code, out, err = submit(capsys, "train", "--model", "withdata.py", "--features-name", "features")
    assert code == 0, err


def test_a_search_space_is_checked(probe_in_process: None, project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = submit(capsys, "optimize", "--model", "model.py", "--train", "train.list")
    refused(code, err, "declares no search space")
    (project / "bad.py").write_text(TINY + "\nget_model.parameter_range = ['hidden']\n")
    code, _, err = submit(capsys, "optimize", "--model", "bad.py", "--train", "train.list")
    assert code == 2 and "Traceback" not in err, err
    code, out, err = submit(capsys, "optimize", "--model", "search.py", "--train", "train.list")
    assert code == 0, err


@pytest.mark.parametrize("kind, option, needle", [
    ("optimize", ("--space", "space.toml"), "--space space.toml"),
    ("train", ("--restore", "old-run"), "--restore old-run"),
    ("optimize", ("--opt-restore", "--output", "old-search"), "old-search"),
])
def test_paths_of_space_restore_and_opt_restore_must_exist(project: Path, capsys: pytest.CaptureFixture[str],
                                                           kind: str, option: tuple[str, ...], needle: str) -> None:
    code, _, err = submit(capsys, kind, "--model", "search.py", "--train", "train.list", *option)
    refused(code, err, needle)


def test_a_huge_list_is_sampled_and_says_so(probe_in_process: None, project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    names = [f"data/f{i:03d}.h5" for i in range(30)]
    for n in names:
        h5(project / n)
    (project / "big.list").write_text("\n".join(names) + "\n")
    code, _, err = submit(capsys, "train", "--model", "model.py", "--train", "big.list")
    assert code == 0, err
    assert "opened 8 of the 30 files of --train big.list (all 30 exist)" in err
    h5(project / names[-1], names=("features",))  # the last file is always among those opened
    code, _, err = submit(capsys, "train", "--model", "model.py", "--train", "big.list")
    refused(code, err, "f029.h5", "'labels'")


@pytest.mark.slow
def test_a_hanging_import_is_stopped_by_the_time_limit(project: Path, capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    (project / "slow.py").write_text("import time\ntime.sleep(60)\n\ndef get_model():\n    return None\n")
    monkeypatch.setenv("NNLO_CHECK_TIMEOUT", "2")
    code, _, err = submit(capsys, "train", "--model", "slow.py", "--train", "train.list")
    refused(code, err, "slow.py", "more than 2 s", "--no-check")


def test_no_check_skips_the_path_checks_and_says_which(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = submit(capsys, "train", "--model", "/only/on/compute/nodes.py", "--train", "/scratch/t.list",
                            extra=("--no-check",))
    assert code == 0, err
    assert "--no-check: skipped the checks of the model file" in err and "data lists" in err
    assert "# --- dry run" in out


def test_an_unwritable_run_home_is_refused(project: Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    if os.geteuid() == 0:
        pytest.skip("root writes everywhere: a read-only folder cannot be tested as root")
    ro = project / "ro"
    ro.mkdir()
    ro.chmod(stat.S_IRUSR | stat.S_IXUSR)
    monkeypatch.setenv("NNLO_HOME", str(ro / "runs"))
    code, _, err = submit(capsys, "train", "--model", "model.py", "--train", "train.list", dry_run=False)
    refused(code, err, "cannot be written")


def test_a_run_home_under_a_file_is_refused(probe_in_process: None, project: Path, capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    (project / "afile").write_text("x")
    monkeypatch.setenv("NNLO_HOME", str(project / "afile" / "runs"))
    code, _, err = submit(capsys, "train", "--model", "model.py", "--train", "train.list", dry_run=False)
    refused(code, err, "afile", "not a folder")


def test_a_submit_option_after_the_inner_command_says_where_it_goes(project: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "submit", "-c", "local", "train", "--model", "model.py", "--nodes", "2")
    refused(code, err, "--nodes is an option of nnlo submit", "put it before the word train")


def test_a_probe_that_died_is_one_line_with_its_cause_and_the_whole_output_in_a_file(tmp_path: Path) -> None:
    """The probe's interpreter died without its answer (the issue's case: an import error before nnlo's own code
    ran): the line names the exception, whole (not a cut middle of the traceback), and where the rest is."""
    from nnlo_sched.checks import probe_failure

    frames = "".join(f'  File "/site/pkg/mod{i}.py", line {i}, in <module>\n    import mod{i + 1}\n' for i in range(40))
    output = ("Traceback (most recent call last):\n  File \"<frozen runpy>\", line 198, in _run_module_as_main\n"
              + frames + "ModuleNotFoundError: No module named 'nnlo.optimize.options'\n")
    error = probe_failure("examples/m.py", 1, output, folder=tmp_path)
    message = str(error)
    assert "\n" not in message and message.startswith("checking examples/m.py failed (exit 1): ")
    assert "ModuleNotFoundError: No module named 'nnlo.optimize.options'" in message and "runpy" not in message
    assert "--no-check" in message
    saved = [p for p in tmp_path.iterdir() if p.name.startswith("nnlo-check-")]
    assert len(saved) == 1 and str(saved[0]) in message and saved[0].read_text() == output
    # nothing said at all: the exit status and that
    assert "no output" in str(probe_failure("m.py", -9, "", folder=tmp_path))
