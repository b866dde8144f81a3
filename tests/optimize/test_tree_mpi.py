"""A real ``nnlo optimize`` on 3 ranks (the warm MPI world) on a two-level TOML tree space with 2 folds, then ``--opt-restore``."""
from __future__ import annotations

import csv
import json

import pytest

from tests.helpers.env import REPO
from tests.optimize.test_tree_space import TREE_TOML, expected_names

pytestmark = pytest.mark.mpi

MODEL = '''
import json, math, os

def get_model(**params):
    raise NotImplementedError("the objective hook replaces training")

def evaluate(params, *, fold, n_fold):
    with open(os.environ["TREE_LOG"], "a") as f:
        f.write(json.dumps({"params": params, "fold": fold}) + "\\n")
    extra = {"mlp": params.get("hidden", 0) / 256, "cnn": params.get("filters", 0) / 64, "linear": 1.0}
    return math.log10(params["lr"]) + extra[params["model"]] + 0.1 * fold
'''


def test_tree_space_kfold_search_and_restore(nnlo_mpi, nnlo_env, tmp_path):
    (tmp_path / "tree_model.py").write_text(MODEL)
    (tmp_path / "space.toml").write_text(TREE_TOML)
    out, log = tmp_path / "run", tmp_path / "evals.jsonl"
    env = dict(nnlo_env, TREE_LOG=str(log))

    def optimize(n: int, *extra: str):
        return nnlo_mpi(3, "optimize", "--model", tmp_path / "tree_model.py", "--space", tmp_path / "space.toml",
                        "--block-size", "2", "--n-fold", "2", "--mode", "allreduce", "--hyper-opt", "bayesian",
                        "--n-initial-points", "3", "--num-iterations", str(n), "--seed", "5", "--output", out,
                        *extra, env=env, cwd=REPO)

    r = optimize(4)
    assert r.returncode == 0, r.stderr[-3000:]
    r = optimize(6, "--opt-restore")
    assert r.returncode == 0, r.stderr[-3000:]
    table = json.loads((out / "trials.json").read_text())
    assert [t["id"] for t in table] == list(range(6)) and all(t["status"] == "ok" for t in table)
    evals = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(evals) == 12  # 6 trials x 2 folds, none repeated by the restore
    for e in evals:
        assert set(e["params"]) == expected_names(e["params"])  # the model sees only active parameters
    for t in table:
        assert t["fom_std"] == pytest.approx(0.05) and t["fold_foms"][1] - t["fold_foms"][0] == pytest.approx(0.1)
    rows = list(csv.DictReader((out / "trials.csv").open()))
    assert [r["hidden"] == "" for r in rows] == ["hidden" not in t["params"] for t in table]
    state = json.loads((out / "optimizer-state.json").read_text())
    assert "branches" in state["space"]["model"] and len(state["engine_state"]["variances"]) == 6
