"""The Python API without MPI: data-source adapters, option checks (the same defaults and rules as
``nnlo train``), model objects, callbacks, and a light ``import nnlo``."""
from __future__ import annotations

import subprocess
import sys

import h5py
import numpy as np
import pytest

import nnlo
from nnlo.api import SearchResult, TrainResult, train_config
from nnlo.data import H5Dataset, ShardedLoader
from nnlo.data.source import ArraySource, GeneratorSource, SourceDataset, as_dataset
from nnlo.errors import ConfigError, DataError, ModelError, TrainingError
from nnlo.models import ObjectModelSource, model_name, model_source_of
from nnlo.training.callbacks import CallbackStopper, StopTraining, check_callbacks, run_callbacks
from nnlo.training.stopping import Stopper
from nnlo_sched.inner import parse_inner


# -- data sources ------------------------------------------------------------------------------------
def test_array_source_returns_rows_in_the_order_asked() -> None:
    x = np.arange(20, dtype=np.float32).reshape(10, 2)
    y = np.arange(10)
    src = ArraySource(x, y)
    assert len(src) == 10
    bx, by = src.batch(np.array([7, 2, 2, 9]))
    np.testing.assert_array_equal(bx, x[[7, 2, 2, 9]])
    np.testing.assert_array_equal(by, [7, 2, 2, 9])


def test_array_source_several_inputs_and_no_targets() -> None:
    a, b = np.zeros((4, 3)), np.ones((4, 5))
    x, y = ArraySource([a, b]).batch(np.array([1, 0]))
    assert isinstance(x, list) and [v.shape for v in x] == [(2, 3), (2, 5)] and y is None


@pytest.mark.parametrize("x, y", [(np.zeros((4, 2)), np.zeros(5)), (np.float32(1.0), None), ([], None)])
def test_array_source_refuses_inconsistent_arrays(x, y) -> None:
    with pytest.raises(DataError):
        ArraySource(x, y)


def test_generator_source_materialises_once_in_yield_order() -> None:
    calls = []

    def generate_data():
        calls.append(1)
        for k in range(100):  # endless in spirit: n_batches bounds it
            yield np.full((3, 2), k, dtype=np.float32), np.full(3, k)

    src = GeneratorSource(generate_data, n_batches=4)
    assert len(src) == 12
    x, y = src.batch(np.array([0, 3, 11]))
    np.testing.assert_array_equal(y, [0, 1, 3])
    assert x.shape == (3, 2)
    src.batch(np.array([1]))
    assert calls == [1]


@pytest.mark.parametrize("items", [[], [(np.zeros((2, 1)), None), (np.zeros((2, 1)), np.zeros(2))], [np.zeros(3)],
                                   [(np.zeros((2, 1)), np.zeros(2)), (np.zeros((2, 4)), np.zeros(2))]])
def test_generator_source_refuses_bad_batches_in_one_line(items) -> None:
    with pytest.raises(DataError) as e:
        len(GeneratorSource(items))
    assert "\n" not in str(e.value)


def test_source_dataset_checks_indices_and_names_the_source_failing() -> None:
    class Broken:
        def __len__(self):
            return 5

        def batch(self, indices):
            raise KeyError("gone")

    ds = as_dataset(Broken(), "validation")
    assert isinstance(ds, SourceDataset) and len(ds) == 5 and not ds.preloaded
    with pytest.raises(IndexError):
        ds.read([5])
    with pytest.raises(DataError, match="validation data source's batch\\(\\) raised KeyError"):
        ds.read([0])
    with pytest.raises(DataError, match="has no batch"):
        as_dataset([1, 2, 3])


def test_hdf5_dataset_is_a_source_and_passes_through(tmp_path) -> None:
    path = tmp_path / "d.h5"
    x, y = np.random.default_rng(0).normal(size=(30, 4)).astype(np.float32), np.arange(30)
    with h5py.File(path, "w") as f:
        f["features"], f["labels"] = x, y
    with H5Dataset([path]) as ds:
        assert isinstance(ds, nnlo.DataSource) and as_dataset(ds) is ds
        idx = np.array([29, 3, 4])
        np.testing.assert_array_equal(ds.batch(idx)[0], ds.read(idx)[0])
        # the runtime's sharding and shuffling see an in-memory copy exactly as they see the file
        a = ShardedLoader(ds, None, 3, 1, 4, seed=5)
        b = ShardedLoader(as_dataset(ArraySource(x, y)), None, 3, 1, 4, seed=5)
        for epoch in (0, 1):
            for (xa, ya), (xb, yb) in zip(a.epoch(epoch, start_batch=1), b.epoch(epoch, start_batch=1), strict=True):
                np.testing.assert_array_equal(xa, xb)
                np.testing.assert_array_equal(ya, yb)


# -- options -----------------------------------------------------------------------------------------
def test_defaults_are_nnlo_trains(monkeypatch) -> None:
    monkeypatch.delenv("NNLO_DEADLINE", raising=False)
    assert train_config(model="m.py") == parse_inner("train", ["--model", "m.py"]).train
    cli = parse_inner("train", ["--model", "m.py", "--mode", "easgd", "--epochs", "3", "--batch", "16",
                                "--model-arg", "hidden=8"]).train
    assert train_config(nnlo.TrainConfig(model="m.py"), mode="easgd", epochs=3, batch=16,
                        model_args={"hidden": 8}) == cli


def test_deadline_comes_from_the_environment_as_on_the_command_line(monkeypatch) -> None:
    monkeypatch.setenv("NNLO_DEADLINE", "2000000000")
    assert train_config(model="m.py").deadline == 2e9
    monkeypatch.setenv("NNLO_DEADLINE", "soon")
    with pytest.raises(ConfigError):
        train_config(model="m.py")


@pytest.mark.parametrize("options, words", [
    ({"epochs": 0}, "epochs"), ({"epochs": "3"}, "epochs"), ({"batch": 2.5}, "batch"), ({"seed": -1}, "seed"),
    ({"synchronous": 1}, "synchronous"), ({"mode": "sideways"}, "--mode"), ({"gem_lr": float("nan")}, "gem_lr"),
    ({"epoch": 3}, "unknown training option(s) epoch"), ({"model_args": {"not a name": 1}}, "model_args"),
    ({"model_args": "hidden=3"}, "model_args"), ({"config": {"batch": 0}}, "batch"),
    ({"synchronous": True, "mode": "gem"}, "--synchronous"), ({"loss": None}, "loss"),
    ({"early_stopping": "val_loss"}, "--early-stopping"),
])
def test_bad_options_are_one_typed_line(options, words, monkeypatch) -> None:
    monkeypatch.delenv("NNLO_DEADLINE", raising=False)
    with pytest.raises(ConfigError) as e:
        nnlo.train(model="tests/runtime/models/tiny.py", data="train.list", **options)
    assert words in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("kwargs, error, words", [
    ({"model": 42}, ModelError, "model= got a int"),
    ({"model": None}, ConfigError, "no model"),
    ({"model": "m.py", "data": object()}, DataError, "training data (object) has no"),
    ({"model": "m.py", "data": "a.list", "train": "b.list"}, ConfigError, "given twice"),
    ({"model": "m.py", "callbacks": [print, 3]}, ConfigError, "not callable"),
    ({"model": "m.py", "config": 3}, ConfigError, "config must be"),
    ({"model": "m.py", "data": ArraySource(np.zeros((4, 2))), "preload_data": 1}, ConfigError,
     "preload_data (--preload-data) only apply to HDF5 files, and the data given (ArraySource) reads"),
    ({"model": "m.py", "data": "t.list", "val_data": ArraySource(np.zeros((4, 2))), "features_name": "x",
      "cache_data": "/tmp/c"}, ConfigError, "features_name, cache_data (--features-name, --cache-data) only"),
])
def test_bad_arguments_raise_typed_errors_before_any_rank_waits(kwargs, error, words, monkeypatch) -> None:
    monkeypatch.delenv("NNLO_DEADLINE", raising=False)
    with pytest.raises(error, match=words.replace("(", "\\(").replace(")", "\\)")):
        nnlo.train(**kwargs)


@pytest.mark.parametrize("options, words", [
    ({"num_iterations": 0}, "num_iterations"), ({"hyper_opt": "grid"}, "hyper_opt"), ({"fom": 3}, "fom"),
    ({"n_fold": "2"}, "n_fold"), ({"blocksize": 2}, "unknown option(s) blocksize"),
    ({"space": 3}, "space= got a int"),
    ({"schedule": "asha", "min_epochs": 20, "epochs": 10}, "--min-epochs 20 is above --epochs 10"),
    ({"schedule": "pbt", "population": 50}, "--population 50 is larger than the budget"),
])
def test_bad_search_options_are_typed_errors(options, words, monkeypatch) -> None:
    monkeypatch.delenv("NNLO_DEADLINE", raising=False)
    with pytest.raises(ConfigError, match=words.replace("(", "\\(").replace(")", "\\)")):
        nnlo.optimize(model=lambda hidden=4: None, data=ArraySource(np.zeros((4, 2))), **options)


# -- models ------------------------------------------------------------------------------------------
def test_model_functions_get_hyperparameters_and_are_named() -> None:
    def mlp(hidden=4):
        return ("mlp", hidden)

    source = model_source_of(mlp)
    assert isinstance(source, ObjectModelSource) and source.build(hidden=9) == ("mlp", 9)
    assert source.name == "mlp" and model_name(source.path) == "mlp"
    with pytest.raises(ModelError, match="does not accept"):
        source.build(width=3)
    with pytest.raises(ModelError, match="returned None"):
        model_source_of(lambda: None).build()


def test_model_instances_are_copied_for_every_build() -> None:
    torch = pytest.importorskip("torch")
    model = torch.nn.Linear(3, 2)
    source = model_source_of(model)
    first, second = source.build(), source.build()
    assert first is not model and second is not first
    with torch.no_grad():
        first.weight.add_(1.0)
    assert torch.equal(second.weight, model.weight)
    with pytest.raises(ModelError, match="takes no hyperparameters"):
        source.build(hidden=3)


def test_a_module_object_is_the_model_module_contract(tmp_path, monkeypatch) -> None:
    (tmp_path / "zoo_model.py").write_text("def get_model(hidden=2):\n    return hidden\n\n"
                                           "def get_name():\n    return 'zoo'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import zoo_model

    source = model_source_of(zoo_model)
    assert source.kind == "module" and source.name == "zoo" and source.build(hidden=5) == 5
    assert model_source_of("zoo_model").path == str(tmp_path / "zoo_model.py")  # an importable name


# -- callbacks ---------------------------------------------------------------------------------------
def test_callbacks_stop_on_true_or_stoptraining_and_fail_on_anything_else() -> None:
    entry = {"epoch": 3, "val_loss": 0.5}
    assert run_callbacks([lambda e, logs: None, lambda e, logs: False], entry) is False
    assert run_callbacks([lambda e, logs: e == 3], entry) is True
    assert run_callbacks([lambda e, logs: 1], entry) is False  # only True stops

    def stop(epoch, logs):
        raise StopTraining("done")

    assert run_callbacks([stop], entry) is True

    def broken(epoch, logs):
        logs["val_loss"] = 0  # a copy: the history is not changed
        raise ValueError("oops")

    with pytest.raises(TrainingError, match=r"callback .*broken raised ValueError after epoch 3: oops"):
        run_callbacks([broken], entry)
    assert entry["val_loss"] == 0.5


def test_callback_stopper_keeps_early_stopping_and_its_state() -> None:
    rule = Stopper.from_config("val_loss,<,1", None)
    stopper = CallbackStopper(rule, [lambda e, logs: e >= 5])
    assert stopper.update({"epoch": 1, "val_loss": 1.0}) is None
    assert stopper.update({"epoch": 2, "val_loss": 2.0}) == "early_stopping"
    assert stopper.state_dict() == {"best": 1.0, "bad_epochs": 1}
    fresh = CallbackStopper(Stopper(), [lambda e, logs: e >= 5])
    fresh.load_state_dict({"best": 3.0, "bad_epochs": 0})
    assert fresh.rule.best == 3.0 and fresh.update({"epoch": 5}) == "callback"
    assert check_callbacks(print) == (print,) and check_callbacks(None) == ()


# -- the package -------------------------------------------------------------------------------------
@pytest.mark.slow
def test_import_nnlo_stays_light_and_exports_the_api() -> None:
    code = ("import sys, nnlo; heavy = [m for m in ('torch', 'tensorflow', 'keras', 'skopt', 'matplotlib', "
            "'mpi4py') if m in sys.modules]; print(heavy); import nnlo.optimize.run; "
            "assert callable(nnlo.optimize) and callable(nnlo.train)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    assert nnlo.TrainResult is TrainResult and nnlo.SearchResult is SearchResult
    assert nnlo.StopTraining is StopTraining and nnlo.ArraySource is ArraySource
    with pytest.raises(AttributeError):
        nnlo.no_such_thing  # noqa: B018
