"""The job payload's options (read from the typed spec): checkpoint into the run, restore only from a complete
checkpoint, the job's deadline; a spec written before the typed record still loads."""
from __future__ import annotations

import json

import pytest

from nnlo.optimize.state import save_state
from nnlo_sched.chain import checkpoint_marker
from nnlo_sched.payload import job_config
from nnlo_sched.spec import RunSpec, checkpoint_dir, load_spec


def _run_dir(tmp_path, args, kind="train"):
    spec = RunSpec.from_argv(kind=kind, args=args, cluster="local", workdir=str(tmp_path))
    d = tmp_path / "run"
    d.mkdir()
    (d / "spec.json").write_text(spec.to_json())
    return d, spec


def _checkpoint(base, name, complete=True):
    p = base / "checkpoints" / name
    p.mkdir(parents=True)
    if complete:
        (p / "manifest.json").write_text(json.dumps({"format": 1, "epoch": 1, "updates": 5}))


def test_fresh_run_checkpoints_into_the_run_directory(tmp_path, monkeypatch):
    monkeypatch.delenv("NNLO_DEADLINE", raising=False)
    d, _ = _run_dir(tmp_path, ["--model", "m.py", "--epochs", "3"])
    cfg = job_config(d)
    assert (cfg.model, cfg.epochs, cfg.checkpoint, cfg.restore, cfg.deadline) == ("m.py", 3, str(d), None, None)


def test_an_incomplete_checkpoint_is_not_restored_a_complete_one_is(tmp_path):
    d, spec = _run_dir(tmp_path, ["--model", "m.py", "--restore=elsewhere"])
    _checkpoint(d, "ckpt-e0001-u00000005", complete=False)
    assert job_config(d).restore is None
    assert checkpoint_marker(d, spec) is None
    _checkpoint(d, "ckpt-e0002-u00000010")
    cfg = job_config(d)
    assert (cfg.checkpoint, cfg.restore) == (str(d), str(d))


def test_a_users_own_checkpoint_folder_is_kept(tmp_path):
    d, spec = _run_dir(tmp_path, ["--model", "m.py", "--checkpoint", "mine"])
    assert checkpoint_dir(d, spec) == tmp_path / "mine"
    _checkpoint(tmp_path / "mine", "ckpt-e0001-u00000005")
    cfg = job_config(d)
    assert (cfg.checkpoint, cfg.restore) == (str(tmp_path / "mine"), str(tmp_path / "mine"))
    first = checkpoint_marker(d, spec)
    _checkpoint(tmp_path / "mine", "ckpt-e0002-u00000009")
    assert checkpoint_marker(d, spec) not in (None, first)


def test_the_deadline_is_the_jobs_unless_the_command_gave_one(tmp_path, monkeypatch):
    monkeypatch.setenv("NNLO_DEADLINE", "1900000000")  # in the submitting shell: must not be stored
    d, spec = _run_dir(tmp_path, ["--model", "m.py"])
    assert spec.train.deadline is None
    monkeypatch.setenv("NNLO_DEADLINE", "2000000000")  # the job's
    assert job_config(d).deadline == 2000000000.0
    d2 = tmp_path / "explicit"
    d2.mkdir()
    (d2 / "spec.json").write_text(RunSpec.from_argv("train", ["--model", "m.py", "--deadline", "2100000000"], "local").to_json())
    assert job_config(d2).deadline == 2100000000.0
    monkeypatch.setenv("NNLO_DEADLINE", "soon")
    with pytest.raises(Exception, match="NNLO_DEADLINE"):
        job_config(d)


def test_an_optimization_keeps_its_options_and_its_results_are_its_progress(tmp_path, monkeypatch):
    d, spec = _run_dir(tmp_path, ["--model", "m.py", "--num-iterations", "4"], kind="optimize")
    assert spec.search is not None and spec.search.num_iterations == 4
    assert load_spec(d).search == spec.search
    assert job_config(d).checkpoint is None  # a search checkpoints into its run directory itself
    assert checkpoint_marker(d, spec) is None
    monkeypatch.setenv("NNLO_RUN_DIR", str(d))
    save_state(d, {"finished": []})  # a save with no result (every job's start) is no progress
    assert checkpoint_marker(d, spec) is None
    save_state(d, {"finished": [{"id": 0, "params": {}, "status": "ok"}]})
    assert checkpoint_marker(d, spec) == "1 results"


def test_a_spec_written_before_the_typed_record_loads_from_its_argv(tmp_path):
    old = RunSpec.from_argv("train", ["--model", "m.py", "--epochs=7", "--mode", "allreduce"], "local").to_dict()
    del old["config"], old["search"]
    (tmp_path / "spec.json").write_text(json.dumps(old))
    spec = load_spec(tmp_path)
    assert (spec.train.epochs, spec.train.mode, spec.shape.n_masters) == (7, "allreduce", 0)


def test_the_typed_record_round_trips_and_is_what_readers_use(tmp_path):
    d, spec = _run_dir(tmp_path, ["--model", "m.py", "--epochs", "5"])
    data = json.loads((d / "spec.json").read_text())
    assert data["config"]["epochs"] == 5 and data["args"] == ["--model", "m.py", "--epochs", "5"]
    data["config"]["epochs"] = 9  # the record, not the argv, decides
    (d / "spec.json").write_text(json.dumps(data))
    assert load_spec(d).train.epochs == 9 and job_config(d).epochs == 9


def test_a_damaged_typed_record_is_one_line_naming_the_key(tmp_path):
    d, _ = _run_dir(tmp_path, ["--model", "m.py"], kind="optimize")
    data = json.loads((d / "spec.json").read_text())
    data["search"]["num_iteratons"] = 5  # a typo must not be silently ignored
    (d / "spec.json").write_text(json.dumps(data))
    with pytest.raises(Exception, match="unknown search option.*num_iteratons") as e:
        load_spec(d)
    assert "\n" not in str(e.value)
