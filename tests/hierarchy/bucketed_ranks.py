"""Run under ``mpirun -np 2`` by test_bucketed.py: the bucketed all-reduce step against the unbucketed one.

Every rank trains copies of one small model (several parameters, one of them unused by the forward pass) for
a few steps through :func:`nnlo.training.voted_step.allreduce_step` with the real MPI engine: once with one
all-reduce after backward (``--bucket-mb 0``), then with buckets of several sizes. The ranks read batches of
different sizes (so the count weighting matters). Rank 0 prints one JSON line: for every bucket size, the
number of buckets and the largest weight difference to the unbucketed run.

Each argument is ``MB[:thread][@ENGINE]``: ENGINE ``mpi`` (the default; progress from the gradient hooks), ``thread``
(mpi, progress driven by its daemon thread), ``torch`` (torch.distributed gloo, numpy buffers) or ``torchdev``
(torch.distributed with tensor step buffers: the NCCL engine's device-buffer path, run by gloo on the CPU).
"""
from __future__ import annotations

import contextlib
import json
import sys

import numpy as np
import torch
from mpi4py import MPI

from nnlo.allreduce import flat, make_engine
from nnlo.allreduce.bucketed import BucketedReducer
from nnlo.allreduce.mpi import MpiEngine
from nnlo.allreduce.torchdist import TorchEngine
from nnlo.backends.torch_backend import TorchBackend
from nnlo.training.voted_step import EXTRA, allreduce_step

STEPS = 4


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(6, 16)
        self.b = torch.nn.Linear(16, 8)
        self.unused = torch.nn.Linear(3, 3)  # never in the graph: its gradient is zero, its bucket still goes
        self.c = torch.nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c(torch.tanh(self.b(torch.relu(self.a(x)))))


class Data:  # the loader's dataset interface: read(indices) -> (x, y)
    def __init__(self, rank: int) -> None:
        rng = np.random.default_rng(100 + rank)
        self.x = rng.normal(size=(64, 6)).astype(np.float32)
        self.y = rng.integers(0, 3, size=64)

    def read(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.x[idx], self.y[idx]


class Ctx:
    class watchdog:  # noqa: N801 - the RunContext attribute's name
        @staticmethod
        def waiting(what: str) -> contextlib.AbstractContextManager[None]:
            return contextlib.nullcontext()


def train(bucket_mb: float, comm: MPI.Comm, engine: object, thread: bool = False) -> tuple[np.ndarray, int]:
    torch.manual_seed(0)
    backend = TorchBackend(Net(), "categorical_crossentropy", "adam:lr=0.01")
    n = backend.n_params
    buf = engine.zeros(n + EXTRA)  # type: ignore[attr-defined]
    reducer = (BucketedReducer(engine, buf, backend.param_sizes(), bucket_mb, thread)  # type: ignore[arg-type]
               if bucket_mb > 0 else None)

    class Loader:
        dataset = Data(comm.Get_rank())

    rank = comm.Get_rank()
    for step in range(STEPS):
        size = 5 + 3 * rank + step  # uneven batches across ranks and steps
        idx = np.arange(step * 8, step * 8 + size)
        sums = allreduce_step(Ctx(), engine, backend, Loader(), buf, idx, stop_wanted=False, label="test",
                              reducer=reducer)
        assert not sums.failed and sums.total == sum(5 + 3 * r + step for r in range(comm.Get_size()))
        backend.apply_gradients(buf[:n])
    if reducer is not None:
        reducer.close()
    return backend.get_weights(), 0 if reducer is None else reducer.n_buckets


def main() -> int:
    comm = MPI.COMM_WORLD
    engine = make_engine("mpi", comm)
    reference, _ = train(0, comm, engine)
    makers = {"mpi": lambda: engine, "thread": lambda: MpiEngine(comm, progress="thread"),
              "torch": lambda: TorchEngine(comm), "torchdev": lambda: TorchEngine(comm, device_buffers=True)}
    engines: dict[str, object] = {}
    out = {}
    for arg in sys.argv[1:]:  # MB, MB:thread (buckets summed on a communication thread), ...@ENGINE
        spec, _, name = arg.partition("@")
        mb, thread = float(spec.split(":")[0]), spec.endswith(":thread")
        if name not in engines:
            engines[name] = makers[name or "mpi"]()
        eng = engines[name]
        w, buckets = train(mb, comm, eng, thread)
        others = comm.allgather(w)
        out[arg] = {"buckets": buckets, "max_diff": float(np.abs(w - reference).max()),
                    "replicas_equal": all(np.array_equal(o, others[0]) for o in others),
                    "device_buffers": flat.on_device(eng.zeros(1))}  # type: ignore[attr-defined]
    moved = float(np.abs(reference - train(0, comm, engine)[0]).max())
    if comm.Get_rank() == 0:
        print(json.dumps({"results": out, "n_params": int(reference.size), "rerun_diff": moved}))
    for e in {id(e): e for e in [engine, *engines.values()]}.values():
        e.close()  # type: ignore[attr-defined]
    return 0


if __name__ == "__main__":
    sys.exit(main())
