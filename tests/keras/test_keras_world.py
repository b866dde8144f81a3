"""The warm TensorFlow world (``nnlo_keras``, tests/helpers/world_rank.py) gives every run the Keras, TensorFlow
and random state of a fresh launch, and refuses a run whose TensorFlow thread pools would differ from a launch's.

Cheap: one small program run three times in the world, no training. That a whole training in the world retraces a
fresh launch is shown by tests/keras/test_keras_mpi.py (an interrupted run resumes exactly on the curve of an
uninterrupted one, both world runs among others)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from nnlo.backends.keras_env import _MPI_SIZE_VARS

pytestmark = [pytest.mark.mpi, pytest.mark.usefixtures("tf_keras")]

PROBE = Path(__file__).with_name("keras_state_probe.py")


def _found(out: Path, ranks: int) -> list[dict]:
    return [json.loads(Path(f"{out}.rank-{r}.json").read_text()) for r in range(ranks)]


def test_each_run_starts_with_a_fresh_keras_tensorflow_and_random_state(nnlo_keras, tmp_path):
    dirty = nnlo_keras(3, PROBE, tmp_path / "first", "dirty")
    assert dirty.returncode == 0, dirty.stderr[-3000:]
    after = nnlo_keras(3, PROBE, tmp_path / "second")
    assert after.returncode == 0, after.stderr[-3000:]
    first, second = _found(tmp_path / "first", 3), _found(tmp_path / "second", 3)
    for found in (*first, *second):  # what a fresh rank of a 3-rank nnlo launch has
        assert {k: found[k] for k in ("size", "layer", "floatx", "epsilon", "image_data_format", "dtype_policy",
                                      "custom", "tf_seed", "threads")} == {
            "size": 3, "layer": "dense", "floatx": "float32", "epsilon": 1e-7, "image_data_format": "channels_last",
            "dtype_policy": "float32", "custom": [], "tf_seed": [None, None], "threads": [1, 1]}
    seeded = json.loads(json.dumps(first[0]))  # what the dirty run's set_random_seed(0) would have left behind
    import random

    import numpy as np

    random.seed(0)
    np.random.seed(0)
    seeded.update(python_random=random.random(), numpy_random=float(np.random.random()))
    for found in second:  # the generators are seeded afresh, not left as the previous run seeded them
        assert found["python_random"] != seeded["python_random"]
        assert found["numpy_random"] != seeded["numpy_random"]


def test_a_run_whose_thread_pools_would_differ_is_refused_in_one_line(nnlo_keras, nnlo_env, tmp_path):
    env = {**nnlo_env, "NNLO_TF_THREADS": "2"}
    refused = nnlo_keras(3, PROBE, tmp_path / "two", env=env)
    assert refused.returncode == 2
    lines = [ln for ln in refused.stderr.splitlines() if "real launch" in ln]
    assert len(lines) == 3 and "thread pools [1, 1]" in lines[0] and "[2, 2]" in lines[0], refused.stderr[-3000:]
    assert not list(tmp_path.glob("two.rank-*.json"))  # the program did not run
    one_rank = {k: v for k, v in nnlo_env.items() if k not in _MPI_SIZE_VARS and k != "NNLO_TF_THREADS"}
    alone = nnlo_keras(1, PROBE, tmp_path / "alone", env=one_rank)  # one rank: TensorFlow's default pools
    assert alone.returncode == 2 and "[0, 0]" in alone.stderr, alone.stderr[-3000:]
    again = nnlo_keras(3, PROBE, tmp_path / "again")  # the world stays for the next run
    assert again.returncode == 0, again.stderr[-3000:]
    assert _found(tmp_path / "again", 3)[0]["threads"] == [1, 1]
