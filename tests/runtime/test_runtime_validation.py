"""Distributed validation, without MPI: how a validation is split (ranges, weights per rank) and that the
shares' sums add up to the single-rank figures."""
from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch

from nnlo.backends import make_backend
from nnlo.config import TrainConfig
from nnlo.data import H5Dataset, read_list_file
from nnlo.models import load_model_source
from nnlo.roles import Role, Shape, describe
from nnlo.training.validation import Validator, metrics_of, no_sums, split_range, validation_weight

MODELS = Path(__file__).parent / "models"


@pytest.mark.parametrize("seed", range(20))
def test_split_range_is_contiguous_disjoint_complete_and_proportional(seed: int) -> None:
    rng = random.Random(seed)
    lo = rng.randint(0, 50)
    hi = lo + rng.choice([0, 1, 2, rng.randint(0, 1000)])
    weights = [rng.randint(1, 5) for _ in range(rng.randint(1, 9))]
    parts = split_range(lo, hi, weights)
    assert len(parts) == len(weights)
    assert parts[0][0] == lo and parts[-1][1] == hi
    assert all(a <= b for a, b in parts)
    assert all(parts[i][1] == parts[i + 1][0] for i in range(len(parts) - 1))
    total = sum(weights)
    for (a, b), w in zip(parts, weights, strict=True):  # each within one sample of its exact share
        assert abs((b - a) - (hi - lo) * w / total) < 1 + 1e-9


def test_split_range_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        split_range(0, 10, [])
    with pytest.raises(ValueError):
        split_range(5, 4, [1])


def test_validation_weight_counts_the_ranks_behind_each_helper() -> None:
    h = describe(6, Shape(n_masters=2, n_processes=2))  # uber-master, sub-masters, worker groups of 2
    by_role = {r.rank: r for r in h}
    for rank, info in by_role.items():
        w = validation_weight(h, rank)
        if info.role is Role.WORKER:
            assert w == 2
        elif info.role is Role.MASTER:
            group = h.groups[0]
            mine = [ws for ws, m in zip(group.workers, group.master_of_worker, strict=True) if m == info.master]
            assert w == 1 + sum(len(ws) for ws in mine)
        else:
            assert w == 1
    # a sub-master's weight plus the uber-master's own share cover every rank of the training
    subs = [r for r, i in by_role.items() if i.role is Role.MASTER]
    assert 1 + sum(validation_weight(h, r) for r in subs) == 6
    plain = describe(3, Shape())
    assert [validation_weight(plain, r) for r in range(3)] == [1, 1, 1]


@pytest.fixture(scope="module")
def val_set(tmp_path_factory: pytest.TempPathFactory) -> Validator:
    from tests.helpers.runtime import write_blobs

    files = write_blobs(tmp_path_factory.mktemp("val"), n_train=8, n_val=37)
    ds = H5Dataset(read_list_file(str(files["val"])))
    return Validator(ds, np.arange(len(ds)), 5)


def _backend(model: str):
    source = load_model_source(str(MODELS / model))
    torch.manual_seed(1)
    return make_backend(source.build(), TrainConfig(model=str(MODELS / model)), "cpu")


@pytest.mark.parametrize("weights", [[1, 1, 1], [1, 2], [3, 1, 1, 2], [1] * 40])
def test_shares_add_up_to_the_single_rank_figures(val_set: Validator, weights: list[int]) -> None:
    backend = _backend("tiny.py")
    whole = val_set(backend)
    total = no_sums()
    for a, b in split_range(0, len(val_set), weights):
        total += val_set.sums(backend, a, b)
    assert total[1] == len(val_set)
    got = metrics_of(total)
    assert got["val_accuracy"] == whole["val_accuracy"]
    assert got["val_loss"] == pytest.approx(whole["val_loss"], rel=1e-6)
    assert metrics_of(no_sums()) == {}


def test_a_share_is_judged_with_the_given_weights_and_buffers_and_the_model_is_put_back(val_set: Validator) -> None:
    worker = _backend("tiny_bn.py")
    master = _backend("tiny_bn.py")
    torch.manual_seed(5)
    master.set_weights(np.random.default_rng(3).normal(size=master.n_params).astype(np.float32))
    master.set_buffers(np.abs(np.random.default_rng(4).normal(size=master.n_buffers)).astype(np.float32) + 0.5)
    expected = master_sums = val_set.sums(master, 3, 29)
    own_w, own_b = worker.get_weights(), worker.get_buffers()
    got = val_set.sums_with(worker, master.get_weights(), master.get_buffers(), 3, 29)
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    np.testing.assert_array_equal(worker.get_weights(), own_w)
    np.testing.assert_array_equal(worker.get_buffers(), own_b)
    assert not np.allclose(val_set.sums(worker, 3, 29), master_sums)  # the worker's own model differs
    np.testing.assert_array_equal(val_set.sums_with(worker, own_w, None, 4, 4), no_sums())
