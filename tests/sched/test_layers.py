"""What the import contracts (pyproject.toml, ``lint-imports`` in scripts/test.sh) cannot see.

* No module of nnlo_sched imports another one inside a function: the layers hold at import time, not only in
  the order functions happen to run. A function-level import is only for a heavy dependency kept off the
  command line's start-up (torch, TensorFlow, scikit-optimize, matplotlib, Horovod, submitit, mpi4py, numpy,
  h5py, and nnlo modules that import them) and says so: ``# lazy: <reason>``.
* The runtime (nnlo) keeps the same rule: a module of nnlo imports another one inside a function only when that
  one brings a heavy dependency the importer does not import already (read from the modules' top-level
  imports), and says so with ``# lazy: <reason>``.
* ``nnlo --help`` and a command's ``--help`` start without those dependencies.
* ``nnlo.optimize`` is the search function while the package's modules import as modules.
"""
from __future__ import annotations

import ast
import functools
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SOURCES = sorted((REPO / "nnlo_sched").rglob("*.py"))
HEAVY = ("torch", "tensorflow", "keras", "skopt", "matplotlib", "horovod", "submitit", "mpi4py", "numpy", "h5py")
#: what a runtime module keeps off its importers' start-up besides HEAVY: the optional extras
RUNTIME_HEAVY = (*HEAVY, "mlflow", "tensorboard", "google", "pynvml", "psutil", "threadpoolctl")
RUNTIME_SOURCES = sorted((REPO / "nnlo").rglob("*.py"))


def function_level_imports(path: Path) -> list[tuple[int, str, str]]:
    """(line, imported module, source lines) of every import inside a function of ``path``."""
    text = path.read_text()
    lines = text.splitlines()
    found = []

    def walk(node: ast.AST, inside: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if inside and isinstance(child, (ast.Import, ast.ImportFrom)):
                names = [child.module or ""] if isinstance(child, ast.ImportFrom) else [a.name for a in child.names]
                source = "\n".join(lines[child.lineno - 1:child.end_lineno])
                found.extend((child.lineno, name, source) for name in names)
            walk(child, inside or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    walk(ast.parse(text, str(path)), False)
    return found


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _top_level_imports(path: Path) -> set[str]:
    """Every module ``path`` imports outside functions and ``if TYPE_CHECKING:`` (``from a import b``: a and
    a.b, whichever is a module)."""
    found: set[str] = set()

    def walk(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                continue
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.Import):
                found.update(a.name for a in child.names)
            elif isinstance(child, ast.ImportFrom) and not child.level:
                found.add(child.module or "")
                found.update(f"{child.module}.{a.name}" for a in child.names)
            walk(child)

    walk(ast.parse(path.read_text(), str(path)))
    return found


@functools.cache
def _heavy_closures() -> dict[str, set[str]]:
    """For every module of nnlo: the heavy packages importing it imports (its top-level imports, their
    packages' ``__init__``, transitively)."""
    modules = {_module_name(p): p for p in RUNTIME_SOURCES}
    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = {name.rsplit(".", i)[0] for i in range(1, name.count(".") + 1)}  # its packages run first
        for imported in _top_level_imports(path):
            parts = imported.split(".")
            targets.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
        edges[name] = targets - {name}
    closures: dict[str, set[str]] = {}
    for name in modules:
        seen, todo = {name}, [name]
        while todo:
            for target in edges.get(todo.pop(), ()):
                if target not in seen:
                    seen.add(target)
                    todo.append(target)
        closures[name] = {m.split(".")[0] for m in seen} & set(RUNTIME_HEAVY)
    return closures


def _imported_module(module: str, closures: dict[str, set[str]]) -> str:
    """The longest prefix of ``module`` that is a module of nnlo."""
    while module not in closures and "." in module:
        module = module.rsplit(".", 1)[0]
    return module


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


@pytest.mark.parametrize("path", RUNTIME_SOURCES,
                         ids=lambda p: str(p.relative_to(REPO)))
def test_runtime_imports_its_own_modules_inside_a_function_only_for_a_heavy_dependency(path: Path) -> None:
    closures = _heavy_closures()
    own = closures[_module_name(path)]
    problems = []
    for line, module, source in function_level_imports(path):
        names = [module]
        if module.split(".")[0] == "nnlo":  # from nnlo.x import y: y may be the module
            tree = ast.parse(source.strip())
            names += [f"{module}.{a.name}" for a in getattr(tree.body[0], "names", [])]
            target = max((_imported_module(n, closures) for n in names), key=len)
            brings = closures.get(target, set()) - own
            if not brings:
                problems.append(f"{line}: {target} imported inside a function, but it brings no heavy dependency "
                                "this module lacks (import it at the top; a cycle means a module sits in the "
                                "wrong layer)")
                continue
        if "# lazy: " not in source:
            problems.append(f"{line}: {module} imported inside a function without '# lazy: <reason>'")
    assert problems == [], f"{path.relative_to(REPO)}:\n" + "\n".join(problems)


def test_the_runtime_scan_tells_a_heavy_import_from_a_light_one() -> None:
    closures = _heavy_closures()
    assert "h5py" in closures["nnlo.data.h5dataset"] and "h5py" in closures["nnlo.data.lists"]  # via the package
    assert closures["nnlo.contract"] == set() and "numpy" not in closures["nnlo.config"]


#: The runtime's surface for the orchestration side: what nnlo_sched may import (with its submodules)
RUNTIME_SURFACE = {
    "nnlo", "nnlo.contract", "nnlo.errors", "nnlo.roles", "nnlo.config", "nnlo.optimize.options", "nnlo.api",
    "nnlo.job", "nnlo.checkpoint", "nnlo.models", "nnlo.device", "nnlo.atomic", "nnlo.stop", "nnlo.script_stop", "nnlo.abort",
    "nnlo.rankfate", "nnlo.observe", "nnlo.observe.logs", "nnlo.observe.timeline", "nnlo.observe.summary",
    "nnlo.observe.plots", "nnlo.observe.tracking", "nnlo.data", "nnlo.data.check", "nnlo.data.lists",
    "nnlo.optimize", "nnlo.optimize.space", "nnlo.optimize.surrogate_plot", "nnlo.optimize.journal",
}


def _covered(module: str, names: set[str]) -> bool:
    return any(module == n or module.startswith(n + ".") for n in names)


def test_every_runtime_module_is_surface_or_forbidden_to_the_orchestration() -> None:
    """A new module of nnlo is either a seam nnlo_sched may import (RUNTIME_SURFACE, docs/architecture.md) or
    one of the internals the ``runtime-surface`` contract forbids it (pyproject.toml)."""
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    forbidden = set(next(c for c in contracts if c["id"] == "runtime-surface")["forbidden_modules"])
    modules = {_module_name(p) for p in RUNTIME_SOURCES}
    neither = sorted(m for m in modules if not _covered(m, forbidden) and m not in RUNTIME_SURFACE
                     and not _covered(m, {"nnlo.observe.plots", "nnlo.observe.tracking"}))
    both = sorted(m for m in RUNTIME_SURFACE if _covered(m, forbidden))
    assert (neither, both) == ([], [])


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
