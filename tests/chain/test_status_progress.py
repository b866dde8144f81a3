"""What `nnlo status` reads for progress: the runtime's history.json and the search's best.json; absence is fine."""
from __future__ import annotations

import json

from nnlo_sched.commands.status import _fmt_jobs, _fmt_progress
from nnlo_sched.status import progress
from nnlo_sched.spec import RunSpec


def test_training_progress_from_history(tmp_path):
    spec = RunSpec.from_argv(kind="train", args=["--model", "m.py", "--epochs=40"], cluster="local")
    assert progress(tmp_path, spec)["epoch"] is None and _fmt_progress(progress(tmp_path, spec)) == "-"
    (tmp_path / "history.json").write_text(json.dumps({
        "history": [{"epoch": 1, "val_loss": 0.9}, {"epoch": 2, "val_loss": 0.5}, {"epoch": 3, "val_loss": 0.7}],
        "best": {"epoch": 2, "val_loss": 0.5}}))
    p = progress(tmp_path, spec)
    assert (p["epoch"], p["epochs"], p["best"], p["best_name"]) == (3, 40, 0.5, "val_loss")
    assert _fmt_progress(p) == "epoch 3/40"


def test_search_progress_from_best_json(tmp_path):
    spec = RunSpec.from_argv(kind="optimize", args=["--model", "m.py"], cluster="local")
    (tmp_path / "best.json").write_text(json.dumps({"trials_done": 7, "trials_total": 20, "best_fom": 0.12,
                                                    "fom_name": "val_loss"}))
    p = progress(tmp_path, spec)
    assert _fmt_progress(p) == "7/20 trials" and p["best"] == 0.12


def test_a_scheduled_search_shows_its_trials_per_rung(tmp_path):
    spec = RunSpec.from_argv(kind="optimize", args=["--model", "m.py", "--schedule", "asha", "--epochs", "9"], cluster="local")
    (tmp_path / "best.json").write_text(json.dumps({"trials_done": 30, "trials_total": 30, "best_fom": 0.12,
                                                    "fom_name": "val_loss", "rungs": {"1": 20, "3": 7, "9": 3}}))
    assert _fmt_progress(progress(tmp_path, spec)) == "30/30 trials (at epochs 1:20 3:7 9:3)"


def test_corrupt_files_do_not_break_status(tmp_path):
    spec = RunSpec.from_argv(kind="train", args=["--model", "m.py"], cluster="local")
    (tmp_path / "history.json").write_text("{not json")
    assert progress(tmp_path, spec)["epoch"] is None


def test_long_chains_are_shortened_in_the_table():
    view = {"jobs": [{"job_id": str(i), "status": "walltime", "scheduler_state": None} for i in range(1, 9)]
            + [{"job_id": "9", "status": "running", "scheduler_state": "RUNNING"},
               {"job_id": "10", "status": "queued", "scheduler_state": "PENDING"}]}
    assert _fmt_jobs(view) == "1>…>9*>10…"


def test_a_staged_search_says_at_which_fidelity_its_best_was_reached_and_how_well_rungs_agree(tmp_path):
    from nnlo_sched.commands.status import _fmt_best, _fmt_correlation

    spec = RunSpec.from_argv(kind="optimize", args=["--model", "m.py", "--schedule", "asha", "--epochs", "27"],
                             cluster="local")
    low = {"top_rung": 3, "top_epochs": 27, "low": True,
           "rungs": [{"rung": 0, "epochs": 1, "n": 9, "rho": 0.36}, {"rung": 1, "epochs": 3, "n": 9, "rho": 0.79}]}
    (tmp_path / "best.json").write_text(json.dumps({
        "trials_done": 27, "trials_total": 27, "best_fom": 0.209, "fom_name": "val_loss", "best_epochs": 27,
        "best_rung": 3, "rungs": {"1": 18, "3": 6, "27": 3},
        "best_any": {"trial": 5, "fom": 0.127, "epochs": 3, "rung": 1}, "rung_correlation": low}))
    p = progress(tmp_path, spec)
    assert _fmt_best(p) == ("; best val_loss 0.209 at 27 epochs (the most any trial trained); best at any fidelity "
                            "0.127 (trial 5 at 3 epochs)")
    assert _fmt_best(p, short=True) == "0.209@27ep, 0.127@3ep"
    line = _fmt_correlation(p)
    assert line.startswith("rank correlation with 27 epochs: 1 epochs 0.36 (n 9), 3 epochs 0.79 (n 9) - low: ")
    assert "--min-epochs" in line and "--schedule hyperband" in line
    hb = RunSpec.from_argv(kind="optimize", args=["--model", "m.py", "--schedule", "hyperband", "--epochs", "27"],
                           cluster="local")
    assert "--schedule hyperband" not in progress(tmp_path, hb)["advice"]
    (tmp_path / "best.json").write_text(json.dumps({
        "trials_done": 27, "best_fom": 0.1, "fom_name": "val_loss", "best_epochs": 27, "rungs": {"27": 3},
        "rung_correlation": {**low, "low": False}}))
    p = progress(tmp_path, spec)
    assert p["advice"] is None and not _fmt_correlation(p).endswith("hyperband)")
    assert _fmt_best(p) == "; best val_loss 0.1 at 27 epochs (the most any trial trained)"
