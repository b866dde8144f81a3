"""Shared plumbing of the nnlo benchmarks: machine description, statistics, MPI self-launch, JSON results.

Why one module: every benchmark must record the same facts about where it ran (cores, CPU model, MPI
library, Python, torch, load average before and after), summarise repeats the same way (median and spread,
never a single best run), and write its result in the same shape, so results from different machines and
days can be compared field by field. ``bench/`` is not an installed package: scripts import this module
from their own folder (``python bench/x.py`` puts ``bench/`` on ``sys.path``).
"""
from __future__ import annotations

import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from nnlo.atomic import write_text

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
RESULTS = BENCH_DIR / "results"
CHILD_ENV = "NNLO_BENCH_CHILD"
SCHEMA = "nnlo-bench-1"


# -- machine --------------------------------------------------------------------------------------------
def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(module: str) -> str | None:
    try:
        mod = __import__(module)
    except Exception:  # noqa: BLE001 - absent or broken: say so, do not fail the benchmark
        return None
    return str(getattr(mod, "__version__", "?"))


def gpu_name() -> str | None:
    """The first visible CUDA device's name and count, or None (no torch, no GPU)."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        return f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}"
    except Exception:  # noqa: BLE001 - absent or broken: say nothing
        return None


def mpi_library() -> str | None:
    try:
        from mpi4py import MPI
    except Exception:  # noqa: BLE001
        return None
    return " ".join(MPI.Get_library_version().strip().splitlines()[0].split())


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def machine(mpi: bool = True) -> dict[str, Any]:
    """Where the numbers come from. ``loadavg`` matters: this may be a shared, busy machine."""
    info: dict[str, Any] = {
        "host": platform.node(),
        "gpu": gpu_name(),
        "cores": os.cpu_count(),
        "cpu_model": cpu_model(),
        "python": platform.python_version(),
        "numpy": _version("numpy"),
        "torch": _version("torch"),
        "os": f"{platform.system()} {platform.release()}",
        "loadavg": list(os.getloadavg()),
        "nnlo_commit": git_commit(),
    }
    if mpi:
        info["mpi_library"] = mpi_library()
        info["mpi4py"] = _version("mpi4py")
    return info


# -- statistics -----------------------------------------------------------------------------------------
def summary(samples: Sequence[float]) -> dict[str, Any]:
    """Median and spread of repeated measurements (seconds or any unit); the raw samples are kept too."""
    xs = sorted(float(x) for x in samples)
    if not xs:
        return {"n": 0}
    q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else [xs[0]] * 3
    return {"n": len(xs), "median": statistics.median(xs), "min": xs[0], "max": xs[-1],
            "p25": q[0], "p75": q[2], "samples": xs}


def timed(fn: Callable[[], Any], repeats: int, warmup: int = 1) -> list[float]:
    """Wall times of ``repeats`` calls of ``fn`` after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def fmt_time(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 1e-3:
        return f"{s * 1e6:.1f} us"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def table(rows: list[list[Any]], header: list[str]) -> str:
    cells = [header] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


# -- launching ------------------------------------------------------------------------------------------
def mpirun() -> str:
    """The MPI launcher beside this Python (the venv's MPICH), else the one on PATH."""
    here = Path(sys.executable).parent / "mpirun"
    return str(here) if here.exists() else "mpirun"


def in_child() -> bool:
    return os.environ.get(CHILD_ENV) == "1"


def relaunch(script: str, np_: int, argv: Sequence[str], timeout: float = 1800) -> int:
    """Run ``script`` again under ``mpirun -np np_`` (the benchmark's ranks) and return its exit code.

    The parent only launches; the ranks measure and rank 0 writes the result. A rank that dies makes
    mpirun end the others, and ``timeout`` bounds the whole run, so a broken benchmark never hangs.
    """
    env = dict(os.environ, **{CHILD_ENV: "1"})
    # one BLAS/OpenMP thread per rank: ranks on the same cores must not oversubscribe them further
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("MKL_NUM_THREADS", "1")
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    # one rank needs no launcher (MPI starts as a singleton): a GPU node without mpirun can still run it
    cmd = [*([mpirun(), "-np", str(np_)] if np_ > 1 else []), sys.executable, script, *argv]
    print("+", " ".join(shlex.quote(c) for c in cmd), flush=True)
    try:
        return subprocess.run(cmd, env=env, timeout=timeout).returncode
    except FileNotFoundError:
        print(f"no {cmd[0]} to start {np_} ranks: install an MPI (pip install mpich) or put mpirun on PATH",
              file=sys.stderr)
        return 127
    except subprocess.TimeoutExpired:
        print(f"benchmark timed out after {timeout:g} s", file=sys.stderr)
        return 124


def rerun_command(name: str, argv: Sequence[str]) -> str:
    return " ".join(["bench/run.sh", name, *(shlex.quote(a) for a in argv)]).strip()


# -- results --------------------------------------------------------------------------------------------
def write_result(name: str, result: dict[str, Any], out: str | None = None, *, argv: Sequence[str] = (),
                 mpi: bool = True, started_load: Sequence[float] | None = None) -> Path:
    """Write ``results/<name>.json`` (or ``out``) with the machine, the rerun command and the load."""
    m = machine(mpi=mpi)
    doc = {
        "schema": SCHEMA,
        "benchmark": name,
        "when_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": rerun_command(name, argv),
        "machine": m,
        "loadavg_start": list(started_load) if started_load is not None else None,
        "loadavg_end": m["loadavg"],
        **result,
    }
    path = Path(out) if out else RESULTS / f"{name}.json"
    write_text(path, json.dumps(doc, indent=1, default=_plain) + "\n")
    print(f"wrote {path}")
    return path


def _plain(value: Any) -> Any:
    try:
        import numpy as np

        if isinstance(value, np.generic):
            return value.item()
        if isinstance(value, np.ndarray):
            return value.tolist()
    except ImportError:
        pass
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON: {type(value).__name__}")
