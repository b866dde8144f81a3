"""The resource monitor: values in range, per-epoch windows, counters into the trace, "no GPU" on CPU nodes."""
from __future__ import annotations

import time

import psutil
import pytest

from nnlo.observe import monitor as mon
from nnlo.observe.timeline import RecordingTracer, read_stream, trace_path


def _burn(cpu_seconds: float) -> None:
    """Use this much CPU time (not wall time: the machine is shared, a busy one stretches the burn)."""
    end = time.process_time() + cpu_seconds
    x = 0
    while time.process_time() < end:
        x += 1


def test_samples_are_in_range_and_windows_reset_per_epoch(tmp_path):
    tracer = RecordingTracer(trace_path(tmp_path, 0), 0, "master")
    m = mon.Monitor(interval=0.02, tracer=tracer)
    try:
        _burn(0.3)
        first = m.epoch_end()
        second = m.epoch_end()  # an epoch shorter than the interval still has its own sample
    finally:
        m.stop()
        tracer.close()
    cores = psutil.cpu_count() or 1
    total_mb = psutil.virtual_memory().total / 2**20
    assert first["samples"] >= 2 and second["samples"] >= 1
    for agg in (first, second):
        assert 0.0 <= agg["cpu_percent_mean"] <= agg["cpu_percent_max"] <= 100.0 * cores + 1
        assert 1.0 < agg["rss_mb_max"] < total_mb
    assert first["cpu_percent_max"] > 1.0  # we burnt 0.3 s of CPU
    if m.gpu is None:
        assert first["gpu"] == mon.NO_GPU and "gpu_util_mean" not in first
        assert m.gpu_name == "no GPU"
    else:
        assert 0.0 <= first["gpu_util_mean"] <= 100.0 and first["gpu_mem_mb_max"] > 0
    totals = m.totals()
    assert totals["samples"] >= first["samples"] + second["samples"]  # the thread may sample once more before stop
    counters = [e for e in read_stream(tracer.path).events if e["ph"] == "C"]
    assert {"cpu %", "memory MB"} <= {e["name"] for e in counters}
    assert all(0 <= e["args"]["cpu"] <= 100.0 * cores + 1 for e in counters if e["name"] == "cpu %")
    assert not m._thread.is_alive()


def test_gpu_lookup_never_raises_and_reads_cuda_visible_devices():
    gpu = mon.open_gpu()
    assert gpu is None or isinstance(gpu.name, str)
    assert mon.visible_gpu_index({"CUDA_VISIBLE_DEVICES": "3,4"}) == 3
    assert mon.visible_gpu_index({"CUDA_VISIBLE_DEVICES": "3,4"}, cuda_index=1) == 4
    assert mon.visible_gpu_index({"CUDA_VISIBLE_DEVICES": "10,11,12"}, cuda_index=2) == 12
    assert mon.visible_gpu_index({"CUDA_VISIBLE_DEVICES": "GPU-8f2e"}) == 0
    assert mon.visible_gpu_index({}, cuda_index=5) == 5
    assert mon.cuda_index_of("cuda:3") == 3 and mon.cuda_index_of("cuda") == 0 and mon.cuda_index_of("cpu") is None
    m = mon.Monitor(interval=10, gpu=False)
    try:
        m.set_device("cpu")
        assert m.gpu is None and m.epoch_end()["gpu"] == mon.NO_GPU
        m.set_device("cuda:0")  # no NVML here: still "no GPU"; with a GPU, that device
        assert m.gpu is None or m.gpu.index == mon.visible_gpu_index()
    finally:
        m.stop()


def test_bad_interval_is_a_one_line_config_error():
    from nnlo.errors import ConfigError

    with pytest.raises(ConfigError, match="interval must be positive"):
        mon.Monitor(interval=0)


def test_gpu_samples_aggregate_per_epoch_and_per_role():
    # the aggregation a GPU node takes (NVML itself needs a device, which this machine lacks)
    window = mon._Window()
    for util, mem in ((10.0, 1000.0), (90.0, 1500.0)):
        window.add(50.0, 300.0, (util, mem))
    epoch = window.aggregate(has_gpu=True)
    assert epoch["gpu_util_mean"] == 50.0 and epoch["gpu_util_max"] == 90.0 and epoch["gpu_mem_mb_max"] == 1500.0
    assert "gpu" not in epoch
    from nnlo.observe import summary

    ranks = [dict(summary.rank_summary(r, f"b0:worker:w{r}", 10.0, {"compute": 5.0}), monitor=epoch)
             for r in (1, 2)]
    ranks.append(dict(summary.rank_summary(0, "b0:master:m0", 10.0, {"comm": 5.0}),
                      monitor=mon._Window().aggregate(has_gpu=False) | {"cpu_percent_mean": 20.0}))
    roles = summary.by_role(ranks)
    assert roles["worker"]["monitor"]["gpu_util_mean"] == 50.0 and roles["master"]["monitor"]["gpu"] == "no GPU"
    table = summary.format_table(roles)
    assert "gpu 50% mean, 1500 MB max" in table and "no GPU" in table
