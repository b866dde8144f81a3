"""GEM against values worked out by hand from pi = clip((kappa*|proxy| - |central_delta|) / (|update| + eps), 0, 5),
its defaults, boundaries and messages."""
from __future__ import annotations

import numpy as np
import pytest

from nnlo.algorithms.gem import GEMState
from nnlo.errors import ConfigError


def f32(*values):
    return np.array(values, dtype=np.float32)


def test_two_steps_by_hand():
    gem = GEMState(4, lr=0.01, momentum=0.5, kappa=2.0)
    # step 1: proxy = update
    out = gem.rescale(f32(0.1, -0.2, 0.0, 0.3), f32(0.05, 0.5, 0.1, -0.1))
    # pi = (0.2-0.05)/0.1 = 1.5 | (0.4-0.5)/0.2 < 0 -> 0 | (0-0.1)/eps < 0 -> 0 | (0.6-0.1)/0.3 = 5/3
    np.testing.assert_allclose(out, [0.15, 0.0, 0.0, 0.5], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(gem.proxy, [0.1, -0.2, 0.0, 0.3], rtol=1e-7)
    # step 2: proxy = 0.5*proxy + update = [0.15, 0.0, 0.01, 0.45]; the center did not move
    out = gem.rescale(f32(0.1, 0.1, 0.01, 0.3), f32(0, 0, 0, 0))
    # pi = 0.3/0.1 = 3 | 0/0.1 = 0 | 0.02/0.01 = 2 | 0.9/0.3 = 3
    np.testing.assert_allclose(out, [0.3, 0.0, 0.02, 0.9], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(gem.proxy, [0.15, 0.0, 0.01, 0.45], rtol=1e-6)
    assert gem.steps == 2


def test_scale_is_capped_and_sign_kept():
    gem = GEMState(2, momentum=0.9, kappa=2.0)
    gem.rescale(f32(1.0, -1.0), f32(0, 0))
    # proxy = 0.9*[1,-1] + [0.001,-0.001]; pi = 2*0.901/0.001 = 1802 -> capped at 5
    out = gem.rescale(f32(0.001, -0.001), f32(0, 0))
    np.testing.assert_allclose(out, [0.005, -0.005], rtol=1e-6)


def test_in_place_on_the_update_itself():
    gem = GEMState(2, momentum=0.0, kappa=2.0)
    u = f32(0.5, -0.5)
    assert gem.rescale(u, f32(0.5, 0.0), out=u) is u
    np.testing.assert_allclose(u, [0.5, -1.0])  # pi = (1-0.5)/0.5 = 1 | (1-0)/0.5 = 2


def test_state_dict_round_trip_continues_identically():
    rng = np.random.default_rng(0)
    steps = [(rng.normal(size=5).astype(np.float32), rng.normal(size=5).astype(np.float32)) for _ in range(6)]
    a = GEMState(5)
    outs_a = [a.rescale(u, c) for u, c in steps]
    b = GEMState(5)
    for u, c in steps[:3]:
        b.rescale(u, c)
    c_state = GEMState(5)
    c_state.load_state_dict(b.state_dict())
    outs_c = [c_state.rescale(u, c) for u, c in steps[3:]]
    for x, y in zip(outs_a[3:], outs_c):
        np.testing.assert_array_equal(x, y)
    assert c_state.steps == 6
    with pytest.raises(ConfigError, match="has 5 values but the model has 4"):
        GEMState(4).load_state_dict(a.state_dict())
    with pytest.raises(ConfigError, match="malformed"):
        GEMState(4).load_state_dict({})


@pytest.mark.parametrize("kwargs, message", [
    (dict(lr=0.0), "--gem-lr must be > 0"),
    (dict(momentum=1.0), r"--gem-momentum must be in \[0, 1\)"),
    (dict(kappa=-1.0), "--gem-kappa must be > 0"),
])
def test_bad_hyperparameters(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        GEMState(3, **kwargs)


def test_shape_mismatch_is_refused():
    with pytest.raises(ValueError, match="expected \\(3,\\)"):
        GEMState(3).rescale(f32(1, 2), f32(1, 2))


def test_a_zero_update_commits_zero_never_nan():
    """Where the worker did not move and neither did the proxy, pi is 0/eps, not 0/0: the commit is 0."""
    gem = GEMState(3, momentum=0.9, kappa=2.0)
    out = gem.rescale(f32(0.0, 0.0, 0.0), f32(0.0, 0.5, 0.0))
    assert np.isfinite(out).all() and out.tolist() == [0.0, 0.0, 0.0]
    out = gem.rescale(f32(0.0, 0.25, 0.0), f32(0.0, 0.0, 0.0))  # one coordinate moves: pi = 2*0.25/0.25 = 2
    assert np.isfinite(out).all() and out.tolist() == [0.0, 0.5, 0.0]
    assert gem.proxy.tolist() == [0.0, 0.25, 0.0]


def test_defaults_are_the_upstream_ones():
    """lr 0.01, momentum 0.9, kappa 2.0 (the paper's and mpi_learn's defaults), pi capped at 5, eps 1e-12."""
    gem = GEMState(2)
    assert (gem.lr, gem.momentum, gem.kappa, gem.max_scale, gem.eps) == (0.01, 0.9, 2.0, 5.0, 1e-12)
    assert gem.state_dict()["kappa"] == 2.0 and gem.steps == 0 and gem.proxy.tolist() == [0.0, 0.0]
    # kappa sets the target: with the proxy at the update and no central motion, pi = kappa (not capped)
    out = GEMState(1, momentum=0.0).rescale(f32(0.5), f32(0.0))
    assert out.tolist() == [1.0]


@pytest.mark.parametrize("kwargs, message", [
    (dict(lr=float("nan")), r"^--gem-lr must be > 0, got nan; the usual value is 0.01$"),
    (dict(lr=float("inf")), r"^--gem-lr must be > 0, got inf; the usual value is 0.01$"),
    (dict(lr=-0.5), r"^--gem-lr must be > 0, got -0.5; the usual value is 0.01$"),
    (dict(momentum=-0.1), r"^--gem-momentum must be in \[0, 1\), got -0.1; the usual value is 0.9$"),
    (dict(kappa=0.0), r"^--gem-kappa must be > 0, got 0.0; the usual value is 2.0$"),
    (dict(kappa=float("inf")), r"^--gem-kappa must be > 0, got inf; the usual value is 2.0$"),
    (dict(max_scale=0.0), r"^GEM max_scale must be > 0, got 0.0$"),
])
def test_bad_hyperparameters_say_what_and_the_usual_value(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        GEMState(3, **kwargs)


def test_boundary_hyperparameters_are_accepted():
    assert GEMState(1, momentum=0.0).momentum == 0.0  # no momentum: the proxy is the last update
    assert GEMState(1, lr=1e-30, kappa=1e-30, max_scale=1e-30).max_scale == 1e-30
    with pytest.raises(ValueError, match=r"^GEM needs at least one parameter, got 0$"):
        GEMState(0)


def test_state_dict_is_a_copy_and_malformed_states_are_refused():
    gem = GEMState(2, momentum=0.5, kappa=3.0, max_scale=4.0, lr=0.1)
    gem.rescale(f32(1.0, -1.0), f32(0.0, 0.0))
    state = gem.state_dict()
    assert state == {"proxy": state["proxy"], "steps": 1, "lr": 0.1, "momentum": 0.5, "kappa": 3.0,
                     "max_scale": 4.0}
    state["proxy"][0] = 99.0
    assert gem.proxy.tolist() == [1.0, -1.0]  # a copy: the caller cannot change the live proxy
    other = GEMState(2, kappa=7.0)
    other.load_state_dict({"proxy": [[0.5], [0.25]], "steps": "3"})  # any shape of the right size; steps as int
    assert other.proxy.tolist() == [0.5, 0.25] and other.steps == 3 and other.kappa == 7.0  # ours win
    other.load_state_dict({"proxy": [1.0, 2.0]})
    assert other.steps == 0
    for bad in ({"proxy": "xy"}, {"proxy": [1.0, 2.0], "steps": None}, {"steps": 1}):
        with pytest.raises(ConfigError, match=r"^saved GEM state is malformed \(needs 'proxy'\); was it written by "
                                              r"nnlo\?$"):
            other.load_state_dict(bad)
    with pytest.raises(ConfigError, match=r"^saved GEM state has 3 values but the model has 2; restore with the "
                                          r"same model$"):
        other.load_state_dict({"proxy": [1.0, 2.0, 3.0]})


def test_shape_mismatch_names_which_input():
    with pytest.raises(ValueError, match=r"^GEM update has shape \(2,\), expected \(3,\)$"):
        GEMState(3).rescale(f32(1, 2), f32(1, 2, 3))
    with pytest.raises(ValueError, match=r"^GEM central_delta has shape \(2,\), expected \(3,\)$"):
        GEMState(3).rescale(f32(1, 2, 3), f32(1, 2))


def test_rescaling_in_place_allocates_no_model_size_array():
    """GEM's docstring: with ``out`` (even the update itself) a step allocates nothing model-sized."""
    import tracemalloc

    n = 1_000_000
    gem = GEMState(n)
    update, delta = np.full(n, 0.01, np.float32), np.full(n, 0.001, np.float32)
    gem.rescale(update.copy(), delta)
    tracemalloc.start()
    try:
        gem.rescale(update, delta, out=update)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < n, f"a step allocated {peak} bytes"
    assert update.dtype == np.float32 and gem.proxy.dtype == np.float32
