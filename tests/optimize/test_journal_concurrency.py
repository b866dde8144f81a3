"""Property test: many processes append to one journal while others are SIGKILLed at random moments, and
some tear their record on purpose (what a writer killed mid-write leaves on a network file system).

Holds: every record a reader accepts is one a writer wrote whole (no torn record accepted, also for a reader
that reads without the lock while others write), every acknowledged append is in the journal exactly once
(no lost record), each writer's records are in its order, and exactly the torn lines are skipped: each
tearer's, and any a SIGKILLed writer left mid-write (Linux ends a large write to a regular file at a page
boundary when a fatal signal arrives, so a killed writer can tear its record too; at most one per kill).
"""
from __future__ import annotations

import multiprocessing
import os
import random
import signal
import time
from pathlib import Path

import pytest

from nnlo.contract import SEARCH_JOURNAL
from nnlo.optimize.journal import Journal, encode, read_journal

pytestmark = [pytest.mark.slow]

KILLS = 15  # writers killed at random moments (a count, not a duration: the same test on any machine)
ctx = multiprocessing.get_context("fork")


def record(wid: int, seq: int, rng: random.Random) -> dict:
    n = rng.choice([0, 10, 200, 5000, 70000])  # records larger than a pipe buffer / a page too
    return {"kind": "test", "p": f"w{wid}", "t": 0.0, "seq": seq, "n": n, "pad": "x" * n}


def writer(folder: str, wid: int, acks: str) -> None:
    rng = random.Random(wid)
    journal = Journal(folder)
    ack = os.open(acks, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    seq = 0
    while True:
        with journal.locked():
            journal.read_new()
            journal.append(record(wid, seq, rng))
        os.write(ack, f"{wid} {seq}\n".encode())  # acknowledged only once append() returned
        seq += 1
        time.sleep(rng.random() * 0.003)


def tearer(folder: str, wid: int) -> None:
    """Write part of a record under the lock and die there (a torn write)."""
    rng = random.Random(wid)
    journal = Journal(folder)
    with journal.locked():
        journal.read_new()
        closing = b"" if journal._clean_end else b"\n"  # what append() writes first after a torn line
        data = closing + encode(record(wid, 0, rng))
        fd = os.open(journal.path, os.O_WRONLY | os.O_APPEND)
        os.write(fd, data[:rng.randrange(len(closing) + 1, len(data) - 1)])
        os.kill(os.getpid(), signal.SIGKILL)


def valid(r: dict) -> bool:
    return r["kind"] == "test" and len(r["pad"]) == r["n"] and set(r["pad"]) <= {"x"}


@pytest.mark.timeout(180)
def test_concurrent_appends_with_kills_and_tears(tmp_path):
    folder, acks = str(tmp_path), str(tmp_path / "acks")
    rng = random.Random(12345)
    procs: dict[int, multiprocessing.Process] = {}
    tearers: list[multiprocessing.Process] = []
    next_wid = 0

    def start() -> None:
        nonlocal next_wid
        p = ctx.Process(target=writer, args=(folder, next_wid, acks), daemon=True)
        p.start()
        procs[next_wid] = p
        next_wid += 1

    for _ in range(6):
        start()
    reader = Journal(folder)  # reads without the lock, while the others write
    seen_unlocked: list[dict] = []
    kills = 0
    while kills < KILLS or not tearers:
        time.sleep(rng.uniform(0.02, 0.12))
        alive = [w for w, p in procs.items() if p.is_alive()]
        victim = rng.choice(alive)
        os.kill(procs[victim].pid, signal.SIGKILL)  # at a random moment: in or out of the lock, mid-write
        procs[victim].join()
        kills += 1
        start()
        if rng.random() < 0.3:
            t = ctx.Process(target=tearer, args=(folder, 10_000 + len(tearers)), daemon=True)
            t.start()
            tearers.append(t)
        records, _ = reader.read_new()
        seen_unlocked += records
    for p in [*procs.values(), *tearers]:
        if p.is_alive() and p not in tearers:
            os.kill(p.pid, signal.SIGKILL)
        p.join(timeout=30)
    reader.close()

    records, skipped = read_journal(folder)
    assert kills > 10 and tearers, "the test must kill writers and tear records"
    assert all(valid(r) for r in records) and all(valid(r) for r in seen_unlocked)
    assert [r for r in records if r["p"].startswith("w1000")] == []  # no torn record accepted
    # exactly the torn ones skipped: every tearer's, and at most one per killed writer (cut mid-write) ...
    assert len(tearers) <= len(skipped) <= len(tearers) + kills
    assert all("torn" in s.reason or "incomplete" in s.reason or "not a journal" in s.reason for s in skipped)
    keys = [(r["p"], r["seq"]) for r in records]
    assert len(keys) == len(set(keys))  # none twice
    acked = {(f"w{w}", int(s)) for w, s in (line.split() for line in Path(acks).read_text().splitlines())}
    assert acked <= set(keys)  # no acknowledged record lost
    assert len(acked) > 50
    for wid in {r["p"] for r in records}:  # each writer's records in its order, none skipped over
        seqs = [r["seq"] for r in records if r["p"] == wid]
        assert seqs == list(range(len(seqs)))
    # a reader that followed the journal without the lock saw a prefix of the same records
    assert seen_unlocked == records[:len(seen_unlocked)]
    assert (tmp_path / SEARCH_JOURNAL).stat().st_size > 0
