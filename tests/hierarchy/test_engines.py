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
    with pytest.raises(ConfigError, match="--allreduce-engine 'nccl' is unknown"):
        resolve_engine("nccl", on_gpu=False)


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
