"""One run-name rule (:func:`nnlo.models.run_name`) for train, optimize and submit: --trial-name, else the
model module's get_name(), else the model file's stem."""
from __future__ import annotations

from pathlib import Path

import pytest

from nnlo.api import default_run_dir
from nnlo.config import TrainConfig
from nnlo.models import declared_name, run_name
from nnlo.optimize.options import SearchConfig, search_name
from nnlo_sched import api
from tests.helpers.env import REPO

DIGITS = REPO / "examples" / "digits_torch.py"


def _names(model: str, *extra: str, cwd: Path) -> tuple[str, str, str]:
    """(nnlo train's run folder name, nnlo optimize's search name, nnlo submit's run name)."""
    config = TrainConfig(model=model, trial_name=extra[1] if extra else None)
    submitted = api.spec("train", ["--model", model, *extra], "local", workers=1, workdir=cwd)
    return Path(default_run_dir(config)).name, search_name(config), submitted.name


def test_the_same_model_has_the_same_name_for_train_optimize_and_submit(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("NNLO_RUN_DIR", raising=False)
    assert _names(str(DIGITS), cwd=REPO) == ("digits_mlp", "digits_mlp", "digits_mlp")
    assert str(SearchConfig().options(TrainConfig(model=str(DIGITS))).out_dir) == "optimize-digits_mlp"
    assert _names(str(DIGITS), "--trial-name", "scan 1", cwd=REPO) == ("scan-1", "scan-1", "scan-1")
    (tmp_path / "plain.py").write_text("def get_model():\n    return None\n")  # no get_name(): the stem
    monkeypatch.chdir(tmp_path)
    assert _names("plain.py", cwd=tmp_path) == ("plain", "plain", "plain")


@pytest.mark.parametrize("source, declared", [
    ('def get_name():\n    """Its name."""\n    return "jedi-net"\n', "jedi-net"),
    ("def get_name():\n    return 'mnist'\n", "mnist"),
    ("import os\ndef get_name():\n    return os.environ['X']\n", None),  # computed: only running it knows
    ("def get_model():\n    return None\n", None),
    ("def get_name(:\n", None),
])
def test_the_submitting_side_reads_a_literal_get_name_without_running_the_module(tmp_path, source, declared):
    path = tmp_path / "m.py"
    path.write_text(source + "\nraise SystemExit('the submitting side must not run me')\n")
    assert declared_name(path) == declared
    assert run_name(str(path), import_module=False) == (declared or "m")
    assert run_name(str(path), "given", import_module=False) == "given"
