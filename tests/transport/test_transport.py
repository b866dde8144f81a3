"""nnlo.transport: compact headers (pure round trips of every field, what falls back to pickling) and, under
a 2-rank MPI run (the warm world), one message up to the threshold, two above it, pickled headers, buffers."""
from __future__ import annotations

import json
import random
import threading
from pathlib import Path

import numpy as np
import pytest

from nnlo.transport import COMPACT_FIELDS, HEADER_WORDS, ONE_MESSAGE_BYTES, WORDS, pack_header, unpack_header

HERE = Path(__file__).parent


def _value(rng: random.Random, kind: type) -> object:
    if rng.random() < 0.15:
        return None
    if kind is str:
        return rng.choice(WORDS)
    if kind is bool:
        return rng.random() < 0.5
    if kind is int:
        return rng.choice([0, 1, -1, 2 ** 53 - 1, -(2 ** 53) + 1, rng.randint(-10 ** 9, 10 ** 9)])
    return rng.choice([0.0, -0.0, 1e-310, -1.5e300, float("inf"), float("-inf"), rng.uniform(-1e6, 1e6)])


def _same(a: dict, b: dict) -> bool:
    if set(a) != set(b):
        return False
    for k in a:
        x, y = a[k], b[k]
        if type(x) is not type(y):
            return False
        if isinstance(x, float) and np.isnan(x):
            if not np.isnan(y):
                return False
        elif x != y or (isinstance(x, float) and np.signbit(x) != np.signbit(y)):
            return False
    return True


@pytest.mark.parametrize("seed", range(200))
def test_every_field_round_trips(seed: int) -> None:
    rng = random.Random(seed)
    keys = rng.sample(COMPACT_FIELDS, rng.randint(0, len(COMPACT_FIELDS)))
    header = {k: _value(rng, t) for k, t in keys}
    block = np.full(HEADER_WORDS, np.nan)  # garbage from an earlier message must not leak through
    fused = rng.random() < 0.5
    assert pack_header(header, block, fused)
    back, was_fused = unpack_header(block.copy())
    assert _same(back, header), (header, back)
    assert was_fused == fused


def test_nan_and_every_word_round_trip() -> None:
    for word in WORDS:
        for key, kind in COMPACT_FIELDS:
            if kind is str:
                block = np.zeros(HEADER_WORDS)
                assert pack_header({key: word, "loss_sum": float("nan")}, block)
                back, _ = unpack_header(block)
                assert back[key] == word and np.isnan(back["loss_sum"])


@pytest.mark.parametrize("header", [
    {"kind": "update", "checkpoint": "/tmp/ckpt"},  # a key outside the schema
    {"kind": "not-a-word"},
    {"samples": 3.0},  # a float where an int goes
    {"samples": True},  # a bool is no int here
    {"epoch_end": 1},  # an int is no bool
    {"loss_sum": "1.0"},
    {"samples": 2 ** 53},  # not exact in a float64
    {"failure": {"message": "x"}},
    {"kind": "update", "buffers": np.zeros(3, np.float32)},
])
def test_headers_outside_the_schema_are_refused(header: dict) -> None:
    assert not pack_header(header, np.zeros(HEADER_WORDS))


def test_numpy_floats_travel_as_floats() -> None:
    block = np.zeros(HEADER_WORDS)
    assert pack_header({"loss_sum": np.float64(2.5), "seconds": 1.0}, block)
    assert unpack_header(block)[0] == {"loss_sum": 2.5, "seconds": 1.0}


@pytest.mark.mpi
def test_link_one_message_up_to_the_threshold(nnlo_mpi, tmp_path: Path) -> None:
    run = nnlo_mpi(2, HERE / "link_ranks.py", tmp_path, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = [json.loads(line) for rank in (0, 1)
             for line in (tmp_path / f"rank-{rank}.jsonl").read_text().splitlines()]
    results = {d["case"]: d for d in lines if "header" in d}
    messages = {d["case"]: d["messages"] for d in lines if "messages" in d}
    assert len(results) == 14, lines
    for case, r in results.items():
        assert r["header"] and r["array"], (case, r)
    assert messages["full header, tensor at the threshold"] == 1
    assert messages["tiny tensor"] == 1
    assert messages["no tensor"] == 1
    assert messages["just above the threshold: two messages"] == 2
    assert messages["pickled: unknown key"] == 3  # the block, the pickle, the tensor
    assert messages["buffers"] == 4
    assert messages["a long pickled header and a small tensor"] == 3
    assert messages["framed both ways, 10 k values"] == 1  # framed: one message at any size
    assert messages["framed sender, plain receiver"] == 1  # taken through the struct datatype, no copy
    assert messages["plain sender, framed receiver"] == 2
    assert messages["framed, pickled header"] == 3
    assert messages["framed, with buffers"] == 4
    assert next(d["bytes"] for d in lines if d["case"] == "threshold") == ONE_MESSAGE_BYTES


# -- sleeping waits (nnlo.transport.sleeping_waits; the training's ranks where the node is oversubscribed) ------
def test_waits_sleep_where_the_ranks_here_outnumber_the_cores(monkeypatch) -> None:
    from mpi4py import MPI

    from nnlo import transport

    monkeypatch.delenv(transport.WAIT_VAR, raising=False)
    monkeypatch.setattr(transport.os, "sched_getaffinity", lambda pid: {0, 1})
    assert transport.sleeping_waits(MPI.COMM_SELF) is False  # 1 rank, 2 cores: spin, the lowest latency
    monkeypatch.setattr(transport.os, "sched_getaffinity", lambda pid: set())
    assert transport.sleeping_waits(MPI.COMM_SELF) is True  # more ranks than cores: sleep
    monkeypatch.setenv(transport.WAIT_VAR, "spin")
    assert transport.sleeping_waits(MPI.COMM_SELF) is False
    monkeypatch.setenv(transport.WAIT_VAR, "Sleep")
    monkeypatch.setattr(transport.os, "sched_getaffinity", lambda pid: {0, 1})
    assert transport.sleeping_waits(MPI.COMM_SELF) is True


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sleep", [False, True])
def test_a_sleeping_link_tests_for_its_message_before_receiving_it(monkeypatch, sleep: bool) -> None:
    from mpi4py import MPI

    from nnlo import transport

    polled: list[float] = []
    real = transport._sleep_until

    def recording(done, max_pause=0.05, timeout=None):  # type: ignore[no-untyped-def]
        polled.append(max_pause)
        return real(done, max_pause, timeout)

    monkeypatch.setattr(transport, "_sleep_until", recording)
    link = transport.Link(MPI.COMM_SELF, sleep=sleep)
    out = np.zeros(5, dtype=np.float32)
    # a blocking send to oneself waits for its receive: from another thread (MPI_THREAD_MULTIPLE)
    sender = threading.Thread(target=link.send, args=(0, {"kind": "gradient", "update": 3},
                                                      np.arange(5, dtype=np.float32)), daemon=True)
    sender.start()
    src, header, arr = link.recv(0, out=out)
    sender.join(60)
    assert (src, header["kind"], header["update"]) == (0, "gradient", 3)
    assert arr is out and out.tolist() == [0, 1, 2, 3, 4]
    assert polled == ([transport.TRAINING_MAX_PAUSE] if sleep else [])
