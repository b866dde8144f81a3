"""What this rank's hardware is (:class:`~.hardware.RankFacts`): read once at a search's start on every rank.

Cheap and import-light: the node's memory from ``sysconf``, the GPUs from ``CUDA_VISIBLE_DEVICES`` and, where
the ``gpu`` extra is installed, NVML (count, memory and name) - never torch, which a synthetic objective does
not need. ``$NNLO_NODE_TYPE`` names the node type where a site sets it (say ``daint-gpu``); else it is the CPU
model, with the GPU's name when there is one.
"""
from __future__ import annotations

import contextlib
import os
import platform
import socket
from typing import Any

from nnlo.contract import ENV_NODE_TYPE
from nnlo.optimize.placement.hardware import RankFacts


def rank_facts(needs_device: bool, environ: Any = None) -> RankFacts:
    env = os.environ if environ is None else environ
    gpus, gpu_mem, gpu_name = _gpus(env)
    node = str(env.get(ENV_NODE_TYPE, "")).strip() or _cpu_model() + (f" + {gpu_name}" if gpu_name else "")
    return RankFacts(socket.gethostname(), node, gpus, gpu_mem, _host_memory_gb(), bool(needs_device))


def _host_memory_gb() -> float | None:
    try:
        return round(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2 ** 30, 1)
    except (ValueError, OSError, AttributeError):
        return None


def _cpu_model() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return " ".join(line.split(":", 1)[1].split())

    return platform.processor() or platform.machine() or "cpu"


def _gpus(env: Any) -> tuple[int, float | None, str | None]:
    """(GPUs visible, memory of the first in GiB, its name); memory and name only through NVML."""
    visible = env.get("CUDA_VISIBLE_DEVICES")
    listed: int | None = None
    if visible is not None:
        entries = [v for v in visible.split(",") if v.strip() and v.strip() not in ("-1", "NoDevFiles")]
        listed = len(entries)
        if not entries:
            return 0, None, None
    try:
        import pynvml  # lazy: nvidia-ml-py, the gpu extra

        pynvml.nvmlInit()
        try:
            count = int(pynvml.nvmlDeviceGetCount())
            if count == 0:
                return 0, None, None
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            memory = round(float(pynvml.nvmlDeviceGetMemoryInfo(handle).total) / 2 ** 30, 1)
            name = pynvml.nvmlDeviceGetName(handle)
            name = name.decode() if isinstance(name, bytes) else str(name)
            return (count if listed is None else min(listed, count)), memory, name
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no NVML (no extra, no driver): what the environment says is all we know
        return listed or 0, None, None
