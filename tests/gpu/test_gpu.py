"""The GPU path on a real GPU (marked ``gpu``; skipped cleanly where torch sees none, so every CPU machine and CI
passes them by; ``scripts/gpu-check.sh`` runs them on a GPU node).

What only a GPU can show: the NCCL engine's step buffer and its buckets stay in device memory, and the
optimizer reads the summed gradient there; a GPU worker's exchange buffers are page-locked and round-trip
exactly; ``--amp``'s float16 autocast and gradient scaler; the device each rank takes; the monitor's reading of
its GPU; ranks that share one GPU sum through gloo (NCCL refuses them); and, with two GPUs or more, a real
2-rank NCCL training that reaches the mpi engine's validation loss.
"""
from __future__ import annotations

import contextlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(GPUS == 0, reason="no CUDA GPU visible to torch")]



class _Ctx:
    class watchdog:  # noqa: N801 - the RunContext attribute's name
        @staticmethod
        def waiting(what: str) -> contextlib.AbstractContextManager[None]:
            return contextlib.nullcontext()


def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                               torch.nn.ReLU(), torch.nn.Linear(256, 4))


def _data(rows: int = 64) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    return rng.normal(size=(rows, 32)).astype(np.float32), rng.integers(0, 4, size=rows)


def test_each_rank_takes_its_gpu_by_the_one_rule() -> None:
    from mpi4py import MPI

    from nnlo.device import physical_gpu, select_device

    device = select_device(MPI.COMM_SELF, True)
    assert device == "cuda:0"  # the node's only worker here
    assert select_device(MPI.COMM_SELF, False) == "cpu"  # masters stay on the CPU
    assert physical_gpu(device) and physical_gpu("cpu") is None


def test_the_nccl_engine_keeps_the_step_on_the_device() -> None:
    """One rank over NCCL: the step buffer, the buckets and the gradients the optimizer reads are device memory,
    and the step equals the plain local step (the sum over one rank is the rank's own)."""
    from mpi4py import MPI

    from nnlo.allreduce import flat
    from nnlo.allreduce.bucketed import BucketedReducer
    from nnlo.allreduce.torchdist import TorchEngine
    from nnlo.backends.torch_backend import TorchBackend
    from nnlo.training.voted_step import EXTRA, allreduce_step

    engine = TorchEngine(MPI.COMM_SELF, "cuda:0")
    assert engine.backend == "nccl" and engine.device == "cuda:0" and "nccl" in engine.describe()
    probe = torch.ones(8, device="cuda:0")
    engine._pg.allreduce([probe]).wait()  # the NCCL communicator itself works
    assert probe.sum().item() == 8
    backend = TorchBackend(_net(), "categorical_crossentropy", "sgd:lr=0.1", "cuda:0")
    reference = TorchBackend(_net(), "categorical_crossentropy", "sgd:lr=0.1", "cuda:0")
    buf = engine.zeros(backend.n_params + EXTRA)
    assert flat.on_device(buf) and buf.is_cuda and backend.can_hook_into(buf[:backend.n_params])
    reducer = BucketedReducer(engine, buf, backend.param_sizes(), 0.05)  # several buckets
    assert reducer.n_buckets > 1
    x, y = _data()

    class Loader:
        class dataset:  # noqa: N801
            @staticmethod
            def read(idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
                return x[idx], y[idx]

    for step in range(3):
        idx = np.arange(step * 16, step * 16 + 16)
        sums = allreduce_step(_Ctx(), engine, backend, Loader(), buf, idx, stop_wanted=False, label="gpu",
                              reducer=reducer)
        assert sums.total == 16 and not sums.failed
        backend.apply_gradients(buf[:backend.n_params])
        start, stop = buf.data_ptr(), buf.data_ptr() + 4 * backend.n_params
        assert all(p.grad.is_cuda and start <= p.grad.data_ptr() < stop for p in backend.params)  # views, in place
        reference.train_on_batch(*Loader.dataset.read(idx))
    assert np.allclose(backend.get_weights(), reference.get_weights(), atol=1e-5)
    reducer.close()
    engine.close()


def test_a_gpu_workers_exchange_buffers_are_pinned_framed_and_exact() -> None:
    from mpi4py import MPI

    from nnlo.backends.torch_backend import TorchBackend
    from nnlo.transport import Link

    backend = TorchBackend(_net(), "categorical_crossentropy", "sgd", "cuda:0")
    link = Link(MPI.COMM_SELF)
    send = link.frame(backend.n_params, backend.host_buffer)
    assert torch.from_numpy(send).is_pinned() and link.frame_of(send) is not None
    backend.weights_into(send)
    assert np.array_equal(send, backend.get_weights())
    other = TorchBackend(_net(), "categorical_crossentropy", "sgd", "cuda:0")
    changed = send * 2
    other.set_weights(changed)
    assert np.array_equal(other.get_weights(), changed)


def test_amp_on_the_gpu_float16_with_a_checkpointed_scaler() -> None:
    from nnlo.backends.torch_amp import STATE_KEY, amp_policy
    from nnlo.backends.torch_backend import TorchBackend

    device = torch.device("cuda", 0)
    policy = amp_policy(device)
    assert policy.dtype == torch.float16 and policy.scaler
    a = TorchBackend(_net(), "categorical_crossentropy", "adam:lr=0.001", "cuda:0", amp=policy)
    seen: list[torch.dtype] = []
    a.model[0].register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    x, y = _data()
    for _ in range(3):
        assert np.isfinite(a.train_on_batch(x, y)["loss"])
    assert seen[0] == torch.float16 and all(p.dtype == torch.float32 for p in a.params)
    state = a.optimizer_state()
    assert state[STATE_KEY]["scale"] == a.amp.scaler.get_scale()
    b = TorchBackend(_net(), "categorical_crossentropy", "adam:lr=0.001", "cuda:0", amp=policy)
    b.set_weights(a.get_weights())
    b.load_optimizer_state(state)
    a.train_on_batch(x, y)
    b.train_on_batch(x, y)
    assert np.array_equal(a.get_weights(), b.get_weights())


def test_the_monitor_reads_this_ranks_gpu() -> None:
    pytest.importorskip("pynvml", reason="nvidia-ml-py (the gpu extra) is not installed")
    from nnlo.observe.monitor import Monitor

    monitor = Monitor(interval=0.05, gpu=False)
    try:
        monitor.set_device("cuda:0")
        assert monitor.gpu is not None
        x = torch.randn(2048, 2048, device="cuda:0")
        for _ in range(20):
            x = x @ x / 2048
        torch.cuda.synchronize()
        epoch = monitor.epoch_end()
        totals = monitor.totals()
    finally:
        monitor.stop()
    assert 0 <= epoch["gpu_util_mean"] <= 100 and epoch["gpu_mem_mb_max"] > 0
    assert totals["gpu_name"] and totals["gpu_index"] >= 0


def test_cuda_aware_mpi_is_asked_not_assumed() -> None:
    from mpi4py import MPI

    from nnlo.allreduce.mpi import MpiEngine
    from nnlo.device import cuda_aware_mpi

    engine = MpiEngine(MPI.COMM_SELF, device="cuda:0")
    buf = engine.zeros(4)
    if cuda_aware_mpi():
        assert buf.is_cuda and "CUDA-aware" in engine.describe()
    else:
        assert isinstance(buf, np.ndarray) and engine.device == "cpu"
    engine.allreduce_sum(buf)
    engine.close()


@pytest.mark.mpi
def test_two_ranks_sharing_one_gpu_sum_through_gloo(run_train, tmp_path) -> None:
    """NCCL refuses two ranks on one GPU: the torch engine agrees on gloo and trains."""
    # a real launch: a process reads CUDA_VISIBLE_DEVICES once, when CUDA starts (the warm world's ranks may have)
    run = run_train(2, "--mode", "allreduce", "--allreduce-engine", "torch", "--epochs", "1", "--batch", "8",
                    env={"CUDA_VISIBLE_DEVICES": "0"}, launcher="mpirun")
    assert run.rc == 0, run.err[-3000:]
    assert "torch.distributed gloo over 2 rank(s)" in run.err and "share GPUs" in run.err, run.err[-2000:]


@pytest.mark.mpi
@pytest.mark.skipif(GPUS < 2, reason="NCCL between ranks needs two GPUs")
def test_two_gpu_ranks_train_over_nccl_like_the_mpi_engine(run_train) -> None:
    opts = ("--mode", "allreduce", "--epochs", "3", "--batch", "8", "--seed", "5", "--worker-optimizer", "sgd:lr=0.1")
    # real launches: CUDA and NCCL start once per process; the GPU tests run only on GPU nodes (no suite budget)
    nccl = run_train(2, *opts, "--allreduce-engine", "torch", "--amp", launcher="mpirun")
    assert nccl.rc == 0, nccl.err[-3000:]
    assert "torch.distributed nccl over 2 rank(s), step buffers on cuda:" in nccl.err, nccl.err[-2000:]
    plain = run_train(2, *opts, "--allreduce-engine", "mpi", "--amp", launcher="mpirun")
    assert plain.rc == 0, plain.err[-3000:]
    a = [e["val_loss"] for e in nccl.history["history"]]
    b = [e["val_loss"] for e in plain.history["history"]]
    assert a == pytest.approx(b, abs=1e-2)  # float16 autocast on both: close, not bit-equal
