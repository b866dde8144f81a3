"""A small MPI job that uses the observability session the way the runtime does (used by the tests).

Rank 0 is the master, the others workers (roles from nnlo.roles). Workers "compute" a batch, Send a
gradient buffer to the master and Recv fresh weights; the master waits, receives, applies, replies.
``--forever`` keeps going (bounded to 120 s) so a test can SIGKILL the job mid-run; it prints "ready" once
every rank has recorded spans.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from mpi4py import MPI

from nnlo.observe import session as observe
from nnlo.observe.trace import get_tracer
from nnlo.roles import describe


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--forever", action="store_true")
    args = parser.parse_args()

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    info = describe(size)[rank]
    sess = observe.start(args.out, rank, info.label(), log_level="debug", timeline=True, monitor=True,
                         world_size=size, monitor_interval=0.05, console=False, close_wait_s=30)
    tracer = get_tracer()
    buf = np.zeros(50_000, dtype=np.float32)
    history = []
    deadline = time.monotonic() + 120
    epochs = 10**9 if args.forever else args.epochs
    try:
        for epoch in range(1, epochs + 1):
            for _ in range(args.batches):
                if rank == 0:
                    for _w in range(size - 1):
                        status = MPI.Status()
                        with tracer.span("wait for update", "wait"):
                            comm.Probe(source=MPI.ANY_SOURCE, tag=1, status=status)
                        with tracer.span("recv update", "comm", src=status.Get_source()):
                            comm.Recv(buf, source=status.Get_source(), tag=1)
                        with tracer.span("apply update", "compute"):
                            buf *= 0.5
                        with tracer.span("send weights", "comm"):
                            comm.Send(buf, dest=status.Get_source(), tag=2)
                else:
                    with tracer.span("batch", "compute"):
                        np.sqrt(np.arange(200_000, dtype=np.float64)).sum()
                    with tracer.span("send update", "comm"):
                        comm.Send(buf, dest=0, tag=1)
                    with tracer.span("recv weights", "comm"):
                        comm.Recv(buf, source=0, tag=2)
            if rank == 0:
                with tracer.span("validation", "validate"):
                    time.sleep(0.01)
                with tracer.span("checkpoint", "io"):
                    with tracer.span("gather state", "comm"):
                        time.sleep(0.002)
                    time.sleep(0.005)
            entry = {"epoch": epoch, **sess.epoch_end(epoch)}
            history.append(entry)
            import logging

            logging.getLogger("nnlo.test").info("epoch %d done: %s", epoch, entry)
            if args.forever and epoch == 2:
                comm.Barrier()
                if rank == 0:
                    print("ready", flush=True)
            if args.forever and time.monotonic() > deadline:
                break
    finally:
        sess.summary()
        sess.close()
    if rank == 0:
        import json

        print(json.dumps(history))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
