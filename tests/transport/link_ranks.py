"""Run under ``mpirun -np 2`` by test_transport.py: rank 1 sends rank 0 a series of headers and tensors
through :class:`nnlo.transport.Link` (one message, two messages, pickled, with buffers, a pickle exactly as
long as a one-message header + tensor, framed buffers on either side or both) and rank 0 echoes each back. Each rank writes its JSON lines to its own file, ``DIR/rank-R.jsonl`` (DIR is the
first argument): two ranks printing to one forwarded stdout can interleave within a line."""
from __future__ import annotations

import json
import sys

import numpy as np
from mpi4py import MPI

from nnlo import transport
from nnlo.transport import ANY, ONE_MESSAGE_BYTES, Link


FRAMED = {  # case -> (rank 1's buffers framed, rank 0's buffers framed)
    "framed both ways, 10 k values": (True, True),
    "framed sender, plain receiver": (True, False),
    "plain sender, framed receiver": (False, True),
    "framed, pickled header": (True, True),
    "framed, with buffers": (True, True),
}


def cases() -> list[tuple[str, dict, int | None]]:
    at = ONE_MESSAGE_BYTES // 4  # a tensor exactly at the threshold: one message
    full = {"kind": "update", "action": "continue", "array": True, "samples": 2 ** 40, "loss_sum": -1.5e-300,
            "correct": None, "seconds": float("inf"), "epoch": -3, "epoch_end": True, "stop_requested": "SIGTERM",
            "updates": 7, "batch": 0}
    out = [
        ("full header, tensor at the threshold", full, at),
        ("just above the threshold: two messages", {"kind": "update", "samples": 1}, at + 1),
        ("no tensor", {"kind": "pull"}, None),
        ("tiny tensor", {"kind": "reply", "action": "stop"}, 1),
        ("pickled: unknown key", {"kind": "reply", "action": "stop", "checkpoint": "/tmp/x"}, 5),
        ("pickled: a word outside the vocabulary", {"kind": "update", "stop_requested": "a stop below"}, 5),
        ("pickled: a float where an int goes", {"kind": "update", "samples": 3.0}, at),
        ("buffers", {"kind": "update", "epoch_end": True, "buffers": np.arange(4, dtype=np.float32)}, 6),
    ]
    # a pickled header as long as a one-message header + tensor: still announced, then pickled
    out.append(("a long pickled header and a small tensor", {"kind": "error", "pad": "x" * 400}, 40))
    big = {"kind": "update", "samples": 64, "loss_sum": 2.0, "epoch_end": False}
    out += [("framed both ways, 10 k values", big, 10_000), ("framed sender, plain receiver", big, 10_000),
            ("plain sender, framed receiver", big, 10_000),
            ("framed, pickled header", {"kind": "reply", "checkpoint": "/tmp/y"}, 10_000),
            ("framed, with buffers", {"kind": "update", "buffers": np.arange(3, dtype=np.float32)}, 2_000)]
    return out


def buffer(link: Link, size: int, framed: bool) -> np.ndarray:
    return link.frame(size) if framed else np.empty(size, np.float32)


def main(out_dir: str) -> int:
    comm = MPI.COMM_WORLD
    link = Link(comm)
    log = open(f"{out_dir}/rank-{comm.Get_rank()}.jsonl", "w")
    for name, header, size in cases():
        framed_1, framed_0 = FRAMED.get(name, (False, False))
        if comm.Get_rank() == 1:
            arr = None
            if size is not None:
                arr = buffer(link, size, framed_1)
                arr[:] = np.random.default_rng(size).normal(size=size)
            link.send(0, header, arr)
            out = buffer(link, size or 1, framed_1)
            _, back, got = link.recv(0, out=out)
            sent = dict(header, array=arr is not None)
            same_header = set(back) == set(sent) and all(
                (np.array_equal(back[k], sent[k]) if isinstance(sent[k], np.ndarray)
                 else back[k] == sent[k] and type(back[k]) is type(sent[k])) for k in sent)
            same_array = (got is None and arr is None) or (got is not None and np.array_equal(got, arr))
            print(json.dumps({"case": name, "header": same_header, "array": same_array,
                              "back": repr(back) if not same_header else ""}), file=log, flush=True)
        else:
            buf = buffer(link, size or 1, framed_0)
            src, got_header, arr = link.recv(ANY, out=buf)
            print(json.dumps({"case": name, "messages": link.last_messages}), file=log, flush=True)
            got_header.pop("array")
            link.send(src, got_header, None if arr is None else arr)
    comm.Barrier()
    if comm.Get_rank() == 1:
        print(json.dumps({"case": "threshold", "bytes": transport.ONE_MESSAGE_BYTES}), file=log)
    log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
