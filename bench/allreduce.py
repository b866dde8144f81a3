#!/usr/bin/env python
"""Benchmark 2: data-parallel step - nnlo's all-reduce path against torch.distributed (gloo), Horovod and raw MPI.

Two parts, same ranks, same process group, methods alternating on every repeat:

1. **Communication only**, a flat float32 gradient of N parameters summed over all ranks by
   ``mpi4py Allreduce(IN_PLACE)`` (the floor), ``torch.distributed.all_reduce`` on the gloo backend, Horovod's
   ``allreduce_`` (when ``horovod.torch`` imports) and nnlo's own all-reduce (when this checkout has
   ``--mode allreduce``; otherwise reported as "not available").
2. **Whole step** of an MLP with N parameters (batch 16, SGD): a purely local step (no communication), a
   torch ``DistributedDataParallel`` step over gloo (bucketed all-reduce overlapped with backward), and nnlo's
   step (flat gradient from the torch backend, all-reduce, apply). "Exposed communication" = step - local
   step, i.e. the time a step pays for being distributed.

The time of one collective is the slowest rank's (``MPI.MAX`` over ranks), as the next step waits for it.

    bench/run.sh allreduce                     # 1 M and 10 M parameters, 2 ranks
    bench/run.sh allreduce --ranks 4 --params 25000000
    bench/run.sh allreduce --quick             # smoke test
"""
from __future__ import annotations

import argparse
import os
import socket
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
                        "only); 0 = one all-reduce after backward (the previous step)")
    p.add_argument("--ranks", type=int, default=2, help="MPI ranks (default 2)")
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
    if a.ranks < 2:
        p.error("--ranks must be at least 2 (an all-reduce over one rank measures nothing)")
    return a


# -- nnlo's all-reduce, if this checkout has one ---------------------------------------------------------
def nnlo_allreduce(comm: Any) -> tuple[Any, str]:
    """nnlo's own all-reduce engine (``--mode allreduce``: :mod:`nnlo.allreduce`, the default "auto" choice on
    CPU), or why this checkout has none. Returns ``(engine, description)``."""
    try:
        from nnlo.allreduce import make_engine, resolve_engine
    except ImportError:
        return None, "not available: this checkout has no nnlo.allreduce (--mode allreduce)"
    name = resolve_engine("auto", on_gpu=False)
    engine = make_engine(name, comm)
    return engine, f"nnlo.allreduce engine {engine.describe()} (--mode allreduce, --allreduce-engine auto)"


def horovod(comm: Any) -> tuple[Any, Any, str]:
    """(horovod.torch, nnlo's Horovod engine on ``comm``, description), or Nones and why not."""
    try:
        import horovod.torch as hvd  # type: ignore[import-not-found]
    except Exception as e:  # noqa: BLE001 - not built here: say so
        return None, None, f"not available: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}".strip()
    import horovod

    from nnlo.allreduce import make_engine

    engine = make_engine("horovod", comm)  # hvd.init on a duplicate of comm
    return hvd, engine, f"horovod {getattr(horovod, '__version__', '?')} (horovod.torch allreduce_, op=Sum)"


def gloo_init(comm: Any) -> None:
    import torch.distributed as dist

    port = 0
    if comm.Get_rank() == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    port = comm.bcast(port, root=0)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=comm.Get_rank(),
                            world_size=comm.Get_size())


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
    load0 = os.getloadavg()
    gloo_init(comm)
    hvd, hvd_engine, hvd_note = horovod(comm)
    nnlo_engine, nnlo_note = nnlo_allreduce(comm)

    def measure(fn: Callable[[], None], k: int) -> float:
        comm.Barrier()
        t0 = time.perf_counter()
        for _ in range(k):
            fn()
        dt = (time.perf_counter() - t0) / k
        return comm.allreduce(dt, op=MPI.MAX)

    # latency of the transports, by the same script
    lat: dict[str, Any] = {}
    small = np.ones(2, np.float32)
    small_t = torch.ones(2)
    lat_methods = {"mpi4py": lambda: comm.Allreduce(MPI.IN_PLACE, [small, MPI.FLOAT], op=MPI.SUM),
                   "gloo": lambda: dist.all_reduce(small_t)}
    samples: dict[str, list[float]] = {m: [] for m in lat_methods}
    for i in range(a.warmup + a.repeats):
        for m, fn in lat_methods.items():
            t = measure(fn, 200)
            if i >= a.warmup:
                samples[m].append(t)
    lat = {f"{m}_8B_allreduce_s": C.summary(v) for m, v in samples.items()}

    comm_rows = []
    for n in a.params:
        buf = np.ones(n, np.float32)
        t = torch.ones(n)
        methods: dict[str, Callable[[], None]] = {
            "mpi4py": lambda: comm.Allreduce(MPI.IN_PLACE, [buf, MPI.FLOAT], op=MPI.SUM),
            "gloo": lambda: dist.all_reduce(t),
        }
        if hvd is not None:
            methods["horovod"] = lambda: hvd.allreduce_(t, op=hvd.Sum)
        if nnlo_engine is not None:
            methods["nnlo"] = lambda: nnlo_engine.allreduce_sum(buf)
        k = int(max(1, min(50, 2e7 // (4 * n))))
        res: dict[str, list[float]] = {m: [] for m in methods}
        names = list(methods)
        for i in range(a.warmup + a.repeats):
            for m in names[i % len(names):] + names[:i % len(names)]:  # rotate the order every repeat
                dt = measure(methods[m], k)
                if i >= a.warmup:
                    res[m].append(dt)
            buf.fill(1.0)
            t.fill_(1.0)  # keep the values finite
        row: dict[str, Any] = {"params": n, "bytes": 4 * n, "per_measurement": k,
                               "seconds": {m: C.summary(v) for m, v in res.items()}}
        best_alt = min((m for m in res if m != "nnlo"), key=lambda m: row["seconds"][m]["median"])
        row["best_alternative"] = best_alt
        if "nnlo" in res:
            row["nnlo_over_best_alternative"] = row["seconds"]["nnlo"]["median"] / row["seconds"][best_alt]["median"]
        row["gloo_over_mpi4py"] = row["seconds"]["gloo"]["median"] / row["seconds"]["mpi4py"]["median"]
        comm_rows.append(row)
        del buf, t

    step_rows = [] if a.no_step else [step_part(a, n, comm, measure, nnlo_engine, hvd_engine)
                                      for n in a.params]

    if rank == 0:
        result = {
            "what": "gradient all-reduce and whole data-parallel step: nnlo vs torch gloo / DDP, Horovod, raw mpi4py",
            "ranks": size,
            "target": "nnlo's whole data-parallel step <= 0.9 x torch DDP (gloo)'s at 1 M, 10 M and 50 M parameters",
            "nnlo_allreduce": nnlo_note,
            "horovod": hvd_note,
            "latency": lat,
            "communication": comm_rows,
            "step": step_rows,
        }
        print(report(result))
        C.write_result(NAME, result, a.out, argv=argv, started_load=load0)
    if nnlo_engine is not None:
        nnlo_engine.close()
    if hvd_engine is not None:
        hvd_engine.close()
    dist.destroy_process_group()
    return 0


def step_part(a: argparse.Namespace, n: int, comm: Any, measure: Callable, engine: Any,
              hvd_engine: Any) -> dict[str, Any]:
    """Whole steps: local only, DDP(gloo), and nnlo's all-reduce step at each ``--bucket-mb``.

    nnlo's step is the arithmetic of ``--mode allreduce`` (:func:`nnlo.training.voted_step.allreduce_step`):
    with buckets, the backend writes the count-weighted gradient into the step buffer from its gradient hooks
    and each bucket's non-blocking all-reduce starts during backward (:mod:`nnlo.allreduce.bucketed`); with
    ``--bucket-mb 0``, the flat gradient is scaled into the buffer after backward and summed by one
    all-reduce. Then the scalars, the division by the total count and ``apply_gradients``. The same step over
    nnlo's Horovod engine is the alternative engine (``--allreduce-engine horovod``)."""
    import copy

    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    from nnlo.allreduce.bucketed import BucketedReducer
    from nnlo.backends.torch_backend import TorchBackend

    torch.manual_seed(0)
    model, h = mlp(n)
    n_real = sum(p.numel() for p in model.parameters())
    x = np.random.default_rng(comm.Get_rank()).normal(size=(16, h)).astype(np.float32)
    y = np.zeros((16, h), np.float32)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)

    local = TorchBackend(model, "mse", "sgd")  # the local step without communication (the baseline)

    ddp_model = DDP(copy.deepcopy(model))
    ddp_opt = torch.optim.SGD(ddp_model.parameters(), lr=0.01)

    def ddp_step() -> None:
        ddp_opt.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(ddp_model(xt), yt).backward()
        ddp_opt.step()

    def nnlo_step_fn(eng: Any, bucket_mb: float, thread: bool = False) -> Callable[[], None]:
        backend = TorchBackend(copy.deepcopy(model), "mse", "sgd")
        nf = backend.n_params
        buf = np.zeros(nf + 4, np.float32)
        reducer = BucketedReducer(eng, buf, backend.param_sizes(), bucket_mb, thread) if bucket_mb > 0 else None

        def step() -> None:
            if reducer is not None:
                reducer.begin()
                metrics = backend.gradient_sum_into(x, y, buf[:nf], reducer.ready)
            else:
                g, metrics = backend.compute_gradients(x, y)
                np.multiply(g, np.float32(metrics["count"]), out=buf[:nf])
            count = float(metrics["count"])
            buf[nf], buf[nf + 1] = count, float(metrics["loss"]) * count
            if reducer is not None:
                reducer.finish()
            else:
                eng.allreduce_sum(buf)
            buf[:nf] /= np.float32(buf[nf])
            backend.apply_gradients(buf[:nf])
        return step

    class _Local:  # an "engine" over one rank: the same step without any communication
        def iallreduce_sum(self, b: np.ndarray, key: int = 0) -> None:
            return None

        def allreduce_sum(self, b: np.ndarray) -> None:
            return None

        def progress(self, pending: list[Any]) -> None:
            return None

        def wait_all(self, pending: list[Any]) -> None:
            return None

    default_mb = a.bucket_mb[0]
    methods: dict[str, Callable[[], None]] = {"local": lambda: local.train_on_batch(x, y), "ddp_gloo": ddp_step}
    for mb in a.bucket_mb:
        methods[f"nnlo_{mb:g}mb"] = nnlo_step_fn(engine, mb)
    if a.thread:
        methods[f"nnlo_{default_mb:g}mb_thread"] = nnlo_step_fn(engine, default_mb, thread=True)
    methods["nnlo_local"] = nnlo_step_fn(_Local(), default_mb)  # nnlo's step, no communication
    if hvd_engine is not None:
        methods[f"nnlo_horovod_{default_mb:g}mb"] = nnlo_step_fn(hvd_engine, default_mb)
    res: dict[str, list[float]] = {m: [] for m in methods}
    names = list(methods)
    k = int(max(1, min(20, 4e6 // n)))
    for i in range(a.warmup + a.repeats):
        for m in names[i % len(names):] + names[:i % len(names)]:
            dt = measure(methods[m], k)
            if i >= a.warmup:
                res[m].append(dt)
    sec = {m: C.summary(v) for m, v in res.items()}
    base = sec["local"]["median"]
    label = f"nnlo_{default_mb:g}mb"
    return {"params": n_real, "hidden": h, "batch": 16, "per_measurement": k, "nnlo_method": label,
            "bucket_mb": a.bucket_mb, "seconds": sec,
            # DDP's benchmark's "exposed communication": the step minus the same step without communication
            "exposed_comm_s": {m: sec[m]["median"] - base for m in sec if m not in ("local",)},
            "nnlo_local_overhead_s": sec["nnlo_local"]["median"] - base,
            "nnlo_over_ddp": sec[label]["median"] / sec["ddp_gloo"]["median"],
            "nnlo_over_ddp_by_bucket": {m: sec[m]["median"] / sec["ddp_gloo"]["median"]
                                        for m in sec if m.startswith("nnlo_") and m != "nnlo_local"}}


def signed(x: float) -> str:
    return "-" + C.fmt_time(-x) if x < 0 else C.fmt_time(x)


def step_table(rows: list[dict]) -> str:
    """Whole step: each method's median, its exposed communication (step - local step) and its ratio to DDP."""
    methods = [m for m in rows[0]["seconds"] if m != "local"]
    tab = []
    for row in rows:
        s = row["seconds"]
        ddp = s["ddp_gloo"]["median"]
        tab.append([f"{row['params']:,}", C.fmt_time(s["local"]["median"])]
                   + [f"{C.fmt_time(s[m]['median'])} ({signed(row['exposed_comm_s'][m])})" if m in s else "n/a"
                      for m in methods]
                   + [f"**{s[row['nnlo_method']]['median'] / ddp:.2f}**"])
    return C.table(tab, ["params", "local step", *[f"{m} (exposed)" for m in methods], "nnlo/DDP"])


def report(r: dict) -> str:
    out = [f"all-reduce, {r['ranks']} ranks; nnlo: {r['nnlo_allreduce']}; horovod: {r['horovod']}",
           "communication only (median time of one all-reduce, slowest rank):"]
    methods = ["mpi4py", "gloo", "horovod", "nnlo"]
    tab = []
    for row in r["communication"]:
        s = row["seconds"]
        tab.append([f"{row['params']:,}", f"{row['bytes'] / 1e6:.1f} MB"]
                   + [C.fmt_time(s[m]["median"]) if m in s else "n/a" for m in methods]
                   + [f"{row['gloo_over_mpi4py']:.2f}",
                      f"{row['nnlo_over_best_alternative']:.2f}" if "nnlo_over_best_alternative" in row else "n/a"])
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
