"""Run from an NNLO checkout, as NNLO's README has its users work: the working folder holds NNLO's own package
``nnlo/`` (with ``nnlo/optimize/__init__.py``) beside the user's ``models/`` and data.

nnlo's own processes - the pre-queue check of the model, every rank of ``-n`` and of a batch job, the local
scheduler, a submitit job - are ``python -m nnlo_sched ...``, which puts the working folder first on
``sys.path``; they must still import nnlo's runtime, not the checkout's package, while the folder stays
importable for the model module's own imports (``from models.Models import ...``, as NNLO's examples have them).
They run as a user's install runs them: an editable install (the README's set-up), whose import finder comes
after Python's whole path search, and no ``PYTHONPATH`` (``editable_install``, compat_runtime/conftest.py).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from nnlo.contract import HISTORY_FILE, TRIALS_JSON
from nnlo.optimize.trial_files import trial_dir
from tests.compat_runtime.conftest import EditableInstall
from tests.helpers.projects import write_project

pytestmark = [pytest.mark.mpi]

CHECKOUT_NNLO = '"""NNLO\'s own package, as an NNLO checkout has it (not nnlo\'s runtime)."""\nCHECKOUT = True\n'


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """The user's project (conftest.write_project) inside an NNLO checkout: NNLO's own ``nnlo/`` package, and
    the model as an example that imports the checkout's ``models/`` package (``models/Models.py``)."""
    project = write_project(tmp_path / "NNLO")
    root = project["root"]
    (root / "nnlo" / "optimize").mkdir(parents=True)
    (root / "nnlo" / "__init__.py").write_text(CHECKOUT_NNLO)
    (root / "nnlo" / "optimize" / "__init__.py").write_text("")
    (root / "models" / "Models.py").write_text((root / "models" / "mymodels.py").read_text())
    (root / "examples").mkdir()
    sibling = "from mymodels import make_model"
    text = project["model"].read_text()
    assert sibling in text
    (root / "examples" / "example_mlp.py").write_text(text.replace(sibling, "from models.Models import make_model"))
    return root


@pytest.mark.slow  # (editable_install: pip)
def test_optimize_and_train_with_n_work_from_a_folder_holding_a_package_named_nnlo(checkout, editable_install) -> None:
    """One ``nnlo optimize -n 3``: its ranks are ``python -m nnlo_sched`` processes started in the checkout, and
    its trial is a training from there. (``nnlo train -n 2`` from the same folder was a second launch reaching
    no code of its own: nnlo's runtime is imported from beside ``nnlo_sched`` when ``nnlo_sched`` is imported,
    whatever the command; docs/testing.md, "What was merged or moved".)"""
    r = editable_install.nnlo(["optimize", "-n", "3", "--model", "examples/example_mlp.py", "--block-size", "2",
                               "--num-iterations", "1", "--hyper-opt", "random", "--epochs", "1", "--batch", "16",
                               "--mode", "downpour"], cwd=checkout)
    assert r.rc == 0, r.err[-3000:]
    out = checkout / "optimize-sibling-mlp"
    trials = json.loads((out / TRIALS_JSON).read_text())
    assert [t["status"] for t in trials] == ["ok"], trials
    history = json.loads((trial_dir(out, trials[0]["id"], 0) / HISTORY_FILE).read_text())
    assert history["epochs_done"] == 1 and history["stopped_reason"] == "completed"


def test_optimize_has_no_check_like_train_and_submit(checkout, nnlo_cli) -> None:
    r = nnlo_cli(["optimize", "--help"], cwd=checkout)
    assert r.rc == 0 and "--no-check" in r.out
    r = nnlo_cli(["train", "--help"], cwd=checkout)
    assert r.rc == 0 and "--no-check" in r.out


@pytest.mark.slow
def test_a_chain_job_and_its_pre_queue_check_work_from_the_checkout(checkout, editable_install) -> None:
    """``nnlo submit --cluster local`` from the checkout: the pre-queue check (``python -m nnlo_sched.checks``),
    the local scheduler (``python -m nnlo_sched.schedulers.local``), the job's bookkeeping (``nnlo job``) and
    its ranks (``python -m nnlo_sched run``) all import nnlo's runtime; the run trains its epoch and is done."""
    env = {"NNLO_HOME": str(checkout / "runs")}
    install = EditableInstall(editable_install.bin, {**editable_install.env, **env})
    r = install.nnlo(["submit", "--cluster", "local", "--name", "co", "--workers", "1", "-t", "5m", "train",
                      "--model", "examples/example_mlp.py", "--epochs", "1", "--batch", "16", "--mode", "downpour"],
                     cwd=checkout)
    assert r.rc == 0 and r.out.startswith("submitted run co"), r.out + r.err[-3000:]
    run = r.out.split()[2]
    waited = install.nnlo(["wait", run, "--timeout", "240"], cwd=checkout, timeout=300)
    logs = install.nnlo(["logs", run], cwd=checkout).out
    assert waited.rc == 0, waited.out + waited.err + logs[-3000:]
    assert "nnlo.optimize.options" not in logs and "internal error" not in logs, logs[-3000:]


@pytest.mark.slow  # (editable_install: pip)
def test_a_submitit_job_imports_nnlos_runtime_in_the_checkout(checkout, editable_install) -> None:
    """A submitit job's program (``python -m nnlo_sched.submitit.job FOLDER``) started in the checkout gets
    past nnlo's imports to submitit's own question (outside a job it finds no job environment)."""
    r = editable_install.python_m(["nnlo_sched.submitit.job", str(checkout / "jobs")], cwd=checkout)
    assert r.rc != 0 and "Could not figure out which environment the job is" in r.err, r.err[-3000:]
    assert "nnlo.optimize.options" not in r.err
