"""Tree-shaped search spaces, fold noise reaching the GP, and the GP's bounded fit - all without MPI."""
from __future__ import annotations

import csv
import json
import math
import types

import numpy as np
import pytest

from nnlo.errors import ConfigError
from nnlo.optimize.engines import make_engine
from nnlo.optimize.results import Objective
from nnlo.optimize.search import Search
from nnlo.optimize.space import Categorical, Integer, Real, Space, from_model, from_toml

TREE_TOML = """
[lr]
type = "real"
low = 1e-4
high = 1e-1
prior = "log-uniform"

[model]
type = "categorical"
values = ["mlp", "cnn", "linear"]

[model.branches.mlp.hidden]
type = "integer"
low = 16
high = 256

[model.branches.cnn.filters]
type = "integer"
low = 8
high = 64

[model.branches.cnn.pool]
type = "categorical"
values = ["max", "avg"]

[model.branches.cnn.pool.branches.max.size]
type = "integer"
low = 2
high = 4
"""

TREE = Space([
    Real(1e-4, 1e-1, "log-uniform", name="lr"),
    Categorical(["mlp", "cnn", "linear"], name="model", branches={
        "mlp": [Integer(16, 256, name="hidden")],
        "cnn": [Integer(8, 64, name="filters"),
                Categorical(["max", "avg"], name="pool", branches={"max": [Integer(2, 4, name="size")]})],
    }),
])
SUBSPACES = ["model=mlp", "model=cnn,pool=max", "model=cnn,pool=avg", "model=linear"]


def expected_names(point: dict) -> set[str]:
    names = {"lr", "model"}
    if point["model"] == "mlp":
        names.add("hidden")
    if point["model"] == "cnn":
        names |= {"filters", "pool"} | ({"size"} if point["pool"] == "max" else set())
    return names


def test_toml_and_python_forms_agree_and_round_trip(tmp_path):
    f = tmp_path / "space.toml"
    f.write_text(TREE_TOML)
    space = from_toml(f)
    assert space.to_dict() == TREE.to_dict()
    assert space.names == ["lr", "model", "hidden", "filters", "pool", "size"]  # flattened, pre-order
    assert space.is_tree and space.subspaces() == SUBSPACES
    again = Space.from_dict(json.loads(json.dumps(space.to_dict())))  # as the state file stores it
    assert again.to_dict() == space.to_dict() and again.dimensions == space.dimensions
    # the model module's parameter_range: a list with branches, or the TOML form as a dict
    for pr in (list(TREE.roots), TREE.to_dict()):
        module = types.SimpleNamespace(get_model=types.SimpleNamespace(parameter_range=pr))
        assert from_model(module).to_dict() == TREE.to_dict()
    # a flat space's dict has no trace of trees (old state files compare equal)
    flat = Space([Real(0, 1, name="a"), Categorical(["x", "y"], name="c")])
    assert flat.to_dict() == {"a": {"type": "real", "low": 0.0, "high": 1.0, "prior": "uniform"},
                              "c": {"type": "categorical", "values": ["x", "y"]}}
    assert not flat.is_tree and flat.subspaces() == [""]


def test_samples_hold_only_active_parameters():
    rng = np.random.default_rng(0)
    seen = set()
    for _ in range(200):
        p = TREE.sample(rng)
        assert set(p) == expected_names(p) and TREE.contains(p)
        seen.add(TREE.subspace_of(p))
        full = TREE.as_list(p)  # the embedding: inactive at their default
        assert len(full) == len(TREE) and TREE.point(full) == p
    assert seen == set(SUBSPACES)
    assert not TREE.contains({"lr": 0.01, "model": "linear", "hidden": 20})  # an inactive one present
    assert not TREE.contains({"lr": 0.01, "model": "mlp"})  # an active one missing
    assert TREE.point({"lr": 0.01, "model": "linear", "hidden": 20}) == {"lr": 0.01, "model": "linear"}


def test_flat_space_behaviour_is_unchanged():
    flat = Space([Real(0, 1, name="a"), Integer(0, 5, name="b"), Categorical(["x", "y"], name="c")])
    r1, r2 = np.random.default_rng(3), np.random.default_rng(3)
    p = flat.sample(r1)
    assert p == {"a": float(r2.uniform(0, 1)), "b": int(r2.integers(0, 6)), "c": ["x", "y"][int(r2.integers(2))]}
    assert flat.subspace_of(p) == "" and flat.key(p) == repr([p["a"], p["b"], p["c"]])


@pytest.mark.parametrize("text, message", [
    ('[m]\ntype = "categorical"\nvalues = ["a"]\nbranches = 3\n', "one table per value"),
    ('[m]\ntype = "categorical"\nvalues = ["a"]\n[m.branches]\n', "one table per value"),
    ('[m]\ntype = "categorical"\nvalues = ["a"]\n[m.branches.a]\n', "has no parameters"),
    ('[m]\ntype = "categorical"\nvalues = ["a"]\n[m.branches.b.x]\ntype = "real"\nlow = 0\nhigh = 1\n',
     "not one of its values"),
    ('[m]\ntype = "categorical"\nvalues = ["a"]\n[m.branches.a]\nx = 3\n', r"\[m.branches.a.x\] must be a table"),
    ('[m]\ntype = "categorical"\nvalues = ["a", "b"]\n[m.branches.a.x]\ntype = "real"\nlow = 0\nhigh = 1\n'
     '[m.branches.b.x]\ntype = "real"\nlow = 0\nhigh = 2\n', "named twice"),
    ('[m]\ntype = "categorical"\nvalues = ["a"]\n[m.branches.a.x]\ntype = "real"\nlow = "z"\nhigh = 1\n',
     r"\[m.branches.a.x\] is malformed"),
    ('[m]\ntype = "real"\nlow = 0\nhigh = 1\n[m.branches.a.x]\ntype = "real"\nlow = 0\nhigh = 1\n', "unknown key"),
    ('[m]\ntype = "categorical"\nvalues = [1, 2]\n[m.branches.3.x]\ntype = "integer"\nlow = 0\nhigh = 1\n',
     "not one of its values"),
    ('[m]\ntype = "categorical"\nvalues = ["a"]\n[m.branches.a.x]\ntype = "integer"\nlow = [1]\nhigh = 2\n',
     "malformed"),
])
def test_bad_tree_files_give_one_line_errors(tmp_path, text, message):
    f = tmp_path / "space.toml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=message) as e:
        from_toml(f)
    assert "\n" not in str(e.value) and str(f) in str(e.value)


def test_numeric_and_boolean_branch_labels():
    space = Space.from_dict({"n": {"type": "categorical", "values": [1, 2, True],
                                   "branches": {"2": {"w": {"type": "real", "low": 0, "high": 1}},
                                                "true": {"v": {"type": "integer", "low": 0, "high": 3}}}}})
    assert space.subspaces() == ["n=1", "n=2", "n=true"]
    assert space.point({"n": 2, "w": 0.5}) == {"n": 2, "w": 0.5}
    assert space.point({"n": True, "v": 1, "w": 0.3}) == {"n": True, "v": 1}
    assert Space.from_dict(space.to_dict()).to_dict() == space.to_dict()


@pytest.mark.parametrize("engine", ["random", "genetic", "bayesian"])
def test_every_engine_proposes_valid_tree_points(engine):
    e = make_engine(engine, TREE, 1, n_initial_points=4, population=4)
    subspaces = set()
    for _ in range(10):
        p = e.ask([])
        assert TREE.contains(p) and set(p) == expected_names(p)  # only active parameters
        subspaces.add(TREE.subspace_of(p))
        e.tell(p, math.log(p["lr"]) + {"mlp": 1.0, "cnn": 0.0, "linear": 2.0}[p["model"]], 0.01)
    assert len(subspaces) >= 2
    restored = make_engine(engine, TREE, 1, n_initial_points=4, population=4)
    restored.load_state_dict(json.loads(json.dumps(e.state_dict())))
    assert restored.ask([]) == e.ask([])  # the same proposal after a JSON round trip of the state


def test_trials_csv_blanks_inactive_and_restore_round_trips(tmp_path):
    def search() -> Search:
        return Search(make_engine("random", TREE, 0), Objective.parse("val_loss"), num_iterations=8,
                      out_dir=tmp_path, n_fold=2)

    s = search()
    for _ in range(6):
        t = s.next_trial(0)
        assert t is not None
        s.record(t.id, [{"metrics": {"val_loss": t.params["lr"]}}, {"metrics": {"val_loss": 2 * t.params["lr"]}}], 0)
    s.save()
    rows = list(csv.DictReader((tmp_path / "trials.csv").open()))
    assert len(rows) == 6
    for row, trial in zip(rows, sorted(s.finished.values(), key=lambda t: t.id), strict=True):
        for name in TREE.names:
            assert row[name] == ("" if name not in trial.params else str(trial.params[name]))
    table = json.loads((tmp_path / "trials.json").read_text())
    assert all(set(t["params"]) == expected_names(t["params"]) for t in table)
    best = json.loads((tmp_path / "best.json").read_text())
    assert best["best_fom"] is not None and best["best_fom_std"] > 0  # mean and spread
    r = search()
    assert r.restore() and r.engine.observations == s.engine.observations
    assert r.engine.noise() == s.engine.noise() and all(v is not None for v in r.engine.noise())


def test_fold_spread_reaches_the_gp_as_per_sample_noise(tmp_path):
    import skopt

    from nnlo.optimize.engines import bayesian

    space = Space([Real(0.0, 1.0, name="x")])
    s = Search(make_engine("bayesian", space, 0, n_initial_points=3), Objective.parse("val_loss"),
               num_iterations=10, out_dir=tmp_path, n_fold=2)
    spreads = [0.0, 0.1, 0.5, 1.0]
    for spread in spreads:
        t = s.next_trial(0)
        assert t is not None
        x = t.params["x"]
        s.record(t.id, [{"metrics": {"val_loss": x - spread}}, {"metrics": {"val_loss": x + spread}}], 0)
    assert s.engine.noise() == pytest.approx([sp * sp / 2 for sp in spreads])  # std**2 / n_fold
    fitted = {}
    # watch the regressor scikit-optimize fits (a spy on the library, our code runs unchanged)
    original = skopt.Optimizer._tell

    def spy(self, x, y, fit=True):
        out = original(self, x, y, fit)
        if self.models:
            fitted["alpha"] = np.asarray(self.models[-1].alpha)
            fitted["y"] = list(self.yi)
        return out

    skopt.Optimizer._tell = spy
    try:
        s.engine.ask([{"x": 0.5}])
    finally:
        skopt.Optimizer._tell = original
    alpha, ys = fitted["alpha"], fitted["y"]
    assert alpha.shape == (5,)  # four observations and the pending point's lie
    scale = float(np.std(ys)) ** 2
    floor = bayesian.NOISE_FLOOR * float(np.median([v for v in s.engine.noise() if v > 0]))
    expect = [max(sp * sp / 2, floor) / scale for sp in spreads] + [floor / scale]
    assert alpha == pytest.approx(expect)
    assert alpha[3] > 10 * alpha[1]  # a noisier trial is trusted less


def test_without_folds_the_gp_is_skopts_default():
    e = make_engine("bayesian", Space([Real(0.0, 1.0, name="x")]), 0, n_initial_points=2)
    for x in (0.1, 0.9, 0.5):
        e.tell({"x": x}, (x - 0.3) ** 2)
    assert e.noise() == [None, None, None] and "variances" not in e.state_dict()


def test_bounded_fit_subset_and_convergence():
    from nnlo.optimize.engines.bayesian import fit_subset

    space = Space([Real(0.0, 1.0, name="x"), Real(0.0, 1.0, name="y")])
    rng = np.random.default_rng(0)
    pts = [space.sample(rng) for _ in range(60)]
    vals = [float(rng.uniform()) for _ in pts]
    keep = fit_subset(space, pts, vals, 20)
    assert len(keep) == 20 == len(set(keep)) and keep == sorted(keep)
    assert set(sorted(range(60), key=lambda i: vals[i])[:5]) <= set(keep)  # the best quarter
    assert set(range(55, 60)) <= set(keep)  # the most recent quarter
    # a GP fitted on at most 8 observations still finds the minimum of a smooth bowl
    e = make_engine("bayesian", space, 0, n_initial_points=5)
    e.fit_limit = 8  # type: ignore[attr-defined]
    best = math.inf
    for _ in range(16):
        p = e.ask([])
        v = (p["x"] - 0.7) ** 2 + (p["y"] - 0.2) ** 2
        best = min(best, v)
        e.tell(p, v)
    assert best < 0.01


def test_python_form_errors_are_one_line():
    for bad, message in (
        (lambda: Categorical(["a"], name="m", branches={"a": Real(0, 1, name="x")}), "list of parameters"),
        (lambda: Categorical(["a"], name="m", branches={"a": []}), "has no parameters"),
        (lambda: Categorical(["a"], name="m", branches=["a"]), "must map a value"),
        (lambda: Categorical([1, "1"], name="m", branches={1: [Real(0, 1, name="x")]}), "same branch"),
        (lambda: Space([Categorical(["a"], name="m", branches={"a": [Real(0, 1, name="m")]})]), "named twice"),
        (lambda: from_model(types.SimpleNamespace(get_model=types.SimpleNamespace(parameter_range=3))),
         "parameter_range must be"),
    ):
        with pytest.raises(ConfigError, match=message) as e:
            bad()
        assert "\n" not in str(e.value)
