"""A training's folder is never written over silently (:mod:`nnlo.training.rundir`): an earlier finished or
checkpointed run is continued, refused in one line, or deleted on ``--overwrite`` (and nothing else is)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from nnlo.checkpoint import MANIFEST
from nnlo.config import TrainConfig
from nnlo.errors import ConfigError
from nnlo.training.rundir import claim, earlier_run


def _run(folder: Path, *, checkpoint: bool = True, history: bool = True) -> Path:
    """A folder as a finished training leaves it (checkpoint, history, model, logs), beside a user's file."""
    folder.mkdir(parents=True)
    if checkpoint:
        ck = folder / "checkpoints" / "ckpt-e0003-u00000036"
        ck.mkdir(parents=True)
        (ck / "master.pkl").write_bytes(b"x")
        (ck / MANIFEST).write_text(json.dumps({"epoch": 3, "parts": ["master.pkl"]}))
    if history:
        (folder / "history.json").write_text("{}")
    (folder / "model.pt").write_bytes(b"m")
    (folder / "config.json").write_text("{}")
    (folder / "logs").mkdir()
    (folder / "logs" / "rank-0.log").write_text("old\n")
    (folder / "notes.txt").write_text("mine")
    return folder


CONFIG = TrainConfig(model="m.py")


@pytest.mark.parametrize("checkpoint, history, shown", [(True, True, "checkpoint ckpt-e0003-u00000036"),
                                                         (False, True, "history.json, model.pt"),
                                                         (False, False, "model.pt")])
def test_a_folder_holding_a_run_is_refused_in_one_line_with_the_ways_on(tmp_path, checkpoint, history, shown):
    folder = _run(tmp_path / "run", checkpoint=checkpoint, history=history)
    assert earlier_run(folder) == shown
    with pytest.raises(ConfigError) as e:
        claim(folder, CONFIG)
    message = str(e.value)
    assert "\n" not in message and f"already holds a run ({shown})" in message
    for way in ("--restore auto", "--checkpoint", "--overwrite"):
        assert way in message
    assert (folder / "history.json").exists() == history and (folder / "model.pt").read_bytes() == b"m"


def test_an_empty_or_new_folder_and_a_continued_run_are_taken(tmp_path):
    claim(tmp_path / "new", CONFIG)
    (tmp_path / "only-config").mkdir()
    (tmp_path / "only-config" / "config.json").write_text("{}")  # a run that failed before its first epoch
    claim(tmp_path / "only-config", CONFIG)
    folder = _run(tmp_path / "run")
    claim(folder, CONFIG.replace(restore="auto"))
    claim(folder, CONFIG.replace(restore=str(folder)))  # its own checkpoint
    claim(folder, CONFIG.replace(restore=str(folder / "checkpoints" / "ckpt-e0003-u00000036")))
    claim(folder, CONFIG, chained=True)  # a job of a submitted chain continues its own run
    assert (folder / "history.json").exists()


def test_restoring_another_run_into_a_folder_holding_a_run_is_refused(tmp_path):
    other = _run(tmp_path / "other")
    folder = _run(tmp_path / "run")
    with pytest.raises(ConfigError, match="already holds a run"):
        claim(folder, CONFIG.replace(restore=str(other)))


def test_overwrite_deletes_the_earlier_runs_files_and_nothing_else(tmp_path):
    folder = _run(tmp_path / "run")
    claim(folder, CONFIG.replace(overwrite=True))
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt"]
    assert earlier_run(folder) is None


def test_overwrite_and_restore_contradict_each_other():
    with pytest.raises(ConfigError, match="--overwrite starts the run afresh and --restore auto continues"):
        CONFIG.replace(overwrite=True, restore="auto").validate()


def test_a_python_api_caller_is_told_the_ways_on_as_keyword_arguments(tmp_path):
    """nnlo.train(...)'s caller passes restore="auto" / checkpoint= / overwrite=True, not the command line's
    options: the refusal says those."""
    folder = _run(tmp_path / "run")
    with pytest.raises(ConfigError) as e:
        claim(folder, CONFIG, python=True)
    message = str(e.value)
    for way in ('restore="auto"', "checkpoint=", "overwrite=True"):
        assert way in message
    assert "--" not in message
