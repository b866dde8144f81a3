"""`nnlo plot`: real PNG files of sensible size with something drawn, from files in the shapes runs write."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from nnlo.observe import plots
from nnlo.observe.plots import common as plots_common
from nnlo.observe.timeline import RecordingTracer, trace_path
from tests.helpers.observe import non_blank_fraction, png_size


def _history(path, epochs=6, keys=("train_loss", "val_loss", "val_accuracy", "samples_per_s")):
    rows = []
    for e in range(1, epochs + 1):
        row = {"epoch": e, "train_loss": 2.0 / e, "val_loss": 2.2 / e, "val_accuracy": 1 - 1 / (e + 1),
               "samples_per_s": 900.0 + 10 * e, "cpu_percent_mean": 55.0, "gpu": "no GPU"}
        rows.append({k: v for k, v in row.items() if k == "epoch" or k in keys or k in ("gpu",)})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rows))


def _trials(run):
    trials = []
    for i in range(10):
        ok = i != 4
        trials.append({"id": i, "params": {"lr": 10 ** (-4 + i * 0.3), "units": 16 * (i % 3 + 1),
                                           "activation": ["relu", "tanh"][i % 2]},
                       "status": "ok" if ok else "failed", "fom": (0.5 + ((i * 7) % 5) / 10) if ok else None,
                       "fom_std": 0.02, "fold_foms": [], "duration_s": 3.0, "block": i % 2,
                       "error": None if ok else "fold 0: diverged"})
    (run / "trials.json").write_text(json.dumps(trials))
    (run / "best.json").write_text(json.dumps({"fom_name": "val_loss", "direction": "min", "best_trial": 0}))


def _optimizer_state(run):
    space = {"lr": {"type": "real", "low": 1e-4, "high": 1.0, "prior": "log-uniform"},
             "units": {"type": "integer", "low": 16, "high": 48, "prior": "uniform"},
             "activation": {"type": "categorical", "values": ["relu", "tanh"]}}
    (run / "optimizer-state.json").write_text(json.dumps({"version": 1, "space": space,
                                                          "objective": {"name": "val_loss", "direction": "min"}}))


def _trace(run):
    for rank, role in ((0, "b0:master:m0"), (1, "b0:worker:w0")):
        t = RecordingTracer(trace_path(run, rank), rank, role)
        for _ in range(3):
            with t.span("step", "compute" if rank else "wait"):
                with t.span("send", "comm"):
                    pass
        t.close()


def _check_png(path, min_w=400, min_h=250):
    w, h = png_size(path)
    assert min_w <= w <= 4000 and min_h <= h <= 4000, (path, w, h)
    assert non_blank_fraction(path) > 0.01, f"{path} looks blank"


@pytest.mark.slow
def test_nnlo_plot_writes_every_kind_of_plot(tmp_path, nnlo_env):
    run = tmp_path / "run"
    _history(run / "history.json")
    _trials(run)
    _optimizer_state(run)
    _trace(run)
    proc = subprocess.run([sys.executable, "-m", "nnlo_sched", "plot", str(run), "--out", str(tmp_path / "png")],
                          env=nnlo_env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    written = {p.rsplit("/", 1)[-1] for p in proc.stdout.split()}
    assert written == {"loss.png", "metrics.png", "convergence.png", "parameters.png", "objective.png",
                       "utilisation.png"}
    for name in written:
        _check_png(tmp_path / "png" / name)


@pytest.mark.slow
def test_missing_keys_are_tolerated_and_nothing_to_plot_is_a_one_line_error(tmp_path, nnlo_env):
    run = tmp_path / "only-val"
    _history(run / "history.json", keys=("val_loss",))
    out = plots.plot_run(run, tmp_path / "png")
    assert [p.name for p in out] == ["loss.png"]  # no other numeric series -> no metrics.png
    _check_png(out[0])
    # a history that is not a list, trials that all failed: nothing drawn, nothing raised
    (run / "history.json").write_text('{"oops": 1}')
    (run / "trials.json").write_text(json.dumps([{"id": 0, "status": "failed", "fom": None, "params": {}}]))
    assert plots.plot_run(run, tmp_path / "png2") == []
    proc = subprocess.run([sys.executable, "-m", "nnlo_sched", "plot", str(run)], env=nnlo_env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "nothing to plot" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_per_trial_histories_get_their_own_prefixed_plots(tmp_path):
    run = tmp_path / "opt"
    for trial in ("trial-0", "trial-1"):
        _history(run / trial / "history.json", epochs=3)
    names = sorted(p.name for p in plots.plot_run(run))
    assert names == ["trial-0-loss.png", "trial-0-metrics.png", "trial-1-loss.png", "trial-1-metrics.png"]
    assert (run / "plots" / "trial-0-loss.png").is_file()


@pytest.mark.parametrize("direction,expected_best", [("min", 0.5), ("max", 0.9)])
def test_convergence_respects_the_direction(tmp_path, direction, expected_best, monkeypatch):
    seen = {}
    real_step = plots_common.plt.Axes.step

    def spy(self, x, y, *a, **k):
        seen["best"] = y[-1]
        return real_step(self, x, y, *a, **k)

    monkeypatch.setattr(plots_common.plt.Axes, "step", spy)
    trials = [{"id": i, "params": {"x": i}, "status": "ok", "fom": f} for i, f in enumerate([0.7, 0.5, 0.9, 0.6])]
    plots.plot_trials(trials, tmp_path, direction)
    assert seen["best"] == expected_best


@pytest.mark.parametrize("foms, scale", [([310.0, 40.0, 5.2, 0.9, 0.41], "log"),  # Branin: decades
                                         ([0.7, 0.5, 0.9, 0.6], "linear"), ([3.0, -1.0, 200.0], "linear")])
def test_convergence_uses_a_log_axis_when_the_fom_spans_decades(tmp_path, foms, scale, monkeypatch):
    from nnlo.observe.plots import trials as trial_plots

    scales = {}
    real_save = trial_plots.save

    def spy(fig, path):
        scales[path.name] = fig.axes[0].get_yscale()
        return real_save(fig, path)

    monkeypatch.setattr(trial_plots, "save", spy)
    plots.plot_trials([{"id": i, "params": {"x": i}, "status": "ok", "fom": f} for i, f in enumerate(foms)], tmp_path)
    assert scales["convergence.png"] == scale


def test_an_optimization_run_gets_all_trial_curves_in_one_figure(tmp_path):
    run = tmp_path / "opt"
    for trial in ("0000", "0001", "0002"):
        _history(run / "trials" / trial / "fold-0" / "history.json", epochs=4)
    _trials(run)
    names = sorted(p.name for p in plots.plot_run(run))
    assert names == ["convergence.png", "parameters.png", "trial-curves.png"]
    _check_png(run / "plots" / "trial-curves.png")


@pytest.mark.slow
def test_an_unknown_run_is_a_clear_usage_error(tmp_path, nnlo_env):
    env = {**nnlo_env, "NNLO_HOME": str(tmp_path)}
    for command in ("plot", "timeline"):
        proc = subprocess.run([sys.executable, "-m", "nnlo_sched", command, "no-such-run"], env=env,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert "Invalid value for RUN_OR_DIR" in proc.stderr and "no-such-run" in proc.stderr


def test_one_failing_plot_does_not_cost_the_others(tmp_path, monkeypatch):
    import nnlo.observe.plots as package

    run = tmp_path / "run"
    _history(run / "history.json")
    _trials(run)

    def broken(*args, **kwargs):
        raise RuntimeError("matplotlib corner case")

    monkeypatch.setattr(package, "plot_history", broken)
    problems: list[str] = []
    written = plots.plot_run(run, tmp_path / "png", problems)
    assert sorted(p.name for p in written) == ["convergence.png", "parameters.png"]
    assert len(problems) == 1 and "RuntimeError: matplotlib corner case" in problems[0]


def test_utilisation_from_a_merged_trace_when_the_rank_files_are_gone(tmp_path):
    import shutil

    from nnlo.observe import timeline

    run = tmp_path / "run"
    _trace(run)
    timeline.merge(run / "trace")
    shutil.rmtree(run / "trace")
    streams = plots.streams_from_trace_json(run / "timeline.json")
    assert [s.rank for s in streams] == [0, 1] and streams[1].role == "b0:worker:w0" and len(streams[0].spans) == 6
    written = plots.plot_run(run, tmp_path / "png")
    assert [p.name for p in written] == ["utilisation.png"]
    _check_png(written[0])


def _staged_trials(run):
    """An ASHA-like search (rungs at 1, 3, 9 epochs) and a PBT child (trial 5 from trial 1's checkpoint)."""
    trials = []
    for i, top in enumerate([0, 2, 0, 1, 0]):
        rungs = [{"rung": r, "epochs": 3 ** r, "status": "ok", "fom": 2.0 / (r + 1) + 0.1 * i} for r in range(top + 1)]
        trials.append({"id": i, "params": {"lr": 0.01 * (i + 1), "width": 32}, "status": "ok",
                       "fom": rungs[-1]["fom"], "epochs": 3 ** top, "rung": top, "rungs": rungs})
    child = {"id": 5, "params": {"lr": 0.016, "width": 32}, "status": "ok", "fom": 0.5, "epochs": 9, "rung": 2,
             "parent": 1, "replaces": 3, "start_epochs": 3,
             "rungs": [{"rung": 2, "epochs": 9, "status": "ok", "fom": 0.5}]}
    (run / "trials.json").write_text(json.dumps([*trials, child]))
    (run / "best.json").write_text(json.dumps({"fom_name": "val_loss", "direction": "min", "best_trial": 5}))


def test_a_scheduled_search_draws_its_rungs_and_lineage(tmp_path):
    _staged_trials(tmp_path)
    for i in (1, 3):  # two trials' histories: trial 3 was stopped early, its curve is marked
        _history(tmp_path / "trials" / f"{i:04d}" / "fold-0" / "history.json", epochs=3 ** (i // 2 + 1))
    written = {p.name: p for p in plots.plot_run(tmp_path, tmp_path / "out")}
    assert {"rungs.png", "lineage.png", "trial-curves.png"} <= set(written)
    for name in ("rungs.png", "lineage.png"):
        assert png_size(written[name])[0] > 400 and non_blank_fraction(written[name]) > 0.02
    trials = json.loads((tmp_path / "trials.json").read_text())
    assert plots.fidelity.stopped_early(trials) == {0, 2, 3, 4}  # below 9 epochs, or replaced (3)
    _trials(tmp_path)  # a search without a schedule: neither plot
    assert plots.plot_rungs(json.loads((tmp_path / "trials.json").read_text()), tmp_path / "none") == []
