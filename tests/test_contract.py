"""The runtime-chain contract is complete: every fact it holds is written out only in ``nnlo/contract.py``.

The facts are read from the module itself (every environment variable name, run-folder file and folder name,
log-name pattern and exit code it defines), so a fact added there is enforced here at once. The sources are
scanned, not grepped: Python files through their syntax tree (docstrings are documentation and may name a
fact; every other string, keyword and number is code), templates as text outside their ``{# #}`` comments.
What counts as writing a fact out:

* an environment variable name or a file name anywhere in a string, or as a keyword (``dict(NNLO_JOB_ID=...)``);
* a folder name as a path component (``run / "logs"``, ``"logs/x"``, ``Path(d, "logs")``), not as a word of a
  message or a JSON key;
* a log-name pattern spelled out (``f"job-{id}.out"``);
* an exit code as a number: ``SystemExit(2)``, ``sys.exit(0)``, ``os._exit(1)``, ``exit_code = 2``, an
  ``exit_code`` default, ``exit 1`` in a template;
* a signal as a number: the shell's ``128`` of 128+N, a number given to ``signal.Signals``/``kill``;
* any environment variable name of nnlo's (``NNLO_...``), whether contract.py names it yet or not.

The same scan keeps the defaults written more than once to one owner each (``DEFAULT_OWNERS``): the walltime
(``nnlo_sched/walltime.py``), the deadline's safety margin (``nnlo/contract.py``) and the schedules' defaults
(``nnlo/optimize/schedules/base.py``); a literal given elsewhere to a name that holds one of them (a
parameter's default, a field's, a keyword, a ``--walltime`` option's ``default=``) is a second copy.
"""
from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import nnlo.contract as contract

REPO = Path(__file__).resolve().parents[1]
SOURCES = sorted(p for root in ("nnlo", "nnlo_sched") for p in (REPO / root).rglob("*.py")
                 if p != REPO / "nnlo" / "contract.py")
TEMPLATES = sorted((REPO / "templates").glob("*.sh"))


def _facts() -> tuple[set[str], set[str], set[str], set[int]]:
    """(environment names, file names, folder names, exit codes) that nnlo/contract.py defines."""
    env, files, folders, codes = set(), set(), set(), set()
    for name, value in vars(contract).items():
        if not name.isupper() or name.startswith("_"):
            continue
        if name.startswith("ENV_"):
            env.add(value)
        elif name.startswith("EXIT_"):
            codes.add(value)
        elif isinstance(value, str) and "{" not in value:
            (files if "." in value else folders).add(value)
    return env, files, folders, codes


ENV, FILES, FOLDERS, EXIT_CODES = _facts()
PATTERNS = [re.compile(r"(?<![\w-])" + re.escape(p.split("{")[0]) + r"[^\s/]*" + re.escape(p.split("}")[-1]) + r"\b")
            for p in (contract.JOB_LOG, contract.ARRAY_LOG)]


def test_the_contract_holds_the_facts_this_test_looks_for() -> None:
    """The scan below is only as good as the facts it knows: the well-known ones must be among them."""
    assert {"NNLO_DEADLINE", "NNLO_RUN_DIR", "NNLO_JOB_ID", "NNLO_PARTICIPANT"} <= ENV
    assert {"spec.json", "state.json", "job.sh", "history.json"} <= FILES
    assert {"logs", "chains", "checkpoints", "ranks"} <= FOLDERS
    assert {0, 1, 2, 75} <= EXIT_CODES
    assert "NNLO_WALLTIME_S" not in ENV  # nothing reads it


def _token(fact: str) -> re.Pattern[str]:
    return re.compile(r"(?<![\w.-])" + re.escape(fact) + r"(?![\w-])")


def _string_problem(text: str) -> str | None:
    for fact in sorted(ENV | FILES):
        if _token(fact).search(text):
            return f"{fact!r} written out"
    for folder in sorted(FOLDERS):
        if re.search(rf"(^|/){re.escape(folder)}/|/{re.escape(folder)}$", text):
            return f"folder {folder!r} written out in a path"
    for pattern in PATTERNS:
        if pattern.search(text):
            return f"log name {text!r} written out"
    return None


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _int(node: ast.AST | None) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    return None


def _name(node: ast.AST) -> str:
    """``sys.exit`` for ``sys.exit``, ``SystemExit`` for ``SystemExit``, "" for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _name(node.value)
        return f"{base}.{node.attr}" if base else node.attr
    return ""


_EXITS = {"SystemExit", "sys.exit", "os._exit", "exit", "quit"}
_SIGNALLERS = {"os.kill", "os.killpg", "signal.Signals", "Signals", "send_signal", "proc.send_signal"}
_PATH_CALLS = {"Path", "os.path.join", "joinpath", "PurePath"}


def python_problems(path: Path, root: Path = REPO) -> Iterator[str]:
    tree = ast.parse(path.read_text(), str(path))
    docs = _docstrings(tree)
    for node in ast.walk(tree):
        where = f"{path.relative_to(root)}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            problem = _string_problem(node.value)
            if problem is None and node.value in FOLDERS:
                continue  # a bare word: judged where it is used as a path (below)
            if problem:
                yield f"{where}: {problem}"
        elif isinstance(node, ast.JoinedStr):
            shape = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
            if any(p.search(shape) for p in PATTERNS):
                yield f"{where}: log name {shape!r} written out"
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            for side in (node.left, node.right):
                if isinstance(side, ast.Constant) and side.value in FOLDERS:
                    yield f"{where}: folder {side.value!r} written out in a path"
            if {_int(node.left), _int(node.right)} & {contract.SIGNAL_STATUS_BASE}:
                yield f"{where}: the shell's signal status base written out"
        elif isinstance(node, ast.BinOp) and contract.SIGNAL_STATUS_BASE in (_int(node.left), _int(node.right)):
            yield f"{where}: the shell's signal status base ({contract.SIGNAL_STATUS_BASE}+N) written out"
        elif isinstance(node, ast.Compare) and contract.SIGNAL_STATUS_BASE in {_int(c) for c in
                                                                             (node.left, *node.comparators)}:
            yield f"{where}: the shell's signal status base written out"
        elif isinstance(node, ast.keyword) and node.arg in ENV:
            yield f"{where}: {node.arg!r} written out as a keyword"
        elif isinstance(node, ast.Call):
            name = _name(node.func)
            ints = [_int(a) for a in node.args]
            if name in _EXITS and any(i is not None for i in ints):
                yield f"{where}: exit code written out in {name}(...)"
            if (name in _SIGNALLERS or name.endswith(".send_signal")) and any(i for i in ints):  # 0: "is it alive?"
                yield f"{where}: signal number written out in {name}(...)"
            if name.split(".")[-1] in _PATH_CALLS and any(isinstance(a, ast.Constant) and a.value in FOLDERS
                                                          for a in node.args):
                yield f"{where}: folder written out in {name}(...)"
            lookup = (name == "getattr" and len(node.args) == 3) or (name.endswith(".get") and len(node.args) == 2)
            if lookup and isinstance(node.args[-2], ast.Constant) and node.args[-2].value == "exit_code" \
                    and _int(node.args[-1]) is not None:
                yield f"{where}: exit code written out as the exit_code default"
        elif isinstance(node, ast.Assign) and _int(node.value) is not None and any(
                isinstance(t, ast.Name) and t.id == "exit_code" for t in node.targets):
            yield f"{where}: exit code written out as exit_code = {_int(node.value)}"


def _template_text(path: Path) -> str:
    """The template without its comments (``{# #}`` and the script's own ``# ...`` lines: documentation) and
    with its tags blanked out; directive lines (``#SBATCH ...``) stay."""
    text = re.sub(r"\{#.*?#\}", "", path.read_text(), flags=re.S)
    text = re.sub(r"(?m)^\s*# .*$", "", text)
    return re.sub(r"\{\{.*?\}\}|\{%.*?%\}", " ", text, flags=re.S)


def template_problems(path: Path, root: Path = REPO) -> Iterator[str]:
    for number, line in enumerate(_template_text(path).splitlines(), 1):
        where = f"{path.relative_to(root)}:{number}"
        problem = _string_problem(line)
        for word in re.findall(r"[\w./%*-]+", line):
            problem = problem or _string_problem(word)
        if problem:
            yield f"{where}: {problem}"
        if re.search(r"\bexit\s+\d", line):
            yield f"{where}: exit code written out"
        if re.search(rf"\b{contract.SIGNAL_STATUS_BASE}\b", line) or re.search(r"\bkill\s+-[1-9]", line):
            yield f"{where}: signal number written out"


#: Any environment variable of nnlo's own, named in contract.py or not (a second copy of a name is a fact whose
#: spelling can drift; a name not there yet belongs there).
ENV_NAME = re.compile(r"(?<![\w$])NNLO_[A-Z][A-Z0-9_]*\b")


def env_name_problems(path: Path, root: Path = REPO) -> Iterator[str]:
    """Every environment variable name of nnlo spelled out in code (a template: outside its comments)."""
    if path.suffix == ".sh":
        for number, line in enumerate(_template_text(path).splitlines(), 1):
            for name in ENV_NAME.findall(line):
                yield f"{path.relative_to(root)}:{number}: environment variable {name} written out"
        return
    tree = ast.parse(path.read_text(), str(path))
    docs = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            for name in ENV_NAME.findall(node.value):
                yield f"{path.relative_to(root)}:{node.lineno}: environment variable {name} written out"


#: The defaults with one owner each: the names a parameter, field, variable or option holding one is given, and
#: the module that owns it. A literal given to one of these names elsewhere is a second copy of the default.
DEFAULT_OWNERS = {
    "walltime": ({"walltime", "walltime_s", "default_walltime", "default_walltime_s"}, "nnlo_sched/walltime.py"),
    "safety": ({"safety", "safety_s", "deadline_safety", "deadline_safety_s"}, "nnlo/contract.py"),
    "eta": ({"eta", "reduction_factor", "default_eta"}, "nnlo/optimize/schedules/base.py"),
    "min_epochs": ({"min_epochs", "default_min_epochs"}, "nnlo/optimize/schedules/base.py"),
    "population": ({"population", "pbt_population"}, "nnlo/optimize/schedules/base.py"),
    "pbt_interval": ({"pbt_interval", "interval", "pbt_steps"}, "nnlo/optimize/schedules/base.py"),
}
#: Names that mean other things elsewhere: ``interval`` (a monitor's, a progress line's) is PBT's only in a
#: search; ``population`` in a search engine is the genetic engine's, not PBT's.
_MEANS_IT_IN = {"interval": lambda rel: rel.startswith("nnlo/optimize/"),
                "population": lambda rel: not rel.startswith("nnlo/optimize/engines/")}


def _default_kind(name: str | None, rel: str = "") -> str | None:
    """Which owned default a parameter, field, variable or option called ``name`` holds (None: none)."""
    name = (name or "").lower()
    for kind, (names, _owner) in DEFAULT_OWNERS.items():
        if name in names and _MEANS_IT_IN.get(name, lambda rel: True)(rel):
            return kind
    return None


def _literal(node: ast.AST | None) -> bool:
    """A number other than 0 (0 and None mean "none given"), or a walltime's text."""
    return (isinstance(node, ast.Constant) and not isinstance(node.value, bool)
            and ((isinstance(node.value, (int, float)) and node.value != 0) or node.value == "1h"))


def default_problems(path: Path, root: Path = REPO) -> Iterator[str]:
    """Owned defaults written as literals outside their owner: ``walltime_s: int = 3600``, ``walltime="1h"``,
    ``safety_s: float = 10.0``, ``eta=3``, ``default="1h"`` of a ``--walltime`` option."""
    rel = str(path.relative_to(root))
    tree = ast.parse(path.read_text(), str(path))

    def found(kind: str | None, value: ast.AST | None, line: int) -> Iterator[str]:
        owner = DEFAULT_OWNERS[kind][1] if kind else rel
        if owner != rel and _literal(value):
            yield f"{rel}:{line}: the default {kind} written out; use the name from {owner}"

    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            yield from found(_default_kind(node.target.id, rel), node.value, node.lineno)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    yield from found(_default_kind(target.id, rel), node.value, node.lineno)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            positional = args.posonlyargs + args.args
            pairs = list(zip(positional[len(positional) - len(args.defaults):], args.defaults))
            pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
            for arg, default in pairs:
                yield from found(_default_kind(arg.arg, rel), default, node.lineno)
        elif isinstance(node, ast.Call):
            options = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
                       and a.value.startswith("--")]
            kinds = {_default_kind(o.lstrip("-").replace("-", "_"), rel) for o in options} - {None}
            for keyword in node.keywords:
                if keyword.arg == "default":
                    for kind in kinds:
                        yield from found(kind, keyword.value, node.lineno)
                elif keyword.arg is not None and not options:
                    yield from found(_default_kind(keyword.arg, rel), keyword.value, node.lineno)


@pytest.mark.parametrize("path", SOURCES + TEMPLATES, ids=lambda p: str(p.relative_to(REPO)))
def test_no_contract_fact_is_written_out_elsewhere(path: Path) -> None:
    problems = list(template_problems(path) if path.suffix == ".sh" else python_problems(path))
    problems += env_name_problems(path)
    assert problems == [], "use the name from nnlo/contract.py instead:\n" + "\n".join(problems)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(REPO)))
def test_no_default_is_written_out_twice(path: Path) -> None:
    """The walltime, the deadline's safety margin and the schedules' defaults each have one owner."""
    problems = list(default_problems(path))
    assert problems == [], "\n".join(problems)


BAD = '''
import sys, os
from pathlib import Path
def f(run, pid, e):
    """Docstrings may say NNLO_DEADLINE, state.json and logs/job-1.out."""
    os.environ["NNLO_RUN_DIR"] = "x"
    env = dict(os.environ, NNLO_JOB_ID="1")
    log = run / "logs" / f"job-{pid}.out"
    other = Path(run, "chains")
    code = getattr(e, "exit_code", 2)
    if code > 128:
        os.kill(pid, 15)
    print("see nnlo logs; wrote state.json")
    sys.exit(2)
class E(Exception):
    exit_code = 1
'''


def test_the_scan_finds_each_kind_of_fact_written_out(tmp_path: Path) -> None:
    """The scan itself can fail: a file writing out one fact of each kind is caught once per fact."""
    path = tmp_path / "bad.py"
    path.write_text(BAD)
    found = list(python_problems(path, tmp_path))
    lines = sorted(int(p.split(":")[1]) for p in found)
    assert lines == [6, 7, 8, 8, 9, 10, 11, 12, 13, 14, 16], found


def test_the_template_scan_finds_facts_outside_comments(tmp_path: Path) -> None:
    path = tmp_path / "bad.sh"
    path.write_text('{# NNLO_RUN_DIR and exit 1 are fine in a comment #}\nexport NNLO_RUN_DIR={{ run_dir }}\n'
                    'mkdir -p "$dir/logs" || exit 1\n[ "$rc" -gt 128 ]\necho {{ deadline_var }}\n')
    found = [line.split(":", 1)[1] for line in template_problems(path, tmp_path)]
    assert sorted(int(x.split(":")[0]) for x in found) == [2, 3, 3, 4], found


BAD_DEFAULTS = '''
import click
from dataclasses import dataclass
def spec(kind, walltime="1h", *, eta=3.0, min_epochs=None):
    """Docstrings may say NNLO_COMM_TIMEOUT and walltime="1h"."""
    return os.environ.get("NNLO_DEADLINE_SAFETY", "10"), dict(safety_s=10.0)
@dataclass
class Spec:
    walltime_s: int = 3600
    population: int = 8
option = click.option("--walltime", "-t", default="1h")
layout = click.option("--walltime", "-t", default=None)
'''


def test_the_scans_find_an_env_name_and_each_default_written_out(tmp_path: Path) -> None:
    """The scans themselves can fail: a file with an environment variable name and each owned default written
    out is caught once per copy (``min_epochs=None`` and ``default=None`` give no default)."""
    path = tmp_path / "bad.py"
    path.write_text(BAD_DEFAULTS)
    assert [p.split(":")[1] for p in env_name_problems(path, tmp_path)] == ["6"]
    found = sorted((int(p.split(":")[1]), p.split("default ")[1].split(" ")[0]) for p in default_problems(path, tmp_path))
    assert found == [(4, "eta"), (4, "walltime"), (6, "safety"), (9, "walltime"), (10, "population"),
                     (11, "walltime")], found
    template = tmp_path / "bad.sh"
    template.write_text("{# NNLO_WAIT in a comment is fine #}\nexport NNLO_WAIT=spin\n")
    assert [p.split(":")[1] for p in env_name_problems(template, tmp_path)] == ["2"]
