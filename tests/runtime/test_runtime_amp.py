"""``--amp`` (process-free): bfloat16 autocast on CPUs, and the float16 + gradient-scaler path (the GPU policy,
run here on the CPU) whose scaler state is checkpointed with the optimizer and restored."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from nnlo.backends import make_backend
from nnlo.backends.torch_amp import STATE_KEY, AmpPolicy, amp_policy
from nnlo.backends.torch_backend import TorchBackend
from nnlo.config import TrainConfig
from nnlo.errors import ConfigError

SCALED = AmpPolicy("cpu", torch.float16, scaler=True)  # the GPU policy's arithmetic, on the CPU


def _net() -> torch.nn.Module:
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))


def _batch(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(12, 6)).astype(np.float32), rng.integers(0, 3, size=12)


def test_the_policy_is_float16_with_a_scaler_on_gpus_and_bfloat16_on_cpus() -> None:
    assert amp_policy(torch.device("cuda", 0)) == AmpPolicy("cuda", torch.float16, scaler=True)
    assert amp_policy(torch.device("cpu")) == AmpPolicy("cpu", torch.bfloat16, scaler=False)
    backend = make_backend(_net(), TrainConfig(model="m.py", amp=True, loss="categorical_crossentropy"), "cpu")
    assert isinstance(backend, TorchBackend) and backend.amp.policy == amp_policy(torch.device("cpu"))
    seen: list[torch.dtype] = []
    backend.model[0].register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    metrics = backend.train_on_batch(*_batch())
    assert seen == [torch.bfloat16] and np.isfinite(metrics["loss"])
    assert all(p.dtype == torch.float32 for p in backend.params)  # weights stay float32
    assert STATE_KEY not in backend.optimizer_state()  # bfloat16 needs no scaler
    plain = make_backend(_net(), TrainConfig(model="m.py"), "cpu")
    assert not plain.amp.enabled


def test_gradients_are_handed_out_in_the_scalers_units_and_applied_alike() -> None:
    """compute_gradients + apply_gradients (the all-reduce path) = train_on_batch (one process)."""
    x, y = _batch(1)
    fused = TorchBackend(_net(), "categorical_crossentropy", "sgd:lr=0.1", amp=SCALED)
    split = TorchBackend(_net(), "categorical_crossentropy", "sgd:lr=0.1", amp=SCALED)
    plain = TorchBackend(_net(), "categorical_crossentropy", "sgd:lr=0.1")
    scale = split.amp.scaler.get_scale()
    grad, _ = split.compute_gradients(x, y)
    ref, _ = plain.compute_gradients(x, y)
    assert np.allclose(grad / scale, ref, rtol=0.05, atol=1e-4)  # float16 forward, times the scale
    split.apply_gradients(grad.copy())
    fused.train_on_batch(x, y)
    assert np.array_equal(split.get_weights(), fused.get_weights())


def test_an_inf_gradient_skips_the_step_and_backs_off_the_scale() -> None:
    backend = TorchBackend(_net(), "categorical_crossentropy", "sgd:lr=0.1", amp=SCALED)
    backend.compute_gradients(*_batch())
    before, scale = backend.get_weights(), backend.amp.scaler.get_scale()
    bad = np.zeros(backend.n_params, np.float32)
    bad[3] = np.inf  # what one replica's overflow makes of every replica's summed buffer
    backend.apply_gradients(bad)
    assert np.array_equal(backend.get_weights(), before)
    assert backend.amp.scaler.get_scale() == scale * 0.5


def test_the_scaler_state_travels_with_the_optimizer_state() -> None:
    a = TorchBackend(_net(), "categorical_crossentropy", "adam:lr=0.01", amp=SCALED)
    for seed in range(3):
        a.train_on_batch(*_batch(seed))
    bad = np.full(a.n_params, np.inf, np.float32)
    a.compute_gradients(*_batch())
    a.apply_gradients(bad)  # a backoff: the scale is no longer the initial one
    state = copy.deepcopy(a.optimizer_state())
    assert state[STATE_KEY]["scale"] == a.amp.scaler.get_scale() != torch.amp.GradScaler("cpu").get_scale()
    b = TorchBackend(_net(), "categorical_crossentropy", "adam:lr=0.01", amp=SCALED)
    b.set_weights(a.get_weights())
    b.load_optimizer_state(state)
    assert b.amp.scaler.state_dict() == a.amp.scaler.state_dict()
    x, y = _batch(9)
    a.train_on_batch(x, y)
    b.train_on_batch(x, y)
    assert np.array_equal(a.get_weights(), b.get_weights())  # the restored run continues exactly
    fresh = TorchBackend(_net(), "categorical_crossentropy", "adam:lr=0.01", amp=SCALED)
    plain_state = TorchBackend(_net(), "categorical_crossentropy", "adam:lr=0.01").optimizer_state()
    fresh.load_optimizer_state(plain_state)  # a checkpoint written without --amp: a fresh scaler
    assert fresh.amp.scaler.get_scale() == torch.amp.GradScaler("cpu").get_scale()


def test_amp_is_refused_for_keras_models_with_the_fix() -> None:
    class KerasLike:  # any model that is not a torch module goes to the Keras backend: refused before it loads
        pass

    with pytest.raises(ConfigError, match="--amp is for torch models.*mixed_precision"):
        make_backend(KerasLike(), TrainConfig(model="m.py", amp=True), "cpu")
