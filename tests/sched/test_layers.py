"""What the import contracts (pyproject.toml, ``lint-imports`` in scripts/test.sh) cannot see.

* No module of nnlo_sched imports another one inside a function: the layers hold at import time, not only in
  the order functions happen to run. A function-level import is only for a heavy dependency kept off the
  command line's start-up (torch, TensorFlow, scikit-optimize, matplotlib, Horovod, submitit, mpi4py, numpy,
  h5py, and nnlo modules that import them) and says so: ``# lazy: <reason>``.
* ``nnlo --help`` and a command's ``--help`` start without those dependencies.
* ``nnlo.optimize`` is the search function while the package's modules import as modules.
"""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SOURCES = sorted((REPO / "nnlo_sched").rglob("*.py"))
HEAVY = ("torch", "tensorflow", "keras", "skopt", "matplotlib", "horovod", "submitit", "mpi4py", "numpy", "h5py")


def function_level_imports(path: Path) -> list[tuple[int, str, str]]:
    """(line, imported module, source line) of every import inside a function of ``path``."""
    text = path.read_text()
    lines = text.splitlines()
    found = []

    def walk(node: ast.AST, inside: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if inside and isinstance(child, (ast.Import, ast.ImportFrom)):
                names = [child.module or ""] if isinstance(child, ast.ImportFrom) else [a.name for a in child.names]
                found.extend((child.lineno, name, lines[child.lineno - 1]) for name in names)
            walk(child, inside or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    walk(ast.parse(text, str(path)), False)
    return found


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(REPO)))
def test_function_level_imports_are_only_lazy_heavy_ones_with_a_reason(path: Path) -> None:
    problems = []
    for line, module, source in function_level_imports(path):
        if module.split(".")[0] == "nnlo_sched":
            problems.append(f"{line}: {module} imported inside a function (import it at the top; a cycle means a "
                            "module sits in the wrong layer)")
        elif "# lazy: " not in source:
            problems.append(f"{line}: {module} imported inside a function without '# lazy: <reason>'")
    assert problems == [], f"{path.relative_to(REPO)}:\n" + "\n".join(problems)


def test_the_scan_sees_imports_inside_functions(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text("import os\n\ndef f():\n    from nnlo_sched import spec\n    g = lambda: __import__('x')\n"
                    "    import numpy  # lazy: numpy\n")
    assert [(ln, m) for ln, m, _ in function_level_imports(path)] == [(4, "nnlo_sched"), (6, "numpy")]


_PROBE = """
import json, sys
from nnlo_sched.cli import cli
try:
    cli.main(args=sys.argv[1:], prog_name="nnlo", standalone_mode=False)
except SystemExit:
    pass
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {heavy!r})), file=sys.stderr)
"""


@pytest.mark.slow  # a fresh interpreter: what a process imports
@pytest.mark.parametrize("argv", [["--help"], ["train", "--help"], ["optimize", "--help"], ["submit", "--help"],
                                  ["status", "--help"]])
def test_help_starts_without_heavy_dependencies(argv: list[str]) -> None:
    # a command's options are the run's typed options, whose search schedules (nnlo.optimize.schedules) import
    # numpy; nnlo --help itself imports no command
    heavy = set(HEAVY) - ({"numpy"} if argv != ["--help"] else set())
    proc = subprocess.run([sys.executable, "-c", _PROBE.format(heavy=heavy), *argv], capture_output=True,
                          text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert "Usage: nnlo" in proc.stdout
    assert json.loads(proc.stderr.strip().splitlines()[-1]) == []


@pytest.mark.slow
def test_nnlo_help_imports_no_command_module() -> None:
    code = ("import sys; from nnlo_sched.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.startswith('nnlo_sched.')), file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.stderr.strip().splitlines()[-1] == "['nnlo_sched.cli']", proc.stderr
    listed = [line.split()[0] for line in proc.stdout.split("Commands:")[1].splitlines() if line.strip()]
    assert "submit" in listed and "run" not in listed and "job" not in listed  # the internal ones are not listed


@pytest.mark.slow
def test_nnlo_optimize_is_the_search_function_and_its_package_imports() -> None:
    code = ("import sys, nnlo\nprint('nnlo.optimize.space' in sys.modules)\n"
            "import nnlo.optimize.options\nfrom nnlo.optimize.options import SearchConfig\n"
            "import nnlo.api\nassert nnlo.optimize is nnlo.api.optimize and callable(nnlo.optimize)\n"
            "assert sys.modules['nnlo.optimize'].options.SearchConfig is SearchConfig\n"
            "from nnlo.optimize import Real\nprint(Real.__module__, 'nnlo.optimize.space' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    # the package's own names (the space's dimensions) load on first use (the search options' schedules load
    # the space: PBT perturbs its points)
    assert proc.stdout.split() == ["False", "nnlo.optimize.space", "True"]
