"""Engine choice, buffer checks and learning-rate scaling (in-process, no mpirun)."""
from __future__ import annotations

import numpy as np
import pytest

from nnlo.allreduce import available_engines, make_engine, resolve_engine
from nnlo.algorithms.specs import parse_optimizer_spec
from nnlo.config import TrainConfig
from nnlo.errors import ConfigError
from nnlo.training.allreduce import scaled_config


def test_auto_is_mpi_on_cpus_and_unknown_names_are_refused() -> None:
    assert resolve_engine("auto", on_gpu=False) == "mpi"
    assert resolve_engine("mpi", on_gpu=True) == "mpi"
    assert resolve_engine("torch", on_gpu=False) == "torch"
    with pytest.raises(ConfigError, match="--allreduce-engine 'nccl' is unknown"):
        resolve_engine("nccl", on_gpu=False)


def test_auto_picks_torch_with_nccl_on_gpus_and_never_for_keras(monkeypatch: pytest.MonkeyPatch) -> None:
    from nnlo.allreduce import choose, torchdist

    monkeypatch.setattr(torchdist, "nccl_usable", lambda device: str(device).startswith("cuda"))
    assert resolve_engine("auto", on_gpu=True) == "torch"
    assert resolve_engine("auto", on_gpu=False) == "mpi"
    monkeypatch.setattr(choose._horovod, "importable", lambda: False)
    assert resolve_engine("auto", on_gpu=True, framework="keras") == "mpi"  # no device buffers for Keras
    monkeypatch.setattr(torchdist, "nccl_usable", lambda device: False)  # a torch without NCCL
    assert resolve_engine("auto", on_gpu=True) == "mpi"


def test_torch_engine_over_one_rank_and_its_buffers() -> None:
    import torch
    from mpi4py import MPI

    from nnlo.allreduce.torchdist import TorchEngine

    engine = make_engine("torch", MPI.COMM_SELF)
    assert engine.describe() == "torch.distributed gloo over 1 rank(s)" and engine.device == "cpu"
    buf = engine.zeros(4)
    assert isinstance(buf, np.ndarray)  # gloo sums host arrays in place, no copy
    buf[:] = [1, 2, 3, 4]
    engine.allreduce_sum(buf)
    engine.iallreduce_sum(buf[1:3]).wait()
    engine.broadcast(buf)
    assert buf.tolist() == [1, 2, 3, 4]
    with pytest.raises(TypeError, match="flat contiguous float32"):
        engine.allreduce_sum(np.zeros(4))
    engine.close()
    forced = TorchEngine(MPI.COMM_SELF, device_buffers=True)  # the NCCL path's tensor buffers, on the CPU
    t = forced.zeros(3)
    assert isinstance(t, torch.Tensor) and t.dtype == torch.float32 and "tensors" in forced.describe()
    with pytest.raises(TypeError, match="flat contiguous float32"):
        forced.allreduce_sum(torch.zeros(2, 2))
    forced.close()


def test_a_failed_rendezvous_is_one_error_on_every_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.distributed as dist
    from mpi4py import MPI

    def refuse(*args: object, **kwargs: object) -> None:
        raise RuntimeError("address already in use")

    monkeypatch.setattr(dist, "TCPStore", refuse)
    with pytest.raises(ConfigError, match="could not open its rendezvous store .*address already in use.*"
                                          "--allreduce-engine mpi"):
        make_engine("torch", MPI.COMM_SELF)


def test_horovod_is_refused_with_the_install_hint_when_missing() -> None:
    if "horovod" in available_engines():
        assert resolve_engine("horovod", on_gpu=False) == "horovod"
    else:
        with pytest.raises(ConfigError, match="install-horovod.sh"):
            resolve_engine("horovod", on_gpu=False)


def test_mpi_engine_sums_in_place_and_refuses_other_buffers() -> None:
    from mpi4py import MPI

    engine = make_engine("mpi", MPI.COMM_SELF)
    buf = np.arange(5, dtype=np.float32)
    engine.allreduce_sum(buf)
    engine.broadcast(buf)
    assert buf.tolist() == [0, 1, 2, 3, 4]
    for bad in (np.zeros(4), np.zeros((2, 2), np.float32), np.zeros(8, np.float32)[::2]):
        with pytest.raises(TypeError, match="flat contiguous float32"):
            engine.allreduce_sum(bad)


def test_scale_lr_multiplies_the_worker_learning_rate_by_the_ranks() -> None:
    cfg = TrainConfig(model="m", mode="allreduce", worker_optimizer="sgd:lr=0.05,momentum=0.9", scale_lr=True)
    name, params = parse_optimizer_spec(scaled_config(cfg, 4).worker_optimizer_spec)
    assert name == "sgd" and params["lr"] == pytest.approx(0.2) and params["momentum"] == 0.9
    assert parse_optimizer_spec(scaled_config(cfg.replace(scale_lr=False), 4).worker_optimizer_spec)[1]["lr"] == 0.05


def test_config_refuses_contradictory_all_reduce_options() -> None:
    with pytest.raises(ConfigError, match="--allreduce-engine"):
        TrainConfig(model="m", allreduce_engine="gloo").validate()
    with pytest.raises(ConfigError, match="drop --n-masters 3"):
        TrainConfig(model="m", mode="allreduce", n_masters=3).validate()
    with pytest.raises(ConfigError, match="synchronous by design"):
        TrainConfig(model="m", mode="allreduce", synchronous=True).validate()


def test_step_buffers_of_either_kind_take_the_same_operations() -> None:
    import torch

    from nnlo.allreduce import flat

    for buf in (np.zeros(6, np.float32), torch.zeros(6)):
        flat.put(buf, 2, [1.0, 2.0, 3.0])
        flat.fill(buf[:2], 5.0)
        flat.divide(buf[:4], 2.0)
        assert flat.get(buf, 0) == [2.5, 2.5, 0.5, 1.0, 3.0, 0.0] and flat.length(buf) == 6
        assert flat.on_device(buf) == isinstance(buf, torch.Tensor)
        flat.check_buffer(buf)
    for bad in (np.zeros(3), torch.zeros(2, 2), torch.zeros(4, dtype=torch.float64), [0.0]):
        with pytest.raises(TypeError, match="flat contiguous float32"):
            flat.check_buffer(bad)
    with pytest.raises(TypeError, match="flat contiguous float32 arrays"):
        flat.check_host(torch.zeros(3))  # host engines take numpy arrays only
