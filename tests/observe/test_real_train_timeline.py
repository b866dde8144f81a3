"""A real `nnlo train --timeline --monitor` run: its trace, summary, history and plots, end to end."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from nnlo.roles import describe
from tests.helpers.observe import load_trace, non_blank_fraction, png_size

pytestmark = [pytest.mark.mpi, pytest.mark.slow]

MODEL = '''
from torch import nn


def get_name():
    return "obs-tiny"


def get_model():
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
'''


def _data(folder: Path) -> tuple[Path, Path]:
    rng = np.random.default_rng(1)
    for name, n in (("train", 64), ("val", 16)):
        y = rng.integers(0, 2, size=n)
        x = (rng.normal(size=(n, 4)) + y[:, None]).astype(np.float32)
        with h5py.File(folder / f"{name}.h5", "w") as f:
            f["features"], f["labels"] = x, np.eye(2, dtype=np.float32)[y]
        (folder / f"{name}.list").write_text(f"{name}.h5\n")
    return folder / "train.list", folder / "val.list"


def test_nnlo_train_with_timeline_and_monitor(tmp_path, mpirun, nnlo_env):
    (tmp_path / "model.py").write_text(MODEL)
    train, val = _data(tmp_path)
    run = tmp_path / "run"
    proc = subprocess.run(
        [mpirun, "-np", "3", sys.executable, "-m", "nnlo_sched", "train", "--model", str(tmp_path / "model.py"),
         "--train", str(train), "--val", str(val), "--epochs", "2", "--batch", "16", "--timeline", "--monitor",
         "--checkpoint", str(run)],
        env=nnlo_env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "where the time went" in proc.stderr
    trace = load_trace(run / "timeline.json")
    events = trace["traceEvents"]
    hierarchy = describe(3)
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {r: f"rank {r} {hierarchy[r].label()}" for r in range(3)}
    cats = {(e["pid"], e["cat"]) for e in events if e["ph"] == "X"}
    assert {(0, "validate"), (0, "io")} <= cats  # validation and the checkpoint on the master
    assert {(1, "compute"), (1, "comm"), (2, "compute"), (2, "comm")} <= cats  # batches and messages
    history = json.loads((run / "history.json").read_text())
    entries = history["history"] if isinstance(history, dict) else history
    assert len(entries) == 2 and all("cpu_percent_mean" in e and "rss_mb_max" in e for e in entries)
    roles = json.loads((run / "time_summary.json").read_text())["roles"]
    assert set(roles) == {"master", "worker"} and roles["worker"]["ranks"] == 2
    assert roles["worker"]["fractions"]["compute"] > 0
    assert sorted(p.name for p in (run / "logs").glob("*.log")) == ["all-ranks.log", "rank-0.log", "rank-1.log",
                                                                     "rank-2.log"]
    plot = subprocess.run([sys.executable, "-m", "nnlo_sched", "plot", str(run)], env=nnlo_env,
                          capture_output=True, text=True, timeout=180)
    assert plot.returncode == 0, plot.stderr
    written = {Path(p).name for p in plot.stdout.split()}
    assert {"loss.png", "metrics.png", "utilisation.png"} <= written
    for name in written:
        w, h = png_size(run / "plots" / name)
        assert w >= 400 and h >= 250 and non_blank_fraction(run / "plots" / name) > 0.01
