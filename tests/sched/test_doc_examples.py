"""Every ``nnlo`` command a user can copy runs as written: the code blocks of README.md and docs/*.md, and the
text of every ``--help``.

Each example is taken from its source and run through the real entry point in a folder laid out as a fresh
clone is (``examples/`` and the digits lists that ``examples/make_digits.py`` writes; a block's own
``python examples/make_*.py`` lines run first, as a reader runs them):

* ``nnlo layout`` and ``nnlo clusters``: as written, exit 0;
* ``nnlo submit``: as written plus ``--dry-run`` (other clusters cannot be reached from here), with the
  pre-queue checks on: the model imports, its lists and files exist, the script renders;
* ``nnlo train|optimize -n N``: as written, up to the launch of its ranks (the parse and the pre-queue checks
  are real; the ranks' training itself is the runtime tests' work);
* commands that read a run given by name (``status RUN``, ``wait``, ``logs``, ``cancel``, ``resume``,
  ``timeline``, ``plot``, ``submit --join``): their options parse (no run exists here).

A synopsis (``[--dry-run]``, ``train|optimize``, ``...``, an upper-case placeholder such as ``RUN``) is no
example and is skipped.
"""
from __future__ import annotations

import contextlib
import re
import runpy
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from nnlo_sched.cli import COMMANDS, cli
from tests.sched.cli_runner import run

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
READS_A_RUN = {"status", "wait", "logs", "cancel", "resume", "timeline", "plot", "preempt"}
SETUP = re.compile(r"^(?:\.venv/bin/)?python3? (examples/make_\w+\.py)\b(.*)$")


def _is_synopsis(words: list[str]) -> bool:
    return any(c in w for w in words for c in "[]|…") or any(
        w == "..." or re.fullmatch(r"[A-Z][A-Z_]*", w) for w in words)


def _commands(lines: list[str]) -> Iterator[tuple[int, str]]:
    """(line number, command) for each ``nnlo ...`` or ``python examples/make_*.py`` line, continuations
    joined, a trailing ``# comment`` and a leading ``$ `` prompt removed."""
    joined, start = "", 0
    for i, raw in enumerate(lines, 1):
        text = raw.strip().removeprefix("$ ").removeprefix("Example: ")
        if not joined:
            if not ((text.split(" ")[:2][-1] in COMMANDS and text.startswith("nnlo ")) or SETUP.match(text)):
                continue  # prose that starts with the word nnlo is no command
            start = i
        joined += " " + text.rstrip("\\").strip()
        if not text.endswith("\\"):
            yield start, joined.split(" #")[0].strip()
            joined = ""


def _doc_examples() -> Iterator[tuple[str, list[str]]]:
    """(where, commands of one fenced code block) of every README/docs block with an nnlo command."""
    for path in DOCS:
        block: list[str] | None = None
        first = 0
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if line.lstrip().startswith("```"):
                if block is None:
                    block, first = [], i
                else:
                    found = [(first + n, c) for n, c in _commands(block)]
                    if any(c.startswith("nnlo ") for _, c in found):
                        yield f"{path.relative_to(REPO)}:{found[0][0]}", [c for _, c in found]
                    block = None
            elif block is not None:
                block.append(line)


def _help_examples() -> Iterator[tuple[str, list[str]]]:
    """(where, [command]) for each ``nnlo ...`` line of every listed command's --help text."""
    ctx = click.Context(cli)
    texts = [("nnlo --help", cli.help or "")]
    for name, (_, short) in COMMANDS.items():
        cmd = cli.get_command(ctx, name)
        if short is not None and cmd is not None:
            texts.append((f"nnlo {name} --help", cmd.help or ""))
            for sub in getattr(cmd, "commands", {}).values():
                texts.append((f"nnlo {name} {sub.name} --help", sub.help or ""))
    for where, text in texts:
        for n, command in _commands(text.splitlines()):
            yield f"{where} (line {n})", [command]


EXAMPLES = [*_doc_examples(), *_help_examples()]
HEAVY = ("keras",)  # a block that imports a second framework in this process (TensorFlow: seconds) is slow


def _params() -> list[object]:
    return [pytest.param(where, block, id=where,
                         marks=[pytest.mark.slow] if any(h in " ".join(block) for h in HEAVY) else [])
            for where, block in EXAMPLES]


@pytest.fixture
def clone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder laid out as a fresh clone after the quick start: examples/ and its digits lists, no runs."""
    clone = tmp_path / "clone"
    (clone / "examples").mkdir(parents=True)
    for source in (REPO / "examples").glob("*.py"):
        (clone / "examples" / source.name).symlink_to(source)
    monkeypatch.chdir(clone)
    monkeypatch.setenv("NNLO_HOME", str(clone / "nnlo-runs"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # the built-in profiles only
    monkeypatch.delenv("NNLO_CLUSTERS", raising=False)
    _setup("examples/make_digits.py", "--out examples/data/digits", monkeypatch)
    return clone


def _setup(script: str, args: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A doc's ``python examples/make_*.py ARGS`` line, run in this process as the reader's shell would."""
    with monkeypatch.context() as m:
        m.setattr(sys, "argv", [script, *shlex.split(args)])
        with contextlib.suppress(SystemExit):
            runpy.run_path(script, run_name="__main__")


def test_the_examples_are_found() -> None:
    """The extraction itself: it sees the README's quick start and the --help examples (a test of nothing
    would pass if it saw none)."""
    commands = [c for _, block in EXAMPLES for c in block]
    assert any(c.startswith("nnlo train -n 3 --model examples/digits_torch.py") for c in commands)
    assert any(c.startswith("nnlo layout --cluster cscs") for c in commands)
    assert sum(c.startswith("nnlo submit") for c in commands) >= 8


@pytest.mark.parametrize("where, block", _params())
def test_every_command_example_runs_as_written(where: str, block: list[str], clone: Path, probe_in_process: None,
                                               capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    launched: list[int] = []
    monkeypatch.setattr("nnlo_sched.payload.relaunch", lambda ranks, argv: launched.append(ranks) or 0)
    for command in block:
        setup = SETUP.match(command)
        if setup:
            _setup(setup.group(1), setup.group(2), monkeypatch)
            continue
        words = shlex.split(command)[1:]
        if _is_synopsis(words):
            continue
        name = words[0]
        if name in READS_A_RUN or "--join" in words:
            cmd = cli.get_command(click.Context(cli), name)
            assert cmd is not None, f"{where}: {command}: no command {name!r}"
            try:
                cmd.make_context(name, words[1:])
            except click.UsageError as e:
                pytest.fail(f"{where}: {command}: {e.format_message()}")
            continue
        if name == "submit" and "--dry-run" not in words:
            words.insert(1, "--dry-run")
        code, _, err = run(capsys, *words)
        assert code == 0, f"{where}: {command}\n{err}"
        if name in ("train", "optimize"):
            assert "-n" in words and launched, f"{where}: {command}: nothing launched\n{err}"
    made = {p.name for p in clone.iterdir() if p.name != "nnlo-runs" or any(p.iterdir())}
    assert made <= {"examples", "data", "arch.json"}, f"{where}: a dry run or a check wrote {made}"  # setup's


def test_the_python_api_example_writes_a_folder_of_its_own() -> None:
    """Who runs the README's ``nnlo train -n 3 ... --checkpoint runs/digits`` and then docs/python-api.md's
    script must not have the second refused for the first's run (or continue it): their folders differ."""
    readme = set(re.findall(r"--checkpoint\s+(\S+)", (REPO / "README.md").read_text()))
    api = set(re.findall(r"""checkpoint=["']([^"']+)["']""", (REPO / "docs" / "python-api.md").read_text()))
    assert readme and api and not readme & api, readme & api
