"""The per-role time summary and the session's lifecycle without MPI."""
from __future__ import annotations

import json
import time

import pytest

from nnlo.observe import session as observe
from nnlo.observe import summary
from nnlo.observe.trace import Tracer, get_tracer


def test_rank_summaries_combine_per_role_weighted_by_wall_time():
    ranks = [
        summary.rank_summary(0, "coordinator", 10.0, {"wait": 9.0}),
        summary.rank_summary(1, "b0:master:m0", 10.0, {"comm": 4.0, "compute": 1.0}),
        summary.rank_summary(2, "b0:worker:w0", 10.0, {"compute": 6.0, "comm": 2.0}),
        summary.rank_summary(3, "b0:worker:w1", 30.0, {"compute": 6.0, "wait": 20.0, "custom": 1.0}, startup_s=4.5),
    ]
    assert ranks[3]["fractions"]["other"] == pytest.approx(4 / 30, abs=1e-3)
    roles = summary.by_role(ranks)
    assert list(roles) == ["coordinator", "master", "worker"]
    assert roles["worker"]["ranks"] == 2 and roles["worker"]["startup_s"] == 4.5
    assert roles["worker"]["fractions"]["compute"] == pytest.approx(12 / 40)
    assert roles["worker"]["fractions"]["wait"] == pytest.approx(20 / 40)
    table = summary.format_table(roles)
    worker_row = next(line for line in table.splitlines() if line.startswith("worker "))
    assert worker_row.split()[1:5] == ["2", "30.0%", "5.0%", "50.0%"]  # ranks, compute, comm, wait


def test_session_lifecycle_writes_summary_and_restores_the_tracer(tmp_path):
    before = get_tracer()
    s = observe.start(tmp_path, 0, "b0:master:m0", timeline=False, monitor=True, monitor_interval=0.05,
                      world_size=1, console=False)
    assert get_tracer() is s.tracer and get_tracer().enabled
    with get_tracer().span("work", "compute"):
        time.sleep(0.02)
    epoch = s.epoch_end(1)
    assert "cpu_percent_mean" in epoch and "samples" not in epoch
    mine = s.summary()
    assert mine["kind"] == "master" and mine["seconds"]["compute"] >= 0.02 and "monitor" in mine
    s.close()
    s.close()  # idempotent
    assert get_tracer() is before
    combined = json.loads((tmp_path / "time_summary.json").read_text())
    assert combined["roles"]["master"]["ranks"] == 1
    assert not (tmp_path / "trace").exists()  # no --timeline, no trace files


def test_everything_off_is_the_no_op_tracer(tmp_path):
    s = observe.start(None, 3, "worker", console=False)
    assert type(get_tracer()) is Tracer and s.epoch_end(1) == {} and s.summary() == {}
    s.close()


def test_timeline_without_an_output_dir_and_a_bad_level_are_one_line_errors():
    from nnlo.errors import ConfigError

    with pytest.raises(ConfigError, match="--timeline needs an output directory"):
        observe.start(None, 0, "master", timeline=True)
    with pytest.raises(ConfigError, match="--log-level"):
        observe.start(None, 0, "master", log_level="loud")


def test_an_unwritable_output_dir_is_a_one_line_error(tmp_path):
    from nnlo.errors import ConfigError

    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(ConfigError, match="cannot write the logs of rank 2 under .*writable output directory"):
        observe.start(blocker / "run", 2, "worker", console=False)
