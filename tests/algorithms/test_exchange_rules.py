"""Downpour, EASGD and the synchronous mean on small vectors with values worked out by hand."""
from __future__ import annotations

import numpy as np
import pytest

from nnlo.algorithms import downpour, easgd, synchronous
from nnlo.algorithms.optimizers import make_optimizer
from nnlo.errors import ConfigError


def f32(*values):
    return np.array(values, dtype=np.float32)


# -- Downpour ----------------------------------------------------------------------------------------------
def test_downpour_sgd_lr1_adds_delta_as_is_and_keeps_delta():
    w, delta = f32(1, 2, 3), f32(0.5, -0.25, 0)
    downpour.apply(w, delta, make_optimizer("sgd:lr=1"))
    np.testing.assert_array_equal(w, [1.5, 1.75, 3])
    np.testing.assert_array_equal(delta, [0.5, -0.25, 0])


def test_downpour_lr_damps_and_momentum_accumulates():
    w = f32(0, 0)
    opt = make_optimizer("sgd:lr=0.5,momentum=0.5")
    downpour.apply(w, f32(1, -1), opt)  # buf = [-1, 1] (gradient = -delta); w -= 0.5*buf
    np.testing.assert_allclose(w, [0.5, -0.5])
    downpour.apply(w, f32(1, -1), opt)  # buf = 0.5*buf - delta = [-1.5, 1.5]; w -= 0.75
    np.testing.assert_allclose(w, [1.25, -1.25])


def test_downpour_with_adam_equals_adam_on_negated_delta():
    rng = np.random.default_rng(0)
    deltas = [rng.normal(size=20).astype(np.float32) for _ in range(4)]
    a, b = np.ones(20, np.float32), np.ones(20, np.float32)
    oa, ob = make_optimizer("adam:lr=0.1"), make_optimizer("adam:lr=0.1")
    for d in deltas:
        downpour.apply(a, d, oa)
        ob.step(b, -d)
    np.testing.assert_array_equal(a, b)


def test_worker_delta():
    out = np.empty(2, np.float32)
    assert downpour.worker_delta(f32(3, 1), f32(1, 1), out=out) is out
    np.testing.assert_array_equal(out, [2, 0])


# -- EASGD -------------------------------------------------------------------------------------------------
def test_alpha_and_its_errors():
    assert easgd.alpha(0.9, 3) == pytest.approx(0.3)
    with pytest.raises(ConfigError, match="--elastic-force must be > 0"):
        easgd.alpha(0.0, 2)
    with pytest.raises(ConfigError, match="at least one worker"):
        easgd.alpha(0.5, 0)
    with pytest.raises(ConfigError, match=r"alpha=1.5 > 1.*--elastic-force <= 2"):
        easgd.alpha(3.0, 2)


def test_elastic_exchange_by_hand_and_conserves_the_sum():
    master, worker = f32(0, 10), f32(4, 2)
    before = master + worker
    m_old, w_old = master.copy(), worker.copy()
    scratch = np.empty(2, np.float32)
    easgd.master_update(master, w_old, 0.25, scratch=scratch)  # 0 + 0.25*(4-0) = 1 | 10 + 0.25*(2-10) = 8
    easgd.worker_update(worker, m_old, 0.25)                   # 4 - 0.25*4 = 3 | 2 - 0.25*(-8) = 4
    np.testing.assert_allclose(master, [1, 8])
    np.testing.assert_allclose(worker, [3, 4])
    np.testing.assert_allclose(master + worker, before)


def test_alpha_one_half_meets_in_the_middle():
    master, worker = f32(0, 2), f32(4, 6)
    m_old = master.copy()
    easgd.master_update(master, worker, 0.5)
    easgd.worker_update(worker, m_old, 0.5)
    np.testing.assert_array_equal(master, worker)


# -- synchronous -------------------------------------------------------------------------------------------
def test_scale_in_place_turns_allreduce_sum_into_mean():
    total = f32(6, 9)
    assert synchronous.scale_in_place(total, 3) is total
    np.testing.assert_allclose(total, [2, 3])
    with pytest.raises(ValueError):
        synchronous.scale_in_place(total, 0)


def test_downpour_plain_sgd_shortcut_scales_by_lr():
    w, delta = f32(1, 1), f32(2, -4)
    opt = make_optimizer("sgd:lr=0.25")
    downpour.apply(w, delta, opt)
    np.testing.assert_array_equal(w, [1.5, 0.0])
    opt.step(w, f32(2, 4))  # an ordinary gradient step through the same shortcut
    np.testing.assert_array_equal(w, [1.0, -1.0])
    assert opt.step_count == 2
