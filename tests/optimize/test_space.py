"""The search space: own dimensions, skopt dimensions (upstream contract), TOML files, clear errors."""
from __future__ import annotations

import types

import numpy as np
import pytest

from nnlo.errors import ConfigError
from nnlo.optimize.space import Categorical, Integer, Real, Space, from_dimensions, from_model, from_toml


def test_samples_stay_inside_and_are_plain_python():
    space = Space([Real(1e-4, 1e-1, "log-uniform", name="lr"), Integer(1, 4, name="layers"),
                   Categorical(["adam", "sgd"], name="opt")])
    rng = np.random.default_rng(0)
    points = [space.sample(rng) for _ in range(300)]
    assert all(space.contains(p) for p in points)
    assert {type(p["layers"]) for p in points} == {int}
    assert {p["layers"] for p in points} == {1, 2, 3, 4}
    assert {p["opt"] for p in points} == {"adam", "sgd"}
    # log-uniform: about as many draws below 1e-2.5 as above
    below = sum(p["lr"] < 10**-2.5 for p in points)
    assert 100 < below < 200


def test_unit_coordinates_round_trip():
    for d, v in ((Real(1e-4, 1e-1, "log-uniform", name="a"), 3e-3), (Real(-5, 10, name="b"), 2.5),
                 (Integer(2, 9, name="c"), 7)):
        assert d.from_unit(d.to_unit(v)) == pytest.approx(v)
    assert Integer(2, 9, name="c").from_unit(2.0) == 9


def test_skopt_dimensions_are_converted():
    sk = pytest.importorskip("skopt.space")
    space = from_dimensions([sk.Real(1e-3, 1.0, prior="log-uniform", name="lr"), sk.Integer(8, 64, name="width"),
                             sk.Categorical(["relu", "tanh"], name="act")])
    assert space.to_dict() == {
        "lr": {"type": "real", "low": 1e-3, "high": 1.0, "prior": "log-uniform"},
        "width": {"type": "integer", "low": 8, "high": 64, "prior": "uniform"},
        "act": {"type": "categorical", "values": ["relu", "tanh"]},
    }


def test_model_module_parameter_range():
    def get_model(**kw):
        return None

    get_model.parameter_range = [Real(0, 1, name="dropout")]
    assert from_model(types.SimpleNamespace(get_model=get_model)).names == ["dropout"]
    with pytest.raises(ConfigError, match="parameter_range.*--space"):
        from_model(types.SimpleNamespace(get_model=lambda: None, __file__="m.py"))


def test_toml_space(tmp_path):
    f = tmp_path / "space.toml"
    f.write_text('[lr]\ntype = "real"\nlow = 1e-4\nhigh = 0.1\nprior = "log-uniform"\n'
                 '[batch]\ntype = "integer"\nlow = 16\nhigh = 128\n'
                 '[opt]\ntype = "categorical"\nvalues = ["adam", "sgd"]\n')
    space = from_toml(f)
    assert space.names == ["lr", "batch", "opt"]
    assert space.dimensions[0] == Real(1e-4, 0.1, "log-uniform", name="lr")


@pytest.mark.parametrize("text, message", [
    ('[lr]\ntype = "real"\nlow = 1\nhigh = 0.5\n', "low < high"),
    ('[lr]\ntype = "float"\nlow = 0\nhigh = 1\n', "type ="),
    ('[lr]\ntype = "real"\nlow = 0\nhigh = 1\nstep = 2\n', "unknown key"),
    ('[lr]\ntype = "real"\nlow = 0\nhigh = 1\nprior = "log-uniform"\n', "log-uniform prior needs low > 0"),
    ('[opt]\ntype = "categorical"\nvalues = "adam"\n', "list"),
    ('lr = 3\n', "must be a table"),
    ('[lr\n', "not valid TOML"),
    ('', "empty"),
])
def test_bad_toml_gives_one_line_errors(tmp_path, text, message):
    f = tmp_path / "space.toml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=message) as e:
        from_toml(f)
    assert "\n" not in str(e.value)


def test_missing_file_and_duplicate_or_unnamed_dimensions(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        from_toml(tmp_path / "nope.toml")
    with pytest.raises(ConfigError, match="named twice"):
        Space([Real(0, 1, name="a"), Integer(0, 3, name="a")])
    with pytest.raises(ConfigError, match="needs a name"):
        Space([Real(0, 1)])
