"""A script run without processes: its words and checks before queueing, the contract a job's code reads
(nnlo.job), and how the payload turns the script's exit and errors into the job's status."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import nnlo
from nnlo import job
from nnlo.config import TrainConfig
from nnlo.contract import ENV_DEADLINE, ENV_RUN_DIR, EXIT_FAILED, EXIT_RESUMABLE, PROGRESS_FILE
from nnlo.errors import ConfigError
from nnlo_sched.checks import check_script
from nnlo_sched.inner import SCRIPT, parse_inner
from nnlo_sched.payload import run_script
from nnlo_sched.spec import RunSpec, checkpoint_dir


@pytest.mark.parametrize("argv", [[], [""], ["--lr", "1"]])
def test_a_script_run_needs_its_file_first(argv) -> None:
    with pytest.raises(ConfigError, match=r"^script needs the Python file to run first"):
        parse_inner(SCRIPT, argv)


def test_the_script_file_must_exist_and_compile(tmp_path) -> None:
    with pytest.raises(ConfigError, match=r"^script nope\.py: no such file"):
        check_script("nope.py", tmp_path)
    (tmp_path / "bad.py").write_text("x = 1\ndef f(:\n")
    with pytest.raises(ConfigError, match=rf"^script {tmp_path}/bad\.py:2: "):
        check_script("bad.py", tmp_path)
    (tmp_path / "ok.py").write_text("import not_installed_anywhere\n")  # compiled, never run
    check_script("ok.py", tmp_path)


def test_the_words_are_kept_verbatim_through_the_spec(tmp_path) -> None:
    words = ["mine.py", "--lr", "0.1", "two words; $HOME 'q'", "--epochs"]  # --epochs: the script's, not nnlo's
    spec = RunSpec.of(parse_inner(SCRIPT, words), words, "local", workers=2)
    back = RunSpec.from_json(spec.to_json())
    assert back.kind == SCRIPT and back.args == words and back.search is None
    assert checkpoint_dir(tmp_path, back) == tmp_path  # nothing noted yet: the run folder


def test_the_contract_inside_and_outside_a_job(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv(ENV_RUN_DIR, raising=False)
    monkeypatch.delenv(ENV_DEADLINE, raising=False)
    config = TrainConfig(model="m.py")
    assert job.chained_config(config, "x") is config and job.run_dir() is None and nnlo.seconds_left() is None
    nnlo.checkpointed(tmp_path / "ck")  # outside a job: records nothing
    assert not (tmp_path / PROGRESS_FILE).exists()
    job.end_if_resumable(True)  # outside a job: returns

    monkeypatch.setenv(ENV_RUN_DIR, str(tmp_path))
    monkeypatch.setenv(ENV_DEADLINE, "1000")
    assert nnlo.deadline() == 1000.0 and nnlo.seconds_left(now=900.0) == 100.0
    chained = job.chained_config(config, str(tmp_path / "m"))
    assert (chained.checkpoint, chained.restore) == (str(tmp_path / "m"), "auto")
    own = job.chained_config(config.replace(checkpoint="mine", restore="old"), "x")
    assert (own.checkpoint, own.restore) == ("mine", "old")  # what the script said wins
    assert job.progress_marker(tmp_path) is None
    nnlo.checkpointed(tmp_path / "ck1")
    first = job.progress_marker(tmp_path)
    job.working_in(tmp_path / "m")
    assert job.progress_marker(tmp_path) == first  # noting the folder is not progress
    nnlo.checkpointed(tmp_path / "ck2")
    assert job.progress_marker(tmp_path) not in (None, first)
    assert json.loads((tmp_path / PROGRESS_FILE).read_text())["folder"] == str(tmp_path / "m")
    with pytest.raises(SystemExit) as stop:
        job.end_if_resumable(True)
    assert stop.value.code == nnlo.EXIT_RESUMABLE == EXIT_RESUMABLE
    job.end_if_resumable(False)


def test_the_payload_returns_the_scripts_exit_and_names_its_error(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setattr(sys, "path", list(sys.path))
    (tmp_path / "helper.py").write_text("def fail(x):\n    raise ValueError(f'bad value {x}')\n")
    (tmp_path / "stop.py").write_text("import sys\nassert sys.argv[1:] == ['a b', '-x']\nsys.exit(75)\n")
    (tmp_path / "boom.py").write_text("import helper\n\nhelper.fail(3)\n")
    (tmp_path / "done.py").write_text("x = 1\n")
    assert run_script([str(tmp_path / "stop.py"), "a b", "-x"]) == EXIT_RESUMABLE
    assert run_script([str(tmp_path / "done.py")]) == 0
    assert run_script([str(tmp_path / "boom.py")]) == EXIT_FAILED
    err = capsys.readouterr().err
    assert f'File "{tmp_path}/boom.py", line 3' in err and "runpy" not in err  # the user's frames only
    assert err.rstrip().splitlines()[-1] == f"nnlo: error: ValueError in {tmp_path}/helper.py:2: bad value 3"


def test_a_script_runs_arguments_are_not_changed_on_resume(tmp_path) -> None:
    from nnlo.contract import SPEC_FILE
    from nnlo_sched.runs import change_inner_options

    words = ["mine.py", "--lr", "0.1"]
    (tmp_path / SPEC_FILE).write_text(RunSpec.of(parse_inner(SCRIPT, words), words, "local").to_json())
    before = (tmp_path / SPEC_FILE).read_text()
    with pytest.raises(ConfigError, match=r"^a script run's arguments are the script's own \(mine\.py --lr 0\.1\); "):
        change_inner_options(tmp_path, ["--epochs", "9"])
    assert (tmp_path / SPEC_FILE).read_text() == before


def test_the_python_submission_api_takes_a_script_run_and_checks_its_file(tmp_path, monkeypatch) -> None:
    from nnlo_sched import api

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NNLO_HOME", str(tmp_path / "runs"))
    (tmp_path / "mine.py").write_text("print('hi')\n")
    spec = api.spec(SCRIPT, ["mine.py", "--lr", "0.1"], "local", workers=2)
    assert spec.name == "mine" and spec.args == ["mine.py", "--lr", "0.1"] and spec.layout is not None
    assert spec.layout.world_size == 3 and spec.layout.kind == SCRIPT  # a master and the two workers, as for a training
    found = api.preflight(spec)
    assert "mine.py" not in found.script  # the words live in spec.json, never in the shell script
    (tmp_path / "mine.py").write_text("def (\n")
    with pytest.raises(ConfigError, match=r"mine\.py:1: "):
        api.preflight(spec, check=False)  # the file compiles, whatever --no-check says


def test_a_scripts_stop_question_and_the_guard_leave_the_process_as_they_found_it(tmp_path, monkeypatch) -> None:
    """``nnlo.stop_requested()`` asked inside a script run by the payload installs the runtime's stop handler
    (nnlo.script_stop); both are put back when the script ends (here a test's process)."""
    import signal

    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delenv(ENV_DEADLINE, raising=False)
    before = {s: signal.getsignal(s) for s in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGINT)}
    (tmp_path / "asks.py").write_text(
        "import signal, sys\nimport nnlo\n"
        "assert not nnlo.stop_requested()\n"
        "assert getattr(signal.getsignal(signal.SIGTERM), '__self__', None).__class__.__name__ == 'Stop'\n"
        "sys.exit(0 if callable(signal.getsignal(signal.SIGUSR1)) else 3)\n")
    assert run_script([str(tmp_path / "asks.py")]) == 0
    assert {s: signal.getsignal(s) for s in before} == before
