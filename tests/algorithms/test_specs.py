"""Optimizer specs exactly: every option's default, what each framework is handed, boundaries of the ranges,
and each refusal's words; EASGD's moving rate and the synchronous mean at their limits."""
from __future__ import annotations

import numpy as np
import pytest

from nnlo.algorithms.easgd import alpha, master_update, worker_update
from nnlo.algorithms.specs import (
    describe_options,
    format_spec,
    keras_equivalent,
    normalize_spec,
    parse_optimizer_spec,
    torch_equivalent,
)
from nnlo.algorithms.synchronous import scale_in_place
from nnlo.errors import ConfigError

DEFAULTS = {
    "sgd": {"lr": 0.001, "momentum": 0.0, "nesterov": False, "weight_decay": 0.0},
    "adam": {"lr": 0.001, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0},
    "rmsprop": {"lr": 0.01, "rho": 0.99, "eps": 1e-8, "momentum": 0.0, "centered": False, "weight_decay": 0.0},
    "adadelta": {"lr": 1.0, "rho": 0.9, "eps": 1e-6, "weight_decay": 0.0},
}


@pytest.mark.parametrize("name", sorted(DEFAULTS))
def test_every_default(name):
    got_name, params = parse_optimizer_spec(name.upper())
    assert got_name == name and params == DEFAULTS[name]
    assert [type(v) for v in params.values()] == [type(v) for v in DEFAULTS[name].values()]


def test_the_help_text_lists_every_option_with_its_default():
    assert describe_options() == (
        "sgd:lr=0.001,momentum=0.0,nesterov=false,weight_decay=0.0; "
        "adam:lr=0.001,beta1=0.9,beta2=0.999,eps=1e-08,weight_decay=0.0; "
        "rmsprop:lr=0.01,rho=0.99,eps=1e-08,momentum=0.0,centered=false,weight_decay=0.0; "
        "adadelta:lr=1.0,rho=0.9,eps=1e-06,weight_decay=0.0")
    canonical = "rmsprop:lr=0.01,rho=0.5,eps=1e-08,momentum=0.0,centered=true,weight_decay=0.0"
    # the canonical string: every option in the optimizer's order, whatever order the options were given in
    assert format_spec("rmsprop:alpha=0.5,centered=yes") == canonical == format_spec("rmsprop:centered=1,rho=0.5")


@pytest.mark.parametrize("spec, torch, keras", [
    ("sgd:lr=0.1,momentum=0.9,nesterov=1", ("SGD", {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 0.0}),
     ("SGD", {"learning_rate": 0.1, "momentum": 0.9, "nesterov": True})),
    ("adam:beta1=0.8,beta2=0.99,eps=1e-6", ("Adam", {"lr": 0.001, "betas": (0.8, 0.99), "eps": 1e-6,
                                                     "weight_decay": 0.0}),
     ("Adam", {"learning_rate": 0.001, "beta_1": 0.8, "beta_2": 0.99, "epsilon": 1e-6})),
    ("rmsprop:rho=0.5,momentum=0.2,centered=on,eps=0.1",
     ("RMSprop", {"lr": 0.01, "alpha": 0.5, "eps": 0.1, "momentum": 0.2, "centered": True, "weight_decay": 0.0}),
     ("RMSprop", {"learning_rate": 0.01, "rho": 0.5, "momentum": 0.2, "epsilon": 0.1, "centered": True})),
    ("adadelta:lr=0.5,rho=1,eps=0", ("Adadelta", {"lr": 0.5, "rho": 1.0, "eps": 0.0, "weight_decay": 0.0}),
     ("Adadelta", {"learning_rate": 0.5, "rho": 1.0, "epsilon": 0.0})),
])
def test_what_each_framework_is_handed(spec, torch, keras):
    assert torch_equivalent(spec) == torch and keras_equivalent(spec) == keras


def test_weight_decay_reaches_torch_and_is_refused_for_keras():
    for name in DEFAULTS:
        assert torch_equivalent(f"{name}:weight_decay=0.01")[1]["weight_decay"] == 0.01
        with pytest.raises(ConfigError, match=rf"^optimizer {name}: weight_decay is L2 in nnlo but decoupled in Keras; "
                                              r"drop weight_decay or use the torch backend$"):
            keras_equivalent(f"{name}:weight_decay=0.01")


@pytest.mark.parametrize("spec, params", [
    ("adam:beta1=0,beta2=0.5", {"beta1": 0.0, "beta2": 0.5}),
    ("rmsprop:rho=0", {"rho": 0.0}), ("rmsprop:rho=1", {"rho": 1.0}), ("sgd:lr=0,momentum=0", {"lr": 0.0}),
    (" SGD : LR = 0.5 , Momentum=0.1 ", {"lr": 0.5, "momentum": 0.1}), ("sgd:,lr=0.5,", {"lr": 0.5}),
    ("sgd:momentum=1e-9,nesterov=TRUE", {"nesterov": True}), ("sgd:nesterov=off", {"nesterov": False}),
    ("sgd:nesterov=no", {"nesterov": False}), ("sgd:nesterov=0", {"nesterov": False}),
    ("adam:eps=1e-3", {"eps": 0.001}), ("rmsprop:alpha=0.25", {"rho": 0.25}),
])
def test_accepted_values_at_their_boundaries(spec, params):
    _, got = parse_optimizer_spec(spec)
    assert {k: got[k] for k in params} == params


@pytest.mark.parametrize("spec, message", [
    ("adam:beta1=1", "optimizer option adam:beta1=1 is out of range: beta1 must be in [0, 1)"),
    ("adam:beta2=-0.1", "optimizer option adam:beta2=-0.1 is out of range: beta2 must be in [0, 1)"),
    ("rmsprop:rho=1.01", "optimizer option rmsprop:rho=1.01 is out of range: rho must be in [0, 1]"),
    ("adadelta:rho=-1", "optimizer option adadelta:rho=-1 is out of range: rho must be in [0, 1]"),
    ("sgd:lr=-1", "optimizer option sgd:lr=-1 is out of range: lr must be >= 0"),
    ("sgd:lr=nan", "optimizer option sgd:lr=nan is out of range: lr must be >= 0"),
    ("sgd:lr=inf", "optimizer option sgd:lr=inf is out of range: lr must be >= 0"),
    ("sgd:lr=fast", "optimizer option sgd:lr=fast is not a number; write e.g. sgd:lr=0.001"),
    ("adam:eps=tiny", "optimizer option adam:eps=tiny is not a number; write e.g. adam:eps=1e-08"),
    ("sgd:nesterov=maybe", "optimizer option sgd:nesterov=maybe is not true/false; write e.g. sgd:nesterov=true"),
    ("sgd:nesterov=true", "optimizer sgd: nesterov=true needs momentum > 0; add e.g. momentum=0.9"),
    ("sgd:nesterov=true,momentum=0", "optimizer sgd: nesterov=true needs momentum > 0; add e.g. momentum=0.9"),
    ("sgd:beta1=0.9", "optimizer sgd has no option 'beta1'; valid options: lr, momentum, nesterov, weight_decay "
                      "(e.g. sgd:lr=0.001,momentum=0.0,nesterov=false,weight_decay=0.0)"),
    ("rmsprop:alpha=0.5,rho=0.5", "optimizer rmsprop sets rho twice (as rho too); keep one"),
    ("sgd:lr=0.1,lr=0.2", "optimizer spec 'sgd:lr=0.1,lr=0.2' sets lr twice; keep one"),
    ("sgd:lr", "optimizer spec 'sgd:lr': 'lr' is not key=value; write e.g. "
               "sgd:lr=0.001,momentum=0.0,nesterov=false,weight_decay=0.0"),
    ("sgd:=0.1", "optimizer spec 'sgd:=0.1': '=0.1' is not key=value"),
    ("sgd:lr= ", "optimizer spec 'sgd:lr= ': 'lr=' is not key=value"),
    ("sgd:lr=0.1=2", "optimizer option sgd:lr=0.1=2 is not a number"),
    ("nadam:lr=1", "unknown optimizer 'nadam'; valid: adadelta, adam, rmsprop, sgd (with options, e.g. "
                   "sgd:lr=0.1,momentum=0.9)"),
    (":lr=1", "unknown optimizer ':lr=1'; valid: adadelta, adam, rmsprop, sgd"),
    ("", "unknown optimizer ''; valid"),
])
def test_refused_specs_say_what_and_how(spec, message):
    with pytest.raises(ConfigError) as e:
        parse_optimizer_spec(spec)
    assert str(e.value).startswith(message), str(e.value)


def test_specs_as_pairs():
    assert normalize_spec(("Adam", {"beta1": "0.5"})) == ("adam", {**DEFAULTS["adam"], "beta1": 0.5})
    assert normalize_spec(("sgd", None)) == ("sgd", DEFAULTS["sgd"])
    assert normalize_spec(("sgd", {"nesterov": True, "momentum": 0.5}))[1]["nesterov"] is True
    with pytest.raises(ConfigError, match=r"^optimizer option sgd:lr=True must be a number; write e\.g\. "
                                          r"sgd:lr=0\.001$"):
        normalize_spec(("sgd", {"lr": True}))
    with pytest.raises(ConfigError, match=r"^optimizer spec must be 'name:key=value,\.\.\.' or \(name, options\), "
                                          r"got 3$"):
        normalize_spec(3)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"^unknown optimizer 'lamb'; valid"):
        normalize_spec(("lamb", {}))
    with pytest.raises(ConfigError, match=r"^optimizer spec must be a string like 'adam' or 'sgd:lr=0\.1', got 7$"):
        parse_optimizer_spec(7)  # type: ignore[arg-type]


# -- EASGD and the synchronous mean ------------------------------------------------------------------------
def test_the_elastic_moving_rate_and_its_limits():
    assert alpha(0.9, 1) == 0.9 and alpha(0.9, 3) == pytest.approx(0.3) and alpha(2.0, 2) == 1.0
    assert alpha(1.0, 1) == 1.0  # alpha = 1 still contracts
    for force, workers, message in [
        (0.9, 0, "EASGD needs at least one worker, got 0; start more ranks"),
        (0.0, 2, "--elastic-force must be > 0, got 0.0; the usual value is 0.9"),
        (float("nan"), 2, "--elastic-force must be > 0, got nan; the usual value is 0.9"),
        (float("inf"), 2, "--elastic-force must be > 0, got inf"),
        (2.5, 2, "--elastic-force 2.5 with 2 worker(s) gives alpha=1.25 > 1, which overshoots; use --elastic-force <= 2"),
    ]:
        with pytest.raises(ConfigError) as e:
            alpha(force, workers)
        assert str(e.value).startswith(message)


def test_elastic_updates_use_the_scratch_buffer_and_the_pre_exchange_values():
    master, worker = np.array([1.0, 2.0], dtype=np.float32), np.array([3.0, -2.0], dtype=np.float32)
    scratch = np.zeros(2, dtype=np.float32)
    m0 = master.copy()
    master_update(master, worker, 0.25, scratch)
    assert master.tolist() == [1.5, 1.0] and scratch.tolist() == [0.5, -1.0]  # the difference lives in scratch
    worker_update(worker, m0, 0.25, scratch)
    assert worker.tolist() == [2.5, -1.0] and scratch.tolist() == [0.5, -1.0]
    w = np.array([4.0], dtype=np.float32)
    worker_update(w, np.array([0.0], dtype=np.float32), 0.5)  # no scratch: allocated
    assert w.tolist() == [2.0] and w.dtype == np.float32


def test_the_synchronous_mean_at_its_limits():
    total = np.array([3.0, 6.0], dtype=np.float32)
    assert scale_in_place(total, 3) is total and total.tolist() == [1.0, 2.0]
    assert scale_in_place(np.array([5.0]), 1).tolist() == [5.0]  # one update is its own mean
    for count in (0, -2):
        with pytest.raises(ValueError, match=rf"^cannot average {count} updates$"):
            scale_in_place(np.ones(2), count)


def test_an_empty_name_is_shown_as_given():
    with pytest.raises(ConfigError, match=r"^unknown optimizer ''; valid"):
        normalize_spec(("", {}))
    with pytest.raises(ConfigError, match=r"^unknown optimizer ' :lr=1'|^unknown optimizer ':lr=1'"):
        parse_optimizer_spec(" :lr=1")


def test_elastic_worker_updates_allocate_nothing_with_a_scratch_buffer():
    import tracemalloc

    n = 1_000_000
    w, m, scratch = np.ones(n, np.float32), np.zeros(n, np.float32), np.empty(n, np.float32)
    tracemalloc.start()
    try:
        worker_update(w, m, 0.5, scratch)
        master_update(m, w, 0.5, scratch)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < n and float(w[0]) == 0.5 and float(m[0]) == 0.25
