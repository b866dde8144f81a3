"""Where things are and the environment a test's subprocess gets: this venv's programs first on PATH, the
checkout importable, one BLAS thread, unbuffered output."""
from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
RUNTIME_MODELS = REPO / "tests" / "runtime" / "models"
BRANIN = REPO / "examples" / "branin.py"


def tool(name: str) -> str | None:
    """A program from this interpreter's environment first (mpirun, nnlo), else from PATH."""
    local = BIN / name
    return str(local) if local.exists() else shutil.which(name)


def subprocess_env(**extra: str) -> dict[str, str]:
    """This process's environment with this venv first on PATH and the checkout first on PYTHONPATH (so a
    subprocess runs this checkout's code), one BLAS thread (unless set), unbuffered output; ``extra`` on top."""
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = f"{REPO}{os.pathsep}{env.get('PYTHONPATH', '')}".rstrip(os.pathsep)
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def nnlo_argv(*args: str) -> list[str]:
    """The real command line of this checkout: ``python -m nnlo_sched ARGS``."""
    return [sys.executable, "-m", "nnlo_sched", *args]


def error_lines(text: str) -> list[str]:
    """The ``nnlo: error:`` lines of an output."""
    return [ln for ln in text.splitlines() if ln.startswith("nnlo: error:")]


def example(name: str) -> ModuleType:
    """``examples/NAME.py`` imported in this process (its data generators run in-process, no interpreter to
    start): ``example("make_digits").make_digits(folder)``."""
    path = REPO / "examples" / f"{name}.py"
    module_name = f"nnlo_example_{name}"
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name, path)
        assert spec is not None and spec.loader is not None, path
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    return sys.modules[module_name]
