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


@pytest.mark.parametrize("value, clipped", [(2.7, 3), (2.2, 2), (-3.6, 0), (0.49, 0), (99, 10), ("7", 7),
                                             (np.float32(9.6), 10), (10.0, 10)])
def test_integer_clip_rounds_to_the_nearest_then_bounds(value, clipped):
    got = Integer(0, 10, name="n").clip(value)
    assert got == clipped and type(got) is int


@pytest.mark.parametrize("value, clipped", [(0.25, 0.25), (-1.0, 0.0), (3.0, 1.0), ("0.5", 0.5), (np.float32(2), 1.0)])
def test_real_clip_bounds_and_gives_a_python_float(value, clipped):
    got = Real(0.0, 1.0, name="r").clip(value)
    assert got == clipped and type(got) is float


def test_bounds_are_inclusive_and_types_are_checked():
    r, i, c = Real(0.5, 2.0, name="r"), Integer(-2, 3, name="i"), Categorical(["a", 1, True], name="c")
    assert r.contains(0.5) and r.contains(2.0) and r.contains(1) and not r.contains(2.0001)
    assert not r.contains(0.4999) and not r.contains("1.0") and not r.contains(None)
    assert i.contains(-2) and i.contains(3) and i.contains(np.int64(0)) and not i.contains(4) and not i.contains(-3)
    assert not i.contains(1.0) and not i.contains(True) and not i.contains("1")
    assert c.contains(1) and c.contains(True) and not c.contains(1.0) and not c.contains("1") and c.contains("a")
    assert c.clip("b") == "a" and c.clip(True) is True and c.clip(1.0) == "a"
    assert (r.default, i.default, c.default) == (0.5, -2, "a") and type(r.default) is float
    assert (r.kind, i.kind, c.kind) == ("real", "integer", "categorical")


def test_unit_positions_at_the_ends_and_outside():
    lin, log, i = Real(-5.0, 15.0, name="a"), Real(1e-4, 1e-2, "log-uniform", name="b"), Integer(1, 9, name="c")
    assert lin.to_unit(-5.0) == 0.0 and lin.to_unit(15.0) == 1.0 and lin.to_unit(0.0) == 0.25
    assert log.to_unit(1e-3) == pytest.approx(0.5) and log.from_unit(0.5) == pytest.approx(1e-3)
    assert lin.from_unit(-1.0) == -5.0 and lin.from_unit(7.0) == 15.0 and lin.from_unit(0.5) == 5.0
    assert log.from_unit(0.0) == pytest.approx(1e-4) and log.from_unit(1.0) == pytest.approx(1e-2)
    assert i.from_unit(0.3) == 3 and i.from_unit(0.0) == 1 and i.from_unit(1.0) == 9  # 1 + 0.3*8 = 3.4 -> 3


@pytest.mark.parametrize("make, message", [
    (lambda: Real(1.0, 1.0, name="r"), r"^parameter 'r': Real needs finite low < high, got 1.0, 1.0$"),
    (lambda: Real(0.0, float("inf"), name="r"), r"^parameter 'r': Real needs finite low < high, got 0.0, inf$"),
    (lambda: Real(float("nan"), 1.0), r"^parameter None: Real needs finite low < high, got nan, 1.0$"),
    (lambda: Real(0.0, 1.0, "normal", name="r"),
     r"^parameter 'r': prior must be one of uniform, log-uniform, got 'normal'$"),
    (lambda: Real(0.0, 1.0, "log-uniform", name="r"), r"^parameter 'r': a log-uniform prior needs low > 0, got 0.0$"),
    (lambda: Integer(2, 2, name="i"), r"^parameter 'i': Integer needs integer low < high, got 2, 2$"),
    (lambda: Integer(0.5, 2, name="i"), r"^parameter 'i': Integer needs integer low < high, got 0.5, 2$"),
    (lambda: Integer(0, 2, "log-uniform", name="i"), r"^parameter 'i': bad prior 'log-uniform' for \[0, 2\]$"),
    (lambda: Integer(1, 2, "normal", name="i"), r"^parameter 'i': bad prior 'normal' for \[1, 2\]$"),
    (lambda: Categorical([], name="c"), r"^parameter 'c': Categorical needs at least one value$"),
    (lambda: Categorical("ab", name="c"), r"^parameter 'c': Categorical needs a list of values, got 'ab'$"),
    (lambda: Categorical([1, 1], name="c"), r"^parameter 'c': Categorical values must be distinct, got \[1, 1\]$"),
    (lambda: Real(0.0, 1.0, name="2x"), r"^parameter name '2x' must be a Python identifier \(it becomes a get_model "
                                        r"keyword\)$"),
    (lambda: Space([]), r"^the search space is empty: give get_model.parameter_range in the model module or "
                        r"--space FILE.toml$"),
])
def test_bad_dimensions_are_one_line_errors_naming_the_parameter(make, message):
    with pytest.raises(ConfigError, match=message):
        make()


def test_integer_bounds_become_ints_and_a_log_integer_samples_inside():
    i = Integer(1.0, 1000.0, "log-uniform", name="i")
    assert (i.low, i.high) == (1, 1000) and type(i.low) is int
    rng = np.random.default_rng(3)
    draws = [i.sample(rng) for _ in range(200)]
    assert all(type(d) is int and 1 <= d <= 1000 for d in draws)
    assert sum(d < 32 for d in draws) > 60  # log-uniform: half of the exponent range is below sqrt(1000)
    assert i.to_dict() == {"type": "integer", "low": 1, "high": 1000, "prior": "log-uniform"}
    assert Real(1.0, 2.0, name="r").to_dict() == {"type": "real", "low": 1.0, "high": 2.0, "prior": "uniform"}


# -- trees, points and files, exactly ------------------------------------------------------------------------
def _tree() -> Space:
    return Space([
        Real(0.5, 2.0, name="lr"),
        Categorical(["mlp", "cnn", 3, True], name="model", branches={
            "mlp": [Integer(1, 4, name="layers")],
            "cnn": [Integer(8, 64, name="filters"),
                    Categorical(["max", "avg"], name="pool", branches={"max": [Integer(2, 4, name="size")]})],
            3: [Real(0.0, 1.0, name="drop")],
            "true": [Categorical(["x"], name="flag")],
        }),
    ])


def test_a_tree_space_flattens_in_pre_order_and_knows_each_condition():
    space = _tree()
    assert space.names == ["lr", "model", "layers", "filters", "pool", "size", "drop", "flag"] and len(space) == 8
    assert space.is_tree and not Space([Real(0, 1, name="a")]).is_tree
    assert space.condition == {"layers": ("model", "mlp"), "filters": ("model", "cnn"), "pool": ("model", "cnn"),
                               "size": ("pool", "max"), "drop": ("model", 3), "flag": ("model", True)}
    assert [d.name for d in space.active({"model": "cnn", "pool": "max"})] == ["lr", "model", "filters", "pool", "size"]
    assert [d.name for d in space.active({"model": "cnn"})] == ["lr", "model", "filters", "pool"]
    assert [d.name for d in space.active({"model": 3.0})] == ["lr", "model"]  # 3.0 is not the category 3
    assert space.subspaces() == ["model=mlp", "model=cnn,pool=max", "model=cnn,pool=avg", "model=3", "model=true"]
    assert space.subspace_of({"lr": 1.0, "model": "cnn", "filters": 8, "pool": "avg"}) == "model=cnn,pool=avg"
    assert space.subspace_of({"lr": 1.0, "model": True, "flag": "x"}) == "model=true"
    assert Space([Real(0, 1, name="a")]).subspaces() == [""] and Space([Real(0, 1, name="a")]).subspace_of({}) == ""


def test_points_hold_only_the_active_parameters():
    space = _tree()
    full = {"lr": np.float64(1.5), "model": "mlp", "layers": np.int64(2), "filters": 9, "pool": "max", "size": 3,
            "drop": 0.5, "flag": "x"}
    point = space.point(full)
    assert point == {"lr": 1.5, "model": "mlp", "layers": 2} and type(point["layers"]) is int
    assert space.point([1.0, "cnn", 1, 8, "max", 2, 0.1, "x"]) == {"lr": 1.0, "model": "cnn", "filters": 8,
                                                                   "pool": "max", "size": 2}
    with pytest.raises(ValueError):
        space.point([1.0, "cnn"])  # a list names every dimension
    assert space.as_list({"lr": 1.0, "model": 3, "drop": 0.25}) == [1.0, 3, 1, 8, "max", 2, 0.25, "x"]
    assert space.contains({"lr": 1.0, "model": 3, "drop": 0.25})
    assert not space.contains({"lr": 1.0, "model": 3})  # an active parameter missing
    assert not space.contains({"lr": 1.0, "model": 3, "drop": 0.25, "layers": 2})  # an inactive one present
    assert not space.contains({"lr": 1.0, "model": 3, "drop": 2.0})  # out of range
    assert space.key({"model": 3, "lr": 1.0}) == repr([1.0, 3, None, None, None, None, None, None])
    rng = np.random.default_rng(5)
    completed = space.complete({"lr": 1.0, "model": "mlp", "layers": 3}, rng)
    assert list(completed)[:3] == ["lr", "model", "layers"] and set(completed) == set(space.names)
    assert completed["layers"] == 3 and 8 <= completed["filters"] <= 64
    assert all(space.contains(space.sample(rng)) for _ in range(50))


def test_branch_errors_name_the_parameter_and_the_fix():
    for make, message in [
        (lambda: Categorical([1, "1"], name="c", branches={"1": [Real(0, 1, name="a")]}),
         "parameter 'c': values [1, '1'] name the same branch twice (a branch is named by its value's text); make "
         "the values distinct as text"),
        (lambda: Categorical(["a"], name="c", branches=[("a", [])]),
         "parameter 'c': branches must map a value to a list of parameters, got list"),
        (lambda: Categorical(["a"], name="c", branches={"b": [Real(0, 1, name="x")]}),
         "parameter 'c': branch 'b' is not one of its values ['a']"),
        (lambda: Categorical([1, 2], name="c", branches={1: [Real(0, 1, name="x")], "1": [Real(0, 1, name="y")]}),
         "parameter 'c': branch '1' is given twice"),
        (lambda: Categorical(["a"], name="c", branches={"a": "x"}), "parameter 'c': branch 'a' must be a list of "
                                                                     "parameters"),
        (lambda: Categorical(["a"], name="c", branches={"a": []}),
         "parameter 'c': branch 'a' has no parameters; leave it out (a value without parameters needs no branch)"),
        (lambda: Space([Real(0, 1, name="a"), Categorical(["x"], name="c", branches={"x": [Real(0, 1, name="a")]})]),
         "search dimensions named twice: a; give each a unique name (also across branches: a name is one get_model "
         "keyword)"),
        (lambda: Space([Real(0, 1)]), "every search dimension needs a name=...: it is the get_model keyword it sets"),
    ]:
        with pytest.raises(ConfigError) as e:
            make()
        assert str(e.value) == message
    assert Categorical(["a", "b"], name="c", branches={"b": [Real(0, 1, name="x")]}).branch("a") == ()
    assert Categorical([2.5, False], name="c").to_dict() == {"type": "categorical", "values": [2.5, False]}


@pytest.mark.parametrize("text, message", [
    ('[lr]\ntype = "real"\nlow = 1\nhigh = 0.5\n', "{f}: [lr]: parameter 'lr': Real needs finite low < high, got 1.0, 0.5"),
    ('[lr]\ntype = "float"\nlow = 0\nhigh = 1\n', "{f}: [lr] needs type = \"real\", \"integer\" or \"categorical\", "
                                                  "got 'float'"),
    ('[lr]\nlow = 0\nhigh = 1\n', "{f}: [lr] needs type = \"real\", \"integer\" or \"categorical\", got ''"),
    ('[lr]\ntype = "Real"\nlow = 0\nhigh = 1\nstep = 2\nmid = 1\n',
     "{f}: [lr] has unknown key(s) mid, step; allowed: high, low, prior, type"),
    ('[lr]\ntype = "integer"\nlow = 0\n', "{f}: [lr] needs low = .. and high = .."),
    ('[lr]\ntype = "integer"\nlow = "a"\nhigh = 2\n', "{f}: [lr] is malformed: "),
    ('[opt]\ntype = "categorical"\nvalues = "adam"\n', "{f}: [opt] needs values = [..] (a list)"),
    ('[opt]\ntype = "categorical"\nvalues = ["a"]\nbranches = 1\n',
     "{f}: [opt.branches] must hold one table per value, e.g. [opt.branches.a.NAME]"),
    ('[opt]\ntype = "categorical"\nvalues = []\n[opt.branches]\n',
     "{f}: [opt.branches] must hold one table per value, e.g. [opt.branches.VALUE.NAME]"),
    ('[opt]\ntype = "categorical"\nvalues = ["a"]\n[opt.branches.a]\n',
     "{f}: [opt.branches.a] has no parameters; leave it out (a value without parameters needs no branch)"),
    ('lr = 3\n', "{f}: [lr] must be a table with type = real|integer|categorical"),
    ('', "{f}: the search space is empty: give get_model.parameter_range in the model module or --space FILE.toml"),
])
def test_space_file_errors_in_full(tmp_path, text, message):
    f = tmp_path / "space.toml"
    f.write_text(text)
    with pytest.raises(ConfigError) as e:
        from_toml(f)
    assert str(e.value).startswith(message.format(f=f)), str(e.value)
    with pytest.raises(ConfigError, match=r"^--space .*/nope\.toml: no such file; write a TOML file with one \[name\] "
                                          r"table per parameter$"):
        from_toml(tmp_path / "nope.toml")
    f.write_text("[lr\n")
    with pytest.raises(ConfigError, match=r"^--space .*space\.toml: not valid TOML \("):
        from_toml(f)


def test_spaces_from_python_values_and_their_errors():
    assert from_dimensions({"n": {"type": "integer", "low": 1, "high": 3}}).names == ["n"]
    with pytest.raises(ConfigError, match=r"^space: the space must be a table of \[name\] parameter tables$"):
        Space.from_dict([1])
    for bad, message in [
        ("lr", "parameter_range must be a list of dimensions or a dict like a --space file, got str"),
        (3, "parameter_range must be a list of dimensions or a dict like a --space file, got int"),
        ([(0.1, 1.0)], "search dimension (0.1, 1.0) has no name; use Real(low, high, name=...) / Integer(...)"),
        ([object], "search dimension <class 'object'> (type) is not an Integer, Real or Categorical"),
    ]:
        with pytest.raises(ConfigError) as e:
            from_dimensions(bad)
        assert str(e.value) == message
    bad_real = types.SimpleNamespace(low="x", high=1.0, name="r")
    with pytest.raises(ConfigError, match=r"^search dimension 'r' is malformed: "):
        from_dimensions([bad_real])
    integer = type("Integer", (), {"low": 1, "high": 5, "name": "k", "prior": None})()
    assert from_dimensions([integer]).dimensions[0] == Integer(1, 5, name="k")
    assert from_dimensions([types.SimpleNamespace(categories=("a", "b"), name="c")]).dimensions[0] == \
        Categorical(["a", "b"], name="c")
    module = types.SimpleNamespace(__file__="m.py", parameter_range=[Real(0, 1, name="x")])
    assert from_model(module).names == ["x"]  # a module-level parameter_range also counts
    with pytest.raises(ConfigError, match=r"^m\.py declares no search space: set get_model\.parameter_range = "
                                          r"\[Real\(\.\.\., name='lr'\), \.\.\.\] or pass --space FILE\.toml$"):
        from_model(types.SimpleNamespace(__file__="m.py", get_model=lambda: None))


def test_a_choice_of_tuples_survives_a_json_round_trip():
    import json

    space = Space([Categorical([(32, 32), (64, 64)], name="shape"), Real(0.0, 1.0, name="x")])
    again = Space.from_dict(json.loads(json.dumps(space.to_dict())))
    assert again.to_dict() == json.loads(json.dumps(space.to_dict())) == space.to_dict()  # a restore compares these
    point = json.loads(json.dumps({"shape": (64, 64), "x": 0.5}))  # as a state or journal keeps it: a list
    assert point["shape"] == [64, 64]
    assert space.contains(point) and again.contains(point) and space.point(point) == {"shape": (64, 64), "x": 0.5}
    assert space.key(space.point(point)) == space.key({"shape": (64, 64), "x": 0.5})
    with pytest.raises(ConfigError, match="must be distinct"):  # a list is the tuple it would be read back as
        Categorical([(1, 2), [1, 2]], name="c")
