"""The ``nnlo optimize`` command's options, read by the one inner parser (the scheduler sizes jobs with it)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from nnlo.roles import Shape
from nnlo_sched.inner import parse_inner
from tests.helpers.env import REPO


def shape(*argv: str) -> Shape:
    return parse_inner("optimize", ["--model", "m.py", *argv]).shape


def test_shape_of_the_upstream_example_and_defaults():
    assert shape("--block-size", "6", "--n-fold", "2") == Shape(n_masters=1, n_processes=1, block_size=6, n_fold=2)
    # default block: the smallest that holds n_fold x (1 master + 1 worker)
    assert shape("--n-fold", "3").block_size == 6
    assert shape("--n-processes", "2").block_size == 3


def test_search_options_are_parsed(monkeypatch, tmp_path):
    monkeypatch.delenv("NNLO_RUN_DIR", raising=False)
    inner = parse_inner("optimize", ["--model", "examples/branin.py", "--hyper-opt", "genetic", "--ga-populations",
                                     "6", "--fom", "val_accuracy", "--target-objective", "0.97", "--num-iterations",
                                     "40", "--seed", "4"])
    assert inner.search is not None
    opts = inner.search.options(inner.train)
    assert (opts.hyper_opt, opts.ga_populations, opts.fom, opts.target_objective) == ("genetic", 6, "val_accuracy", 0.97)
    assert opts.num_iterations == 40 and opts.seed == 4 and str(opts.out_dir) == "optimize-branin"
    monkeypatch.setenv("NNLO_RUN_DIR", str(tmp_path))
    assert inner.search.options(inner.train).out_dir == tmp_path


def test_overwrite_is_a_search_option_and_never_a_trials():
    from nnlo.errors import ConfigError
    from nnlo.optimize.runners import TrainRunner

    inner = parse_inner("optimize", ["--model", "m.py", "--overwrite", "--output", "o"])
    assert inner.search is not None and inner.search.options(inner.train).overwrite
    trial = TrainRunner(inner.train, 0, "s").config_for({}, REPO / "o" / "trials" / "0000" / "fold-0")
    assert trial.restore == "auto" and not trial.overwrite  # a trial resumes its own folder
    for extra in ("--opt-restore", "--shared"):
        with pytest.raises(ConfigError, match="--overwrite starts a search afresh"):
            parse_inner("optimize", ["--model", "m.py", "--overwrite", "--output", "o", extra])


@pytest.mark.slow
@pytest.mark.parametrize("argv, message", [
    (["--num-iterations", "0"], "--num-iterations"),
    (["--hyper-opt", "grid"], "--hyper-opt"),
    (["--estimator", "GBRT"], "--estimator"),
    (["--ga-populations", "1"], "--ga-populations"),
])
def test_bad_options_are_usage_errors(nnlo_env, argv, message):
    r = subprocess.run([sys.executable, "-m", "nnlo_sched", "optimize", "--model", "examples/branin.py", *argv],
                       env=nnlo_env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr
