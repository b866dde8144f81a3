#!/usr/bin/env python
"""Benchmark 2: data-parallel step - nnlo's all-reduce engines against torch.distributed (gloo, NCCL, DDP),
Horovod and raw MPI.

Two parts, same ranks, methods alternating on every repeat:

1. **Communication only**, a flat float32 gradient of N parameters summed over all ranks by
   ``mpi4py Allreduce(IN_PLACE)`` (the floor on CPUs), ``torch.distributed.all_reduce`` on gloo (and on NCCL
   with ``--device cuda``), Horovod's ``allreduce_`` (when ``horovod.torch`` imports) and nnlo's engines: the one
   ``--allreduce-engine auto`` picks (``nnlo``) and the torch engine (``nnlo_torch``: gloo on CPUs, NCCL with
   the buffer on the GPU).
2. **Whole step** of an MLP with N parameters (batch 16, SGD), each nnlo variant through the runtime's own step
   (:func:`nnlo.training.voted_step.allreduce_step`: gradient hooks fill the step buffer, each bucket's
   all-reduce starts during backward, then the scalars, the average and the optimizer step): a purely local
   step (no communication), torch ``DistributedDataParallel`` (gloo on CPUs, NCCL on GPUs), nnlo with the
   ``auto`` engine at each ``--bucket-mb``, the mpi engine's other progress modes (``--progress``: MPI driven
   by a thread, or from the gradient hooks), the torch engine, Horovod, and the same step on one rank
   (``nnlo_local``). "Exposed communication" = step - local step, the time a step pays for being distributed.

The time of one collective is the slowest rank's (``MPI.MAX`` over ranks), as the next step waits for it.
``--device cuda`` runs the models and nnlo's NCCL path on the ranks' GPUs (one GPU per rank; with one GPU,
``--ranks 1`` measures the step's own overhead only).

    bench/run.sh allreduce                     # 1 M, 10 M and 50 M parameters, 2 ranks
    bench/run.sh allreduce --ranks 4 --params 25000000
    bench/run.sh allreduce --device cuda --out bench/results/allreduce-gpu.json
    bench/run.sh allreduce --quick             # smoke test
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from typing import Any, Callable

import numpy as np

import _common as C

NAME = "allreduce"


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--params", type=int, nargs="+", default=[1_000_000, 10_000_000, 50_000_000],
                   help="gradient sizes in float32 parameters (default 1M 10M 50M)")
    p.add_argument("--bucket-mb", type=float, nargs="+", default=None,
                   help="nnlo bucket sizes to compare in the whole step (default: nnlo's --bucket-mb default "
                        "only); 0 = one all-reduce after backward")
    p.add_argument("--progress", nargs="*", default=None,
                   help="the mpi engine's progress modes to measure beside its default (default: all of them)")
    p.add_argument("--ranks", type=int, default=2, help="MPI ranks (default 2)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="where the models compute (cuda: one GPU per rank, NCCL for DDP and nnlo's torch engine)")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--thread", action="store_true",
                   help="also measure nnlo's buckets summed on a communication thread (blocking calls)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--no-step", action="store_true", help="skip the whole-step part")
    p.add_argument("--quick", action="store_true", help="tiny sizes and few repeats (smoke test)")
    p.add_argument("--out", help="result JSON path (default bench/results/allreduce.json)")
    a = p.parse_args(argv)
    if a.quick:
        a.params, a.repeats, a.warmup = [20_000], 3, 1
    if a.bucket_mb is None:
        from nnlo.config import BUCKET_MB

        a.bucket_mb = [BUCKET_MB]
    from nnlo.allreduce.mpi import PROGRESS

    a.progress = list(PROGRESS) if a.progress is None else a.progress
    bad = [m for m in a.progress if m not in PROGRESS]
    if bad:
        p.error(f"--progress {' '.join(bad)}: choose from {' '.join(PROGRESS)}")
    if a.ranks < 2 and a.device == "cpu":
        p.error("--ranks must be at least 2 on CPUs (an all-reduce over one rank measures nothing)")
    if a.ranks < 1:
        p.error("--ranks must be at least 1")
    return a


# -- the engines -----------------------------------------------------------------------------------------
def engines(comm: Any, device: str) -> dict[str, Any]:
    """nnlo's engines by method name: ``nnlo`` (what ``--allreduce-engine auto`` picks here) and ``nnlo_<name>``
    for every other engine installed (``nnlo_torch`` on CPUs, ``nnlo_mpi`` on GPUs, ``nnlo_horovod``)."""
    from nnlo.allreduce import available_engines, make_engine, resolve_engine

    auto = resolve_engine("auto", on_gpu=device.startswith("cuda"))
    out: dict[str, Any] = {"nnlo": make_engine(auto, comm, device)}
    for name in available_engines():
        if name != auto:
            out[f"nnlo_{name}"] = make_engine(name, comm, device)
    return out


def horovod_note() -> str:
    try:
        import horovod  # type: ignore[import-not-found]
        import horovod.torch  # noqa: F401  # type: ignore[import-not-found]
    except Exception as e:  # noqa: BLE001 - not built here: say so
        return f"not available: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}".strip()
    return f"horovod {getattr(horovod, '__version__', '?')} (horovod.torch allreduce_, op=Sum)"


def process_groups(comm: Any, device: str) -> tuple[Any, Any]:
    """torch.distributed's default group for DDP (NCCL on GPUs, gloo on CPUs) and a gloo group beside it."""
    import socket

    import torch.distributed as dist

    port = 0
    if comm.Get_rank() == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    port = comm.bcast(port, root=0)
    backend = "nccl" if device == "cuda" else "gloo"
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=comm.Get_rank(),
                            world_size=comm.Get_size())
    gloo = dist.new_group(backend="gloo") if backend != "gloo" else dist.group.WORLD
    return dist.group.WORLD, gloo


def mlp(n_params: int, layers: int = 4) -> Any:
    """A square MLP of about ``n_params`` parameters (so the step part moves the same bytes)."""
    from torch import nn

    h = max(4, int(round((n_params / layers) ** 0.5)))
    mods: list[Any] = []
    for _ in range(layers):
        mods += [nn.Linear(h, h), nn.ReLU()]
    return nn.Sequential(*mods[:-1]), h


def main_child(a: argparse.Namespace, argv: list[str]) -> int:
    import torch
    import torch.distributed as dist
    from mpi4py import MPI

    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    device = "cpu"
    if a.device == "cuda":
        from nnlo.device import select_device

        device = select_device(comm, True)
        if not device.startswith("cuda"):
            if rank == 0:
                print("allreduce --device cuda: this node has no usable GPU", file=sys.stderr)
            return 2
        torch.cuda.set_device(torch.device(device))
    load0 = os.getloadavg()
    world, gloo = process_groups(comm, a.device)
    nnlo = engines(comm, device)

    def sync() -> None:
        if device != "cpu":
            torch.cuda.synchronize()

    def measure(fn: Callable[[], None], k: int) -> float:
        comm.Barrier()
        t0 = time.perf_counter()
        for _ in range(k):
            fn()
        sync()
        dt = (time.perf_counter() - t0) / k
        return comm.allreduce(dt, op=MPI.MAX)

    # latency of the transports, by the same script
    small = np.ones(2, np.float32)
    small_t = torch.ones(2)
    lat_methods = {"mpi4py": lambda: comm.Allreduce(MPI.IN_PLACE, [small, MPI.FLOAT], op=MPI.SUM),
                   "gloo": lambda: dist.all_reduce(small_t, group=gloo)}
    if a.device == "cuda":
        small_d = torch.ones(2, device=device)
        lat_methods["nccl"] = lambda: dist.all_reduce(small_d, group=world)
    samples: dict[str, list[float]] = {m: [] for m in lat_methods}
    for i in range(a.warmup + a.repeats):
        for m, fn in lat_methods.items():
            t = measure(fn, 200)
            if i >= a.warmup:
                samples[m].append(t)
    lat = {f"{m}_8B_allreduce_s": C.summary(v) for m, v in samples.items()}

    comm_rows = [communication_row(a, n, comm, measure, nnlo, world, gloo, device) for n in a.params]
    step_rows = [] if a.no_step else [step_part(a, n, comm, measure, nnlo, device) for n in a.params]

    if rank == 0:
        result = {
            "what": "gradient all-reduce and whole data-parallel step: nnlo's engines vs torch.distributed "
                    "(gloo/NCCL, DDP), Horovod, raw mpi4py",
            "ranks": size,
            "device": a.device,
            "target": "nnlo's whole data-parallel step <= 0.9 x torch DDP's at 1 M, 10 M and 50 M parameters (CPU); "
                      "<= 0.95 x DDP (NCCL) at 10 M and 50 M on GPUs",
            "nnlo_allreduce": f"nnlo.allreduce engine {nnlo['nnlo'].describe()} (--allreduce-engine auto)",
            "engines": {m: e.describe() for m, e in nnlo.items()},
            "mpi_progress": getattr(nnlo.get("nnlo_mpi", nnlo["nnlo"]), "progress_mode", None),
            "horovod": horovod_note(),
            "latency": lat,
            "communication": comm_rows,
            "step": step_rows,
        }
        if size == 1:
            result["note"] = "one rank: no communication, the step's own overhead only"
        print(report(result))
        C.write_result(NAME, result, a.out, argv=argv, started_load=load0)
    for e in nnlo.values():
        e.close()
    dist.destroy_process_group()
    return 0


def communication_row(a: argparse.Namespace, n: int, comm: Any, measure: Callable, nnlo: dict[str, Any],
                      world: Any, gloo: Any, device: str) -> dict[str, Any]:
    import torch
    import torch.distributed as dist
    from mpi4py import MPI

    buf = np.ones(n, np.float32)
    t = torch.ones(n)
    methods: dict[str, Callable[[], None]] = {
        "mpi4py": lambda: comm.Allreduce(MPI.IN_PLACE, [buf, MPI.FLOAT], op=MPI.SUM),
        "gloo": lambda: dist.all_reduce(t, group=gloo),
    }
    resets: list[Callable[[], None]] = [lambda: buf.fill(1.0), lambda: t.fill_(1.0)]  # keep values finite
    if device != "cpu":
        td = torch.ones(n, device=device)
        methods["nccl"] = lambda: dist.all_reduce(td, group=world)
        resets.append(lambda: td.fill_(1.0))
    if "nnlo_horovod" in nnlo:
        import horovod.torch as hvd  # type: ignore[import-not-found]

        methods["horovod"] = lambda: hvd.allreduce_(t, op=hvd.Sum)
    for name, engine in nnlo.items():
        if name == "nnlo_horovod":
            continue
        eb = engine.zeros(n)  # where the engine sums: host memory, or the GPU (NCCL)
        eb[:] = 1.0
        methods[name] = (lambda e=engine, b=eb: e.allreduce_sum(b))
        resets.append(lambda b=eb: b.fill(1.0) if isinstance(b, np.ndarray) else b.fill_(1.0))
    k = int(max(1, min(50, 2e7 // (4 * n))))
    res: dict[str, list[float]] = {m: [] for m in methods}
    names = list(methods)
    for i in range(a.warmup + a.repeats):
        for m in names[i % len(names):] + names[:i % len(names)]:  # rotate the order every repeat
            dt = measure(methods[m], k)
            if i >= a.warmup:
                res[m].append(dt)
        for r in resets:
            r()
    row: dict[str, Any] = {"params": n, "bytes": 4 * n, "per_measurement": k,
                           "seconds": {m: C.summary(v) for m, v in res.items()}}
    best_alt = min((m for m in res if not m.startswith("nnlo")), key=lambda m: row["seconds"][m]["median"])
    row["best_alternative"] = best_alt
    row["nnlo_over_best_alternative"] = row["seconds"]["nnlo"]["median"] / row["seconds"][best_alt]["median"]
    row["gloo_over_mpi4py"] = row["seconds"]["gloo"]["median"] / row["seconds"]["mpi4py"]["median"]
    return row


class _Ctx:  # what allreduce_step needs of the training's context
    class watchdog:  # noqa: N801 - the RunContext attribute's name
        @staticmethod
        def waiting(what: str) -> contextlib.AbstractContextManager[None]:
            return contextlib.nullcontext()


def step_part(a: argparse.Namespace, n: int, comm: Any, measure: Callable, nnlo: dict[str, Any],
              device: str) -> dict[str, Any]:
    """Whole steps: local only, DDP, and nnlo's runtime step over each engine, bucket size and progress mode."""
    import copy

    import torch
    from mpi4py import MPI
    from torch.nn.parallel import DistributedDataParallel as DDP

    from nnlo.allreduce import make_engine
    from nnlo.allreduce.bucketed import BucketedReducer, make_reducer
    from nnlo.allreduce.mpi import MpiEngine
    from nnlo.backends.torch_backend import TorchBackend
    from nnlo.training.voted_step import EXTRA, allreduce_step

    torch.manual_seed(0)
    model, h = mlp(n)
    n_real = sum(p.numel() for p in model.parameters())
    x = np.random.default_rng(comm.Get_rank()).normal(size=(16, h)).astype(np.float32)
    y = np.zeros((16, h), np.float32)
    xt, yt = torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)

    class Loader:  # the step reads its batch through the loader's dataset
        class dataset:  # noqa: N801
            @staticmethod
            def read(idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
                return x, y

    idx = np.arange(16)
    local = TorchBackend(copy.deepcopy(model), "mse", "sgd", device)  # the step without communication

    ddp_model = DDP(copy.deepcopy(model).to(device), device_ids=[torch.device(device).index]
                    if device != "cpu" else None)
    ddp_opt = torch.optim.SGD(ddp_model.parameters(), lr=0.01)

    def ddp_step() -> None:
        ddp_opt.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(ddp_model(xt), yt).backward()
        ddp_opt.step()

    closing: list[Any] = []

    def nnlo_step_fn(eng: Any, bucket_mb: float, thread: bool = False) -> Callable[[], None]:
        backend = TorchBackend(copy.deepcopy(model), "mse", "sgd", device)
        buf = eng.zeros(backend.n_params + EXTRA)
        reducer = (BucketedReducer(eng, buf, backend.param_sizes(), bucket_mb, thread) if thread
                   else make_reducer(eng, backend, buf, bucket_mb))
        if reducer is not None:
            closing.append(reducer)

        def step() -> None:
            allreduce_step(_Ctx(), eng, backend, Loader(), buf, idx, stop_wanted=False, label="bench",
                           reducer=reducer)
            backend.apply_gradients(buf[:backend.n_params])
        return step

    default_mb = a.bucket_mb[0]
    ddp_name = f"ddp_{'nccl' if device != 'cpu' else 'gloo'}"
    methods: dict[str, Callable[[], None]] = {"local": lambda: local.train_on_batch(x, y), ddp_name: ddp_step}
    for mb in a.bucket_mb:
        methods[f"nnlo_{mb:g}mb"] = nnlo_step_fn(nnlo["nnlo"], mb)
    default = nnlo["nnlo"]
    if isinstance(default, MpiEngine):  # the other ways to drive MPI's progress during backward
        for mode in a.progress:
            if mode != default.progress_mode:
                eng = MpiEngine(comm, progress=mode)
                closing.append(eng)
                methods[f"nnlo_{default_mb:g}mb_progress_{mode}"] = nnlo_step_fn(eng, default_mb)
    if a.thread:
        methods[f"nnlo_{default_mb:g}mb_commthread"] = nnlo_step_fn(default, default_mb, thread=True)
    for name, eng in nnlo.items():
        if name != "nnlo":
            methods[f"{name}_{default_mb:g}mb"] = nnlo_step_fn(eng, default_mb)
    one = make_engine(default.name, MPI.COMM_SELF, device)  # the same engine over one rank: no communication
    closing.append(one)
    methods["nnlo_local"] = nnlo_step_fn(one, default_mb)
    res: dict[str, list[float]] = {m: [] for m in methods}
    names = list(methods)
    k = int(max(1, min(20, 4e6 // n)))
    for i in range(a.warmup + a.repeats):
        for m in names[i % len(names):] + names[:i % len(names)]:
            dt = measure(methods[m], k)
            if i >= a.warmup:
                res[m].append(dt)
    for c in closing:
        c.close()
    sec = {m: C.summary(v) for m, v in res.items()}
    base = sec["local"]["median"]
    label = f"nnlo_{default_mb:g}mb"
    return {"params": n_real, "hidden": h, "batch": 16, "per_measurement": k, "nnlo_method": label,
            "ddp_method": ddp_name, "bucket_mb": a.bucket_mb, "seconds": sec,
            # DDP's benchmark's "exposed communication": the step minus the same step without communication
            "exposed_comm_s": {m: sec[m]["median"] - base for m in sec if m not in ("local",)},
            "nnlo_local_overhead_s": sec["nnlo_local"]["median"] - base,
            "nnlo_over_ddp": sec[label]["median"] / sec[ddp_name]["median"],
            "nnlo_over_ddp_by_method": {m: sec[m]["median"] / sec[ddp_name]["median"]
                                        for m in sec if m.startswith("nnlo_") and m != "nnlo_local"}}


def signed(x: float) -> str:
    return "-" + C.fmt_time(-x) if x < 0 else C.fmt_time(x)


def step_table(rows: list[dict]) -> str:
    """Whole step: each method's median, its exposed communication (step - local step) and its ratio to DDP."""
    methods = [m for m in rows[0]["seconds"] if m != "local"]
    tab = []
    for row in rows:
        s = row["seconds"]
        ddp = s[row["ddp_method"]]["median"]
        tab.append([f"{row['params']:,}", C.fmt_time(s["local"]["median"])]
                   + [f"{C.fmt_time(s[m]['median'])} ({signed(row['exposed_comm_s'][m])})" if m in s else "n/a"
                      for m in methods]
                   + [f"**{s[row['nnlo_method']]['median'] / ddp:.2f}**"])
    return C.table(tab, ["params", "local step", *[f"{m} (exposed)" for m in methods], "nnlo/DDP"])


def report(r: dict) -> str:
    out = [f"all-reduce, {r['ranks']} ranks on {r.get('device', 'cpu')}; nnlo: {r['nnlo_allreduce']}; "
           f"horovod: {r['horovod']}", "communication only (median time of one all-reduce, slowest rank):"]
    methods = list(r["communication"][0]["seconds"]) if r["communication"] else []
    tab = []
    for row in r["communication"]:
        s = row["seconds"]
        tab.append([f"{row['params']:,}", f"{row['bytes'] / 1e6:.1f} MB"]
                   + [C.fmt_time(s[m]["median"]) if m in s else "n/a" for m in methods]
                   + [f"{row['gloo_over_mpi4py']:.2f}", f"{row['nnlo_over_best_alternative']:.2f}"])
    out.append(C.table(tab, ["params", "size", *methods, "gloo/mpi", "nnlo/best"]))
    if r["step"]:
        out.append(step_table(r["step"]))
    lat = r["latency"]
    out.append("8-byte all-reduce latency: " + ", ".join(f"{k.split('_')[0]} {C.fmt_time(v['median'])}"
                                                        for k, v in lat.items()))
    return "\n".join(out)


def main(argv: list[str]) -> int:
    a = parse(argv)
    if C.in_child():
        return main_child(a, argv)
    return C.relaunch(__file__, a.ranks, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
