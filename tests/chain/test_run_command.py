"""The job payload's inner command line: checkpoint into the run, restore only from a complete checkpoint."""
from __future__ import annotations

import json

from nnlo_sched.chain import checkpoint_dir, checkpoint_marker
from nnlo_sched.commands.run import inner_argv
from nnlo_sched.spec import RunSpec


def _run_dir(tmp_path, args, kind="train"):
    spec = RunSpec(kind=kind, args=args, cluster="local", workdir=str(tmp_path))
    d = tmp_path / "run"
    d.mkdir()
    (d / "spec.json").write_text(spec.to_json())
    return d, spec


def _checkpoint(base, name, complete=True):
    p = base / "checkpoints" / name
    p.mkdir(parents=True)
    if complete:
        (p / "manifest.json").write_text(json.dumps({"format": 1, "epoch": 1, "updates": 5}))


def test_fresh_run_checkpoints_into_the_run_directory(tmp_path):
    d, _ = _run_dir(tmp_path, ["--model", "m.py", "--epochs", "3"])
    kind, args = inner_argv(d)
    assert kind == "train" and args == ["--model", "m.py", "--epochs", "3", "--checkpoint", str(d)]


def test_an_incomplete_checkpoint_is_not_restored_a_complete_one_is(tmp_path):
    d, spec = _run_dir(tmp_path, ["--model", "m.py", "--restore=elsewhere"])
    _checkpoint(d, "ckpt-e0001-u00000005", complete=False)
    assert "--restore" not in inner_argv(d)[1]
    assert checkpoint_marker(d, spec) is None
    _checkpoint(d, "ckpt-e0002-u00000010")
    args = inner_argv(d)[1]
    assert args[-4:] == ["--checkpoint", str(d), "--restore", str(d)] and "elsewhere" not in args


def test_a_users_own_checkpoint_folder_is_kept(tmp_path):
    d, spec = _run_dir(tmp_path, ["--model", "m.py", "--checkpoint", "mine"])
    assert checkpoint_dir(d, spec) == tmp_path / "mine"
    _checkpoint(tmp_path / "mine", "ckpt-e0001-u00000005")
    assert inner_argv(d)[1][-4:] == ["--checkpoint", str(tmp_path / "mine"), "--restore", str(tmp_path / "mine")]
    first = checkpoint_marker(d, spec)
    _checkpoint(tmp_path / "mine", "ckpt-e0002-u00000009")
    assert checkpoint_marker(d, spec) not in (None, first)


def test_an_optimization_keeps_its_argv_and_its_state_file_is_its_checkpoint(tmp_path):
    d, spec = _run_dir(tmp_path, ["--model", "m.py", "--num-iterations", "4"], kind="optimize")
    assert inner_argv(d) == ("optimize", ["--model", "m.py", "--num-iterations", "4"])
    assert checkpoint_marker(d, spec) is None
    (d / "optimizer-state.json").write_text("{}")
    assert checkpoint_marker(d, spec) is not None
