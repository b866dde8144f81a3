#!/usr/bin/env python
"""Benchmark 1: parameter-server exchange - nnlo's master<->worker round trip against raw mpi4py Send/Recv.

What is measured (2 ranks: rank 0 plays the master, rank 1 the worker):

* ``raw``: the worker ``Send``s N float32 to the master, the master ``Recv``s them into a preallocated
  buffer and ``Send``s N float32 back, the worker ``Recv``s them: the floor for moving those bytes.
* ``raw_two_messages``: raw MPI with nnlo's message count (a 32-byte numeric header, then the tensor):
  separates the cost of the second message from the cost of pickling the header.
* ``nnlo``: the same round trip through :class:`nnlo.transport.Link` exactly as the training runtime does it
  (the runtime's compact header and the tensor in framed buffers, :meth:`~nnlo.transport.Link.frame`: one
  message each way; the master receives from ANY_SOURCE like its asynchronous loop, and answers a reply header
  plus its framed buffer) - what a Downpour/EASGD exchange costs beyond the arithmetic.
* ``nnlo_unframed``: the same with plain arrays (header and tensor fused through an MPI struct datatype up to
  ``transport.ONE_MESSAGE_BYTES``, two messages above), and forced either way (the threshold).

All run in the same process pair, in an order rotated every repeat, so that load from other users
of the machine hits both equally. Also measured by the same script, to say what limits the result: the
8-byte ping-pong latency, an nnlo header-only round trip (the GEM "pull" request costs one), and the
single-core memory copy bandwidth (on one node MPI moves messages through shared memory, i.e. memcpy).

``--device cuda``: the worker's model lives on a GPU, so each exchange also copies its weights to the host
and the master's back: ``nnlo_gpu`` stages them through the runtime's page-locked framed buffers
(:meth:`nnlo.backends.base.Backend.weights_into`, ``set_weights``), ``naive_gpu`` through pageable copies
(``.cpu().numpy()``, ``torch.from_numpy(...).to(device)``) with the same messages, and ``raw_cuda_aware``
(when the MPI library says it is CUDA-aware, :func:`nnlo.device.cuda_aware_mpi`) sends the device memory
itself.

    bench/run.sh ps_exchange               # 10 k, 64 k, 250 k, 1 M, 25 M parameters
    bench/run.sh ps_exchange --device cuda --out bench/results/ps_exchange-gpu.json
    bench/run.sh ps_exchange --quick       # tiny, for the smoke test
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from typing import Any

import numpy as np

import _common as C

NAME = "ps_exchange"


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--params", type=int, nargs="+", default=[10_000, 65_536, 250_000, 1_000_000, 25_000_000],
                   help="model sizes in float32 parameters (default 10k 64k 250k 1M 25M)")
    p.add_argument("--repeats", type=int, default=15, help="timed measurements per size and method")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cuda: the worker's weights live on a GPU (adds the staging measurements)")
    p.add_argument("--quick", action="store_true", help="tiny sizes and few repeats (smoke test)")
    p.add_argument("--out", help="result JSON path (default bench/results/ps_exchange.json)")
    a = p.parse_args(argv)
    if a.quick:
        a.params, a.repeats, a.warmup = [1_000, 100_000], 3, 1
    if min(a.params) < 1:
        p.error("--params must be positive")
    return a


def iterations(nbytes: int) -> int:
    """Round trips per measurement: enough that small messages are timed over ~ms, at least one."""
    return int(max(1, min(500, 4e8 // max(nbytes, 1) // 2)))


def main_child(a: argparse.Namespace, argv: list[str]) -> int:
    from mpi4py import MPI

    from nnlo.transport import ANY, Link

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    if size != 2:
        if rank == 0:
            print("ps_exchange needs exactly 2 ranks (run it through bench/run.sh)", file=sys.stderr)
        return 2
    load0 = os.getloadavg()
    link = Link(comm)
    TAG = 77
    F = MPI.FLOAT

    def raw_rt(buf: np.ndarray, rbuf: np.ndarray, k: int) -> None:
        for _ in range(k):
            if rank == 1:
                comm.Send([buf, F], dest=0, tag=TAG)
                comm.Recv([rbuf, F], source=0, tag=TAG)
            else:
                comm.Recv([buf, F], source=1, tag=TAG)
                comm.Send([buf, F], dest=1, tag=TAG)

    hdr_out, hdr_in = np.zeros(8, np.float32), np.zeros(8, np.float32)

    def raw2_rt(buf: np.ndarray, rbuf: np.ndarray, k: int) -> None:
        """Raw MPI with nnlo's message count: a 32-byte numeric header, then the tensor, each way. Isolates
        what the second message costs from what pickling the header costs."""
        for _ in range(k):
            if rank == 1:
                comm.Send([hdr_out, F], dest=0, tag=TAG)
                comm.Send([buf, F], dest=0, tag=TAG)
                comm.Recv([hdr_in, F], source=0, tag=TAG)
                comm.Recv([rbuf, F], source=0, tag=TAG)
            else:
                comm.Recv([hdr_in, F], source=1, tag=TAG)
                comm.Recv([buf, F], source=1, tag=TAG)
                comm.Send([hdr_out, F], dest=1, tag=TAG)
                comm.Send([buf, F], dest=1, tag=TAG)

    import nnlo.transport as transport

    # the headers the runtime sends (nnlo/training/worker.py, serve.py): a worker's update, the master's reply
    update = {"samples": 128, "loss_sum": 1.0, "correct": 100.0, "seconds": 0.01, "stop_requested": None,
              "epoch": 0, "epoch_end": False, "kind": "update"}
    reply = {"kind": "reply", "action": "continue"}

    def nnlo_rt(buf: np.ndarray, rbuf: np.ndarray, k: int) -> None:
        for _ in range(k):
            if rank == 1:
                link.send(0, update, buf)
                link.recv(0, out=rbuf)
            else:
                src, _, arr = link.recv(ANY, out=buf)
                link.send(src, reply, arr)

    frames: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def framed_rt(buf: np.ndarray, rbuf: np.ndarray, k: int) -> None:
        """As the runtime: the worker's send and receive buffers and the master's are framed."""
        if buf.size not in frames:
            frames[buf.size] = (link.frame(buf.size), link.frame(buf.size))
        send, recv = frames[buf.size]
        nnlo_rt(send, recv, k)

    def with_threshold(limit: float) -> Any:
        def run(buf: np.ndarray, rbuf: np.ndarray, k: int) -> None:
            saved, transport.ONE_MESSAGE_BYTES = transport.ONE_MESSAGE_BYTES, limit
            try:
                nnlo_rt(buf, rbuf, k)
            finally:
                transport.ONE_MESSAGE_BYTES = saved
        return run

    def header_rt(k: int) -> None:
        for _ in range(k):
            if rank == 1:
                link.send(0, {"kind": "pull"})
                link.recv(0)
            else:
                src, _, _ = link.recv(ANY)
                link.send(src, {"kind": "reply", "action": "continue"})

    def measure(fn, *args, k: int) -> float:
        comm.Barrier()
        t0 = time.perf_counter()
        fn(*args, k=k)
        dt = (time.perf_counter() - t0) / k
        return comm.bcast(dt, root=1)  # the worker's clock: it sees the whole round trip

    # latency: 8-byte ping-pong and an nnlo header-only round trip, alternating
    tiny, tiny_r = np.zeros(2, np.float32), np.zeros(2, np.float32)
    lat_raw, lat_hdr = [], []
    for i in range(a.warmup + a.repeats):
        r = measure(raw_rt, tiny, tiny_r, k=1000)
        h = measure(lambda k: header_rt(k), k=1000)
        if i >= a.warmup:
            lat_raw.append(r / 2)
            lat_hdr.append(h)

    rows = []
    for n in a.params:
        buf = np.ones(n, np.float32)
        rbuf = np.empty(n, np.float32)
        nbytes = buf.nbytes
        k = iterations(nbytes)
        # nnlo as it runs (framed), unframed (one message up to transport.ONE_MESSAGE_BYTES), and unframed
        # forced either way: the threshold
        fns = {"raw": raw_rt, "raw_two_messages": raw2_rt, "nnlo": framed_rt, "nnlo_unframed": nnlo_rt,
               "nnlo_one_message": with_threshold(float("inf")), "nnlo_two_messages": with_threshold(-1)}
        got: dict[str, list[float]] = {m: [] for m in fns}
        names = list(fns)
        for i in range(a.warmup + a.repeats):
            for label in names[i % len(names):] + names[:i % len(names)]:  # rotate the order every repeat
                t = measure(fns[label], buf, rbuf, k=k)
                if i >= a.warmup:
                    got[label].append(t)
        raw, nn = got["raw"], got["nnlo"]
        sr, sn = C.summary(raw), C.summary(nn)
        rows.append({
            "params": n, "bytes": nbytes, "round_trips_per_measurement": k,
            "raw_round_trip_s": sr, "nnlo_round_trip_s": sn,
            "raw_two_messages_round_trip_s": C.summary(got["raw_two_messages"]),
            "nnlo_unframed_round_trip_s": C.summary(got["nnlo_unframed"]),
            "nnlo_one_message_round_trip_s": C.summary(got["nnlo_one_message"]),
            "nnlo_two_messages_round_trip_s": C.summary(got["nnlo_two_messages"]),
            "one_message": nbytes <= transport.ONE_MESSAGE_BYTES,
            "raw_bandwidth_GBps": 2 * nbytes / sr["median"] / 1e9,
            "nnlo_bandwidth_GBps": 2 * nbytes / sn["median"] / 1e9,
            # fraction of raw bandwidth nnlo reaches (time ratio raw/nnlo), median of paired repeats too
            "ratio_of_raw_bandwidth": sr["median"] / sn["median"],
            "ratio_paired_median": float(np.median(np.array(raw) / np.array(nn))),
        })
        del buf, rbuf

    gpu_rows = device_part(a, comm, link, measure, nnlo_rt, raw_rt) if a.device == "cuda" else []

    # memory copy bandwidth (read + write) of the largest buffer, on the master's core
    n = max(a.params)
    src, dst = np.ones(n, np.float32), np.empty(n, np.float32)
    copies = C.summary(C.timed(lambda: np.copyto(dst, src), repeats=max(3, a.repeats // 2), warmup=1))
    memcpy = {"bytes": src.nbytes, "seconds": copies, "GBps": src.nbytes / copies["median"] / 1e9}
    del src, dst

    if rank == 0:
        result = {
            "what": "master<->worker round trip of N float32 parameters: nnlo transport.Link vs raw Send/Recv",
            "ranks": 2,
            "target": "nnlo round trip >= 0.9 of raw mpi4py's from 10 k to 25 M parameters",
            "one_message_bytes": transport.ONE_MESSAGE_BYTES,
            "latency": {"raw_one_way_8B_s": C.summary(lat_raw), "nnlo_header_round_trip_s": C.summary(lat_hdr)},
            "memcpy_one_core": memcpy,
            "sizes": rows,
            "device": a.device,
            "gpu_staging": gpu_rows,
        }
        print(report(result))
        C.write_result(NAME, result, a.out, argv=argv, started_load=load0)
    return 0


def device_part(a: argparse.Namespace, comm: Any, link: Any, measure: Any, nnlo_rt: Any,
                raw_rt: Any) -> list[dict[str, Any]]:
    """The worker (rank 1) holds its weights on a GPU: every round trip copies them out and the reply in."""
    import torch

    from nnlo.backends.torch_backend import TorchBackend
    from nnlo.device import cuda_aware_mpi

    rank = comm.Get_rank()
    aware = cuda_aware_mpi()
    rows = []
    for n in a.params:
        model = torch.nn.Linear(n, 1, bias=False)  # n weights
        backend = TorchBackend(model, "mse", "sgd", "cuda" if rank == 1 else "cpu")
        send, recv = link.frame(n, backend.host_buffer), link.frame(n, backend.host_buffer)
        plain_send, plain_recv = np.empty(n, np.float32), np.empty(n, np.float32)
        dev = next(model.parameters())

        def staged(buf: np.ndarray, rbuf: np.ndarray, k: int) -> None:  # the runtime's path
            for _ in range(k):
                if rank == 1:
                    backend.weights_into(send)
                    nnlo_rt(send, recv, 1)
                    backend.set_weights(recv)
                else:
                    nnlo_rt(send, recv, 1)

        def naive(buf: np.ndarray, rbuf: np.ndarray, k: int) -> None:  # pageable copies
            for _ in range(k):
                if rank == 1:
                    np.copyto(plain_send, dev.detach().reshape(-1).cpu().numpy())
                    nnlo_rt(plain_send, plain_recv, 1)
                    with torch.no_grad():
                        dev.copy_(torch.from_numpy(plain_recv).to(dev.device).view_as(dev))
                else:
                    nnlo_rt(plain_send, plain_recv, 1)

        fns = {"raw_host": raw_rt, "nnlo_gpu": staged, "naive_gpu": naive}
        if aware:
            dbuf = torch.ones(n, device="cuda") if rank == 1 else None
            dr = torch.empty(n, device="cuda") if rank == 1 else None

            def raw_aware(buf: np.ndarray, rbuf: np.ndarray, k: int) -> None:
                raw_rt(dbuf if rank == 1 else buf, dr if rank == 1 else rbuf, k)
            fns["raw_cuda_aware"] = raw_aware
        k = iterations(4 * n)
        got: dict[str, list[float]] = {m: [] for m in fns}
        names = list(fns)
        for i in range(a.warmup + a.repeats):
            for label in names[i % len(names):] + names[:i % len(names)]:
                t = measure(fns[label], plain_send, plain_recv, k=k)
                if i >= a.warmup:
                    got[label].append(t)
        sec = {m: C.summary(v) for m, v in got.items()}
        rows.append({"params": n, "bytes": 4 * n, "round_trip_s": sec, "cuda_aware_mpi": aware,
                     "staged_over_naive": sec["naive_gpu"]["median"] / sec["nnlo_gpu"]["median"]})
    return rows


def report(r: dict) -> str:
    lines = [f"parameter-server exchange, {r['ranks']} ranks (median of repeats; ratio = nnlo/raw bandwidth)"]
    tab = []
    for s in r["sizes"]:
        forced = [C.fmt_time(s[k]["median"]) if k in s else "n/a"
                  for k in ("nnlo_one_message_round_trip_s", "nnlo_two_messages_round_trip_s")]
        tab.append([f"{s['params']:,}", f"{s['bytes'] / 1e6:.2f} MB", C.fmt_time(s["raw_round_trip_s"]["median"]),
                    C.fmt_time(s["nnlo_round_trip_s"]["median"]), *forced, f"{s['raw_bandwidth_GBps']:.2f}",
                    f"{s['nnlo_bandwidth_GBps']:.2f}", f"{s['ratio_of_raw_bandwidth']:.3f}"])
    lines.append(C.table(tab, ["params", "size", "raw rt", "nnlo rt", "nnlo 1 msg", "nnlo 2 msgs", "raw GB/s",
                               "nnlo GB/s", "ratio"]))
    for g in r.get("gpu_staging", []):
        sec = g["round_trip_s"]
        lines.append(f"GPU worker, {g['params']:,} params: " + ", ".join(
            f"{m} {C.fmt_time(v['median'])}" for m, v in sec.items()) + f"; pinned/pageable speed-up "
            f"{g['staged_over_naive']:.2f}")
    lat = r["latency"]
    lines.append(f"latency: raw 8-byte one-way {C.fmt_time(lat['raw_one_way_8B_s']['median'])}, "
                 f"nnlo header-only round trip {C.fmt_time(lat['nnlo_header_round_trip_s']['median'])}; "
                 f"memcpy one core {r['memcpy_one_core']['GBps']:.2f} GB/s")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    a = parse(argv)
    if C.in_child():
        return main_child(a, argv)
    return C.relaunch(__file__, 2, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
