"""``nnlo optimize`` with a model module as upstream users have one: k-fold from get_train() (mean and spread
over folds), get_name() naming the search, the per-trial options a search overrides (refused or mapped with
one warning line), and the data check before any rank splits off."""
from __future__ import annotations

import json
import os
import sys

import pytest

from nnlo.config import TrainConfig
from nnlo.errors import ConfigError
from nnlo.optimize.options import SearchConfig, trial_overrides
from nnlo.optimize.runners import TrainRunner
from nnlo.roles import Role, describe
from tests.helpers.env import error_lines
from tests.helpers.projects import write_project
from tests.sched import cli_runner


def test_the_documented_13_rank_shape_is_2_blocks_of_2_fold_groups_of_1_master_and_2_workers(project):
    """``nnlo optimize -n 13 --model M.py --block-size 6 --num-iterations 10 --n-fold 2 --epochs 5``."""
    search = SearchConfig(block_size=6, n_fold=2, num_iterations=10)
    hierarchy = describe(13, search.shape(TrainConfig(model=str(project["model"]), epochs=5)))
    assert hierarchy.coordinator == 0 and len(hierarchy.blocks) == 2
    assert [len(b) for b in hierarchy.blocks] == [6, 6] and len(hierarchy.groups) == 4
    for g in hierarchy.groups:
        assert len(g.masters) == 1 and len(g.workers) == 2
    assert sum(1 for r in hierarchy if r.role is Role.WORKER) == 8


def test_get_name_names_the_search_folder_and_its_trials(project, tmp_path, monkeypatch):
    monkeypatch.delenv("NNLO_RUN_DIR", raising=False)
    monkeypatch.chdir(project["root"])
    monkeypatch.setattr(sys, "path", list(sys.path))
    train = TrainConfig(model=str(project["model"]))
    opts = SearchConfig().options(train)
    assert str(opts.out_dir) == "optimize-sibling-mlp" and opts.name == "sibling-mlp"
    named = SearchConfig().options(train.replace(trial_name="scan1"))
    assert str(named.out_dir) == "optimize-scan1"
    cfg = TrainRunner(train, 0, opts.name).config_for({"hidden": 5}, tmp_path / "trials" / "0003" / "fold-1")
    assert cfg.trial_name == "sibling-mlp-0003-fold-1" and cfg.model_args == {"hidden": 5}


def test_options_a_search_overrides_are_refused_or_mapped(tmp_path):
    base = TrainConfig(model="m.py")
    assert trial_overrides(base, tmp_path, "m") == []
    with pytest.raises(ConfigError, match=r"--restore .* --opt-restore"):
        trial_overrides(base.replace(restore="auto"), tmp_path, "m")
    notes = trial_overrides(base.replace(checkpoint="CP", trial_name="t"), tmp_path, "t")
    assert len(notes) == 2
    assert notes[0].startswith("--checkpoint CP") and "trials/<trial>/fold-<f>/checkpoints" in notes[0]
    assert notes[1].startswith("--trial-name t") and "t-<trial>-fold-<f>" in notes[1]


def test_kfold_counts_the_samples_of_get_train(project, monkeypatch):
    monkeypatch.chdir(project["root"])
    monkeypatch.setattr(sys, "path", list(sys.path))
    runner = TrainRunner(TrainConfig(model=str(project["model"])), seed=3)
    assert runner.n_samples() == 96
    train, val = runner.fold_indices(1, 2)
    assert len(train) + len(val) == 96 and not set(train.tolist()) & set(val.tolist())


@pytest.mark.mpi
@pytest.mark.parametrize("ranks, block, launch", [
    (5, "4", "mpirun"),  # fold groups of 2 ranks, as the ranks of an external mpirun run it (the warm world)
    (3, "2", "-n"),  # fold groups of 1 rank (solo), through the relaunch of `nnlo optimize -n`
])
def test_kfold_search_from_get_train_reports_mean_and_spread(project, nnlo_cli, ranks, block, launch):
    """The upstream k-fold command, small: no --train, no --val; get_train() is split into 2 folds; with
    --block-size 2 each fold group is one rank that trains alone. The relaunch is the point of one case only:
    the other shape reaches the same launch code (docs/testing.md, "What was merged or moved")."""
    root = project["root"]
    args = ["optimize", "--model", "models/model.py", "--block-size", block, "--n-fold", "2",
            "--num-iterations", "2", "--epochs", "1", "--batch", "16", "--mode", "downpour",
            "--hyper-opt", "random", "--checkpoint", "CP", "--trial-name", "kf"]
    r = nnlo_cli([*args, "-n", str(ranks)], cwd=root) if launch == "-n" else nnlo_cli(args, cwd=root, mpirun_np=ranks)
    assert r.rc == 0, r.err[-3000:]
    warnings = r.warning_lines()
    assert len(warnings) == 2, r.err[-2000:]
    assert any("--checkpoint CP" in w for w in warnings) and any("--trial-name kf" in w for w in warnings)
    out = root / "optimize-kf"
    trials = json.loads((out / "trials.json").read_text())
    assert [t["status"] for t in trials] == ["ok", "ok"]
    for t in trials:
        assert len(t["fold_foms"]) == 2 and t["fom_std"] is not None
        assert t["fom"] == pytest.approx(sum(t["fold_foms"]) / 2)
        assert t["fom_std"] == pytest.approx(abs(t["fold_foms"][0] - t["fold_foms"][1]) / 2)
        for f in range(2):
            fold = out / "trials" / f"{t['id']:04d}" / f"fold-{f}"
            history = json.loads((fold / "history.json").read_text())
            assert history["config"]["trial_name"] == f"kf-{t['id']:04d}-fold-{f}"
            assert history["history"][0]["samples"] == 48  # half of get_train()'s 96 samples trains
            assert history["n_workers"] == 1 and history["epochs_done"] == 1
    best = json.loads((out / "best.json").read_text())
    assert best["best_fom_std"] is not None and best["best_fom"] is not None
    header = (out / "trials.csv").read_text().splitlines()[0].split(",")
    assert {"fom", "fom_std", "fom_fold0", "fom_fold1"} <= set(header)
    assert not (root / "CP").exists()


MISSING_DATA_ARGS = ["optimize", "--model", "models/model.py", "--block-size", "2", "--num-iterations", "1",
                     "--epochs", "1"]


@pytest.mark.mpi
def test_missing_data_stops_every_rank_with_one_line(tmp_path, nnlo_cli):
    """As the ranks of an external ``mpirun -np 3 nnlo optimize`` run it: every rank finds the data missing."""
    proj = write_project(tmp_path / "p", train=[str(tmp_path / "gone.h5")])
    r = nnlo_cli(MISSING_DATA_ARGS, cwd=proj["root"], mpirun_np=3)
    assert r.rc == 2, r.err[-2000:]
    assert len(r.error_lines()) == 1 and "gone.h5" in r.error_lines()[0], r.err[-2000:]
    assert "Traceback" not in r.err
    assert not (proj["root"] / "optimize-sibling-mlp").exists()  # nothing ran: no output folder


def test_missing_data_stops_n_before_any_rank_starts(tmp_path, capsys, clean_path):
    """``nnlo optimize -n 3 --train LIST``: the list naming a missing file is refused before any rank starts, in
    this process (no model import: a probe's interpreter or a rank would be a process, which the marker audit
    fails). Data that only ``get_train()`` names is checked by the ranks themselves, which start at once:
    ``test_missing_data_stops_every_rank_with_one_line`` (the same ranks' code as ``-n`` runs)."""
    proj = write_project(tmp_path / "p")
    listed = tmp_path / "train.list"
    listed.write_text(f"{tmp_path / 'gone.h5'}\n")
    os.chdir(proj["root"])
    rc, _, err = cli_runner.run(capsys, *MISSING_DATA_ARGS, "--train", str(listed), "-n", "3")
    lines = error_lines(err)
    assert rc == 2, err[-2000:]
    assert len(lines) == 1 and "gone.h5" in lines[0] and "does not exist" in lines[0], err[-2000:]
    assert "Traceback" not in err
    assert not (proj["root"] / "optimize-sibling-mlp").exists()  # nothing ran: no output folder


@pytest.mark.mpi
@pytest.mark.parametrize("launch, restore", [("mpirun", "auto"), ("-n", "elsewhere")])
def test_restore_is_refused_by_a_search_in_one_line(project, nnlo_cli, launch, restore):
    args = ["optimize", "--model", "models/model.py", "--block-size", "2", "--num-iterations", "1",
            "--restore", restore]
    if launch == "-n":
        r = nnlo_cli([*args, "-n", "3"], cwd=project["root"])
    else:
        r = nnlo_cli(args, cwd=project["root"], mpirun_np=3)
    assert r.rc == 2 and len(r.error_lines()) == 1, r.err[-2000:]
    assert f"--restore {restore} does not apply" in r.error_lines()[0] and "--opt-restore" in r.error_lines()[0]


