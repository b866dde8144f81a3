"""The numpy optimizers must reproduce torch.optim step for step, parse specs strictly and checkpoint exactly."""
from __future__ import annotations

import pickle
import tracemalloc

import numpy as np
import pytest

from nnlo.algorithms.optimizers import (
    OPTIONS, describe_options, format_spec, keras_equivalent, make_optimizer, normalize_spec,
    parse_optimizer_spec, torch_equivalent,
)
from nnlo.errors import ConfigError

torch = pytest.importorskip("torch")

SPECS = [
    "sgd",
    "sgd:lr=0.1",
    "sgd:lr=0.05,momentum=0.9",
    "sgd:lr=0.05,momentum=0.9,nesterov=true,weight_decay=0.01",
    "adam",
    "adam:lr=0.01,beta1=0.8,beta2=0.99,eps=1e-6,weight_decay=0.001",
    "rmsprop",
    "rmsprop:lr=0.001,rho=0.9,momentum=0.5",
    "rmsprop:lr=0.001,centered=true,momentum=0.9,weight_decay=0.01",
    "adadelta",
    "adadelta:lr=0.5,rho=0.95,eps=1e-5",
]


def _run_both(spec: str, steps: int = 25, n: int = 257, seed: int = 0):
    rng = np.random.default_rng(seed)
    w0 = rng.normal(size=n).astype(np.float32)
    grads = [rng.normal(size=n).astype(np.float32) * (1 + k % 3) for k in range(steps)]
    ours = make_optimizer(spec)
    w = w0.copy()
    cls, kwargs = torch_equivalent(spec)
    p = torch.nn.Parameter(torch.from_numpy(w0.copy()))
    theirs = getattr(torch.optim, cls)([p], **kwargs)
    for g in grads:
        ours.step(w, g)
        p.grad = torch.from_numpy(g.copy())
        theirs.step()
    return w, p.detach().numpy(), w0


@pytest.mark.parametrize("spec", SPECS)
def test_matches_torch_on_identical_gradients(spec):
    ours, theirs, w0 = _run_both(spec)
    assert not np.allclose(ours, w0), "the optimizer did not move the weights"
    np.testing.assert_allclose(ours, theirs, rtol=2e-5, atol=2e-6)


def test_sgd_lr1_applies_gradient_as_is():
    w = np.array([1.0, 2.0, 3.0], np.float32)
    make_optimizer("sgd:lr=1").step(w, np.array([0.5, -1.0, 0.0], np.float32))
    np.testing.assert_array_equal(w, [0.5, 3.0, 3.0])


def test_grad_scale_equals_scaled_gradient():
    rng = np.random.default_rng(1)
    g = rng.normal(size=64).astype(np.float32)
    a, b = np.ones(64, np.float32), np.ones(64, np.float32)
    oa, ob = make_optimizer("adam:lr=0.1"), make_optimizer("adam:lr=0.1")
    for _ in range(3):
        oa.step(a, g, grad_scale=-0.5)
        ob.step(b, g * np.float32(-0.5))
    np.testing.assert_array_equal(a, b)


def test_gradient_is_not_modified():
    g = np.arange(10, dtype=np.float32)
    keep = g.copy()
    opt = make_optimizer("sgd:lr=0.1,momentum=0.9,weight_decay=0.1")
    opt.step(np.ones(10, np.float32), g, grad_scale=2.0)
    np.testing.assert_array_equal(g, keep)


@pytest.mark.parametrize("spec", ["sgd:momentum=0.9,nesterov=true", "adam", "rmsprop:centered=true,momentum=0.5",
                                  "adadelta"])
def test_state_dict_resumes_exactly(spec):
    rng = np.random.default_rng(2)
    grads = [rng.normal(size=33).astype(np.float32) for _ in range(8)]
    straight, w1 = make_optimizer(spec), np.ones(33, np.float32)
    for g in grads:
        straight.step(w1, g)
    first, w2 = make_optimizer(spec), np.ones(33, np.float32)
    for g in grads[:4]:
        first.step(w2, g)
    saved = pickle.loads(pickle.dumps(first.state_dict()))
    for g in grads[:2]:  # the saved state must be a copy, unaffected by later steps
        first.step(np.ones(33, np.float32), g)
    resumed = make_optimizer(spec)
    resumed.load_state_dict(saved)
    for g in grads[4:]:
        resumed.step(w2, g)
    np.testing.assert_array_equal(w1, w2)
    assert resumed.step_count == 8


def test_load_state_dict_refuses_other_optimizer_and_size():
    adam = make_optimizer("adam")
    adam.step(np.ones(4, np.float32), np.ones(4, np.float32))
    with pytest.raises(ConfigError, match="for adam but this optimizer is sgd"):
        make_optimizer("sgd:momentum=0.9").load_state_dict(adam.state_dict())
    other = make_optimizer("adam")
    other.step(np.ones(5, np.float32), np.ones(5, np.float32))
    with pytest.raises(ConfigError, match="has 4 values but the model has 5"):
        other.load_state_dict(adam.state_dict())
    with pytest.raises(ConfigError, match="malformed"):
        other.load_state_dict({"weights": 1})


def test_steps_reuse_buffers_and_do_not_allocate_model_size_arrays():
    n = 1_000_000
    w, g = np.zeros(n, np.float32), np.ones(n, np.float32)
    for spec in ("sgd:momentum=0.9,nesterov=true,weight_decay=0.1", "adam:weight_decay=0.1",
                 "rmsprop:centered=true,momentum=0.9", "adadelta"):
        opt = make_optimizer(spec)
        opt.step(w, g, grad_scale=-1.0)  # first step allocates state and scratch
        ids = {k: id(v) for k, v in opt.state.items()}
        tracemalloc.start()
        try:
            opt.step(w, g, grad_scale=-1.0)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < n, f"{spec}: a step allocated {peak} bytes"
        assert ids == {k: id(v) for k, v in opt.state.items()}


def test_wrong_arrays_are_refused():
    opt = make_optimizer("sgd")
    with pytest.raises(TypeError, match="float32"):
        opt.step(np.ones(3), np.ones(3))
    with pytest.raises(ValueError, match="has 4 values but the weights have 3"):
        opt.step(np.ones(3, np.float32), np.ones(4, np.float32))
    with pytest.raises(TypeError, match="contiguous"):
        opt.step(np.ones(6, np.float32)[::2], np.ones(3, np.float32))


# -- spec strings ------------------------------------------------------------------------------------------
def test_parse_types_and_defaults():
    name, p = parse_optimizer_spec(" SGD : lr=0.1, momentum=0.9, nesterov=TRUE ")
    assert name == "sgd"
    assert p == {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 0.0}
    assert isinstance(p["nesterov"], bool) and isinstance(p["lr"], float)
    assert parse_optimizer_spec("adam")[1] == {k: o.default for k, o in OPTIONS["adam"].items()}
    assert parse_optimizer_spec("rmsprop:centered=no")[1]["centered"] is False
    assert parse_optimizer_spec("adam:lr=1e-4")[1]["lr"] == pytest.approx(1e-4)


@pytest.mark.parametrize("spec, message", [
    ("adamw", r"unknown optimizer 'adamw'; valid: adadelta, adam, rmsprop, sgd"),
    ("", r"unknown optimizer"),
    ("sgd:beta1=0.9", r"optimizer sgd has no option 'beta1'; valid options: lr, momentum, nesterov, weight_decay"),
    ("sgd:lr=fast", r"sgd:lr=fast is not a number"),
    ("sgd:lr=-1", r"lr must be >= 0"),
    ("sgd:lr=nan", r"out of range"),
    ("adam:beta2=1", r"beta2 must be in \[0, 1\)"),
    ("sgd:nesterov=maybe", r"is not true/false"),
    ("sgd:nesterov=true", r"nesterov=true needs momentum > 0"),
    ("sgd:lr", r"'lr' is not key=value"),
    ("sgd:lr=0.1,lr=0.2", r"sets lr twice"),
])
def test_bad_specs_are_one_line_config_errors(spec, message):
    with pytest.raises(ConfigError, match=message) as info:
        parse_optimizer_spec(spec)
    assert "\n" not in str(info.value)


def test_pairs_format_and_mappings():
    assert normalize_spec(("adam", {"lr": "0.5"}))[1]["lr"] == 0.5
    assert parse_optimizer_spec(format_spec("sgd:lr=0.3,momentum=0.5")) == parse_optimizer_spec("sgd:lr=0.3,momentum=0.5")
    assert make_optimizer(("rmsprop", {"rho": 0.5})).params["rho"] == 0.5
    assert torch_equivalent("rmsprop:rho=0.5") [1]["alpha"] == 0.5
    assert keras_equivalent("adam:beta1=0.8") == ("Adam", {"learning_rate": 0.001, "beta_1": 0.8,
                                                            "beta_2": 0.999, "epsilon": 1e-8})
    with pytest.raises(ConfigError, match="decoupled in Keras"):
        keras_equivalent("sgd:weight_decay=0.1")
    with pytest.raises(ConfigError):
        normalize_spec(42)
    assert all(name in describe_options() for name in OPTIONS)


def test_keras_and_torch_spellings_are_aliases():
    assert parse_optimizer_spec("adam:learning_rate=0.1,beta_1=0.8,epsilon=1e-7") == \
        parse_optimizer_spec("adam:lr=0.1,beta1=0.8,eps=1e-7")
    assert parse_optimizer_spec("rmsprop:alpha=0.9")[1]["rho"] == 0.9
    with pytest.raises(ConfigError, match="has no option 'alpha'"):
        parse_optimizer_spec("adadelta:alpha=0.9")
    with pytest.raises(ConfigError, match=r"sets lr twice \(as learning_rate too\)"):
        parse_optimizer_spec("sgd:lr=0.1,learning_rate=0.2")
