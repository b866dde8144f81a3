"""Resource monitor: a daemon thread per rank sampling CPU %, resident memory and the GPU.

CPU and memory come from psutil for this process (CPU % is per core: 100 = one core busy, a rank with
four busy threads shows 400). The GPU comes from NVML through ``nvidia-ml-py`` (``import pynvml``) when the
library, a driver and a device are present; otherwise the monitor records ``"no GPU"`` instead of failing:
CPU-only nodes and laptops are normal places to run.

Samples are aggregated per epoch (:meth:`Monitor.epoch_end`, merged by the runtime into the history) and
over the whole run (:meth:`Monitor.totals`, part of the time summary). With a tracer, every sample is also
a counter event, drawn as a graph under the rank in the timeline.
"""
from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import psutil

from nnlo.errors import ConfigError
from nnlo.observe.trace import Tracer

log = logging.getLogger("nnlo.observe")

NO_GPU = "no GPU"


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return psutil.cpu_count() or 1


class Gpu:
    """The NVML view of one device; :func:`open_gpu` returns None where there is none."""

    def __init__(self, nvml: Any, handle: Any, index: int) -> None:
        self._nvml, self._handle, self.index = nvml, handle, index
        name = nvml.nvmlDeviceGetName(handle)
        self.name = name.decode() if isinstance(name, bytes) else str(name)

    def sample(self) -> tuple[float, float]:
        """(utilisation %, device memory used in MB)."""
        util = self._nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu
        mem = self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used / 2**20
        return float(util), float(mem)


def visible_gpu_index(env: Mapping[str, str] | None = None, cuda_index: int = 0) -> int:
    """The NVML index of CUDA device ``cuda_index`` (as torch numbers it: among the visible devices).

    NVML ignores CUDA_VISIBLE_DEVICES and numbers every device of the node, so ``cuda:1`` under
    ``CUDA_VISIBLE_DEVICES=4,5`` is NVML device 5. UUID entries, a short list and an unset variable fall
    back to ``cuda_index`` itself.
    """
    variables = os.environ if env is None else env
    visible = [v.strip() for v in variables.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if cuda_index < len(visible) and visible[cuda_index].isdigit():
        return int(visible[cuda_index])
    return cuda_index


def cuda_index_of(device: str) -> int | None:
    """``"cuda:2"`` -> 2, ``"cuda"`` -> 0, ``"cpu"`` -> None."""
    if not device.startswith("cuda"):
        return None
    _, _, index = device.partition(":")
    return int(index) if index.isdigit() else 0


def open_gpu(index: int | None = None) -> Gpu | None:
    """NVML handle for this rank's GPU, or None (no nvidia-ml-py, no driver, no device): never raises."""
    try:
        import pynvml  # lazy: nvidia-ml-py, the gpu extra
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        if count < 1:
            return None
        index = visible_gpu_index() if index is None else index
        handle = pynvml.nvmlDeviceGetHandleByIndex(min(index, count - 1))
        return Gpu(pynvml, handle, index)
    except Exception as e:  # noqa: BLE001 - pynvml.NVMLError and its many subclasses, or a broken driver install
        log.debug("monitor: no GPU through NVML (%s)", e)
        return None


@dataclass
class _Window:
    cpu: list[float] = field(default_factory=list)
    rss: list[float] = field(default_factory=list)
    gpu_util: list[float] = field(default_factory=list)
    gpu_mem: list[float] = field(default_factory=list)

    def add(self, cpu: float, rss: float, gpu: tuple[float, float] | None) -> None:
        self.cpu.append(cpu)
        self.rss.append(rss)
        if gpu is not None:
            self.gpu_util.append(gpu[0])
            self.gpu_mem.append(gpu[1])

    def aggregate(self, has_gpu: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"samples": len(self.cpu)}
        if self.cpu:
            out["cpu_percent_mean"] = round(sum(self.cpu) / len(self.cpu), 1)
            out["cpu_percent_max"] = round(max(self.cpu), 1)
            out["rss_mb_max"] = round(max(self.rss), 1)
        if has_gpu and self.gpu_util:
            out["gpu_util_mean"] = round(sum(self.gpu_util) / len(self.gpu_util), 1)
            out["gpu_util_max"] = round(max(self.gpu_util), 1)
            out["gpu_mem_mb_max"] = round(max(self.gpu_mem), 1)
        elif not has_gpu:
            out["gpu"] = NO_GPU
        return out


class Monitor:
    """Samples this process every ``interval`` seconds on a daemon thread until :meth:`stop`.

    A sample is also taken at every :meth:`epoch_end`, so even an epoch shorter than the interval has one.
    The thread never raises into the run: a failing sample is logged once and skipped.
    """

    def __init__(self, interval: float = 1.0, tracer: Tracer | None = None, gpu: Gpu | bool | None = True) -> None:
        if interval <= 0:
            raise ConfigError(f"monitor interval must be positive, got {interval}; use e.g. 1.0 (seconds)")
        self.interval = interval
        self.tracer = tracer
        self.gpu: Gpu | None = open_gpu() if gpu is True else (gpu or None)
        self._proc = psutil.Process()
        self._proc.cpu_percent(None)  # the first call only starts the measurement
        self._cpu_ceiling = 100.0 * _usable_cores()
        self._lock = threading.Lock()
        self._epoch = _Window()
        self._total = _Window()
        self._stop = threading.Event()
        self._warned = False
        self._thread = threading.Thread(target=self._run, name="nnlo-monitor", daemon=True)
        self._thread.start()

    @property
    def gpu_name(self) -> str:
        return self.gpu.name if self.gpu is not None else NO_GPU

    def sample(self) -> None:
        """Take one sample now (also called by the thread)."""
        try:
            # CPU times tick every 10 ms: over short intervals the ratio jitters past what the cores allow
            cpu = min(float(self._proc.cpu_percent(None)), self._cpu_ceiling)
            rss = self._proc.memory_info().rss / 2**20
            gpu = self.gpu.sample() if self.gpu is not None else None
        except Exception as e:  # noqa: BLE001 - a vanished device, a psutil race at exit
            if not self._warned:
                self._warned = True
                log.warning("monitor: sample failed (%s); continuing without it", e)
            return
        with self._lock:
            self._epoch.add(cpu, rss, gpu)
            self._total.add(cpu, rss, gpu)
        tracer = self.tracer
        if tracer is not None and tracer.enabled:
            tracer.counter("cpu %", {"cpu": cpu})
            tracer.counter("memory MB", {"rss": round(rss, 1)})
            if gpu is not None:
                tracer.counter("gpu", {"util %": gpu[0], "memory MB": round(gpu[1], 1)})

    def epoch_end(self) -> dict[str, Any]:
        """Aggregates since the previous call (cpu_percent_mean/max, rss_mb_max, gpu_* or gpu="no GPU")."""
        self.sample()
        with self._lock:
            window, self._epoch = self._epoch, _Window()
        return window.aggregate(self.gpu is not None)

    def totals(self) -> dict[str, Any]:
        """Aggregates over the whole run so far."""
        with self._lock:
            out = self._total.aggregate(self.gpu is not None)
        if self.gpu is not None:
            out["gpu_name"] = self.gpu.name
            out["gpu_index"] = self.gpu.index  # NVML's number of the node's GPU: one record per GPU in use
        return out

    def set_device(self, device: str) -> None:
        """Watch the GPU this rank computes on (``"cuda:1"``), or none (``"cpu"``): the runtime picks the
        device after the monitor started, and on a node with several visible GPUs the first guess is
        device 0."""
        index = cuda_index_of(device)
        gpu = open_gpu(visible_gpu_index(cuda_index=index)) if index is not None else None
        with self._lock:
            self.gpu = gpu

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=max(2.0, 2 * self.interval))

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()
