"""Bucketed all-reduce: pure tests of the bucket assignment and start order, and (on 2 ranks of the warm MPI
world) the same weights as the unbucketed step for one bucket per parameter, a few, and one for all."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from nnlo.allreduce.buckets import FLOAT_BYTES, BucketPlan, assign_buckets
from nnlo.config import TrainConfig
from nnlo.errors import ConfigError

HERE = Path(__file__).parent


def _offsets(sizes: list[int]) -> list[int]:
    out = [0]
    for s in sizes:
        out.append(out[-1] + s)
    return out


@pytest.mark.parametrize("seed", range(40))
def test_buckets_cover_the_buffer_contiguously_in_reverse_order(seed: int) -> None:
    rng = random.Random(seed)
    sizes = [rng.choice([0, 1, 3, 10, 1000, 250_000]) for _ in range(rng.randint(1, 12))]
    bucket_bytes = rng.choice([0, 1, 100, 4 << 20, 1 << 40])
    buckets = assign_buckets(sizes, bucket_bytes)
    offsets = _offsets(sizes)
    # every parameter in exactly one bucket, walking from the last parameter to the first
    assert [p for b in buckets for p in b.params] == list(range(len(sizes) - 1, -1, -1))
    stop = offsets[-1]
    for b in buckets:
        assert b.stop == stop and b.start == offsets[min(b.params)] and b.stop == offsets[max(b.params) + 1]
        assert list(b.params) == sorted(b.params, reverse=True)
        stop = b.start
    assert stop == 0
    for b in buckets[:-1]:  # only the last (first parameters) may be smaller than the size asked for
        assert b.size * FLOAT_BYTES >= bucket_bytes
        # without its last parameter it was too small (so one parameter per bucket when asked for 0 bytes)
        assert (b.size - sizes[min(b.params)]) * FLOAT_BYTES < bucket_bytes or len(b.params) == 1


def test_bucket_extremes() -> None:
    sizes = [4, 2, 6]
    assert [b.params for b in assign_buckets(sizes, 0)] == [(2,), (1,), (0,)]  # one per parameter
    assert [(b.start, b.stop) for b in assign_buckets(sizes, 0)] == [(6, 12), (4, 6), (0, 4)]
    assert [b.params for b in assign_buckets(sizes, 1e12)] == [(2, 1, 0)]  # one for all
    assert [b.params for b in assign_buckets(sizes, 8 * FLOAT_BYTES)] == [(2, 1), (0,)]
    with pytest.raises(ValueError):
        assign_buckets([3, -1], 10)


@pytest.mark.parametrize("seed", range(30))
def test_plan_starts_buckets_in_order_whatever_order_the_hooks_fire(seed: int) -> None:
    rng = random.Random(seed)
    sizes = [rng.randint(1, 50) for _ in range(rng.randint(1, 10))]
    plan = BucketPlan(assign_buckets(sizes, rng.choice([0, 40, 200, 10_000])), len(sizes))
    for _ in range(2):  # reset makes a plan reusable step after step
        plan.reset()
        order = list(range(len(sizes)))
        rng.shuffle(order)
        skipped = set(rng.sample(order, rng.randint(0, len(order) // 2)))  # unused parameters: no hook
        started: list[int] = []
        for p in order:
            if p not in skipped:
                newly = plan.ready(p)
                for b in newly:  # a bucket starts only when all its parameters are in
                    assert all(q not in skipped and order.index(q) <= order.index(p)
                               for q in plan.buckets[b].params)
                started += newly
                assert plan.ready(p) == []  # a second report of the same parameter changes nothing
        started += plan.rest()
        assert started == list(range(len(plan.buckets)))
        assert plan.rest() == []


def test_bucket_mb_is_checked() -> None:
    with pytest.raises(ConfigError, match="--bucket-mb"):
        TrainConfig(model="m.py", mode="allreduce", bucket_mb=-1).validate()
    with pytest.raises(ConfigError, match="--bucket-mb"):
        TrainConfig(model="m.py", mode="allreduce", bucket_mb=float("nan")).validate()
    assert TrainConfig(model="m.py", mode="allreduce", bucket_mb=0).validate().bucket_mb == 0


@pytest.mark.mpi
def test_bucketed_step_gives_the_unbucketed_weights(nnlo_mpi) -> None:
    sizes = ["1e-9", "0.0002", "0.0006", "1000",  # one bucket per parameter, a few, one for all
             "1e-9:thread", "0.0006:thread",  # the same on a communication thread
             "0.0006@thread",  # the mpi engine driven by its progress thread instead of the hooks
             "0.0006@torch", "0@torch",  # torch.distributed (gloo): buckets, and one all-reduce
             "1e-9@torchdev", "0@torchdev"]  # its tensor step buffers (the NCCL path's), on the CPU
    run = nnlo_mpi(2, HERE / "bucketed_ranks.py", *sizes)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    results = out["results"]
    counts = [results[s]["buckets"] for s in sizes]
    assert counts[0] == 8 and counts[3] == 1 and 1 < counts[1] < 8, counts  # 8 parameter tensors
    assert counts[4] == 8 and counts[9] == 8 and counts[8] == counts[10] == 0
    assert [results[s]["device_buffers"] for s in sizes] == [False] * 9 + [True] * 2
    for s in sizes:
        r = results[s]
        assert r["replicas_equal"], r  # every rank applied the same summed gradient
        assert r["max_diff"] <= 1e-6, (s, r)
