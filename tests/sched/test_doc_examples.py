"""The `nnlo layout` and `nnlo clusters` commands that README.md and docs/ show run as written: a user copies
them first, and they need nothing but the built-in cluster profiles (no data, no batch system)."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tests.sched.cli_runner import run

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
#: words a synopsis uses for what the reader fills in: such a line is a form, not a command
PLACEHOLDER = re.compile(r"^(C|K|N|RUN|NAME|CLUSTER|\[.*|.*\|.*|\.\.\.)$")


def _examples() -> list[tuple[str, str]]:
    """(where, command) of every `nnlo layout|clusters` line in a fenced code block, continuations joined."""
    found = []
    for path in DOCS:
        fenced = False
        lines = path.read_text().splitlines()
        i = 0
        while i < len(lines):
            line = lines[i]
            i += 1
            if line.lstrip().startswith("```"):
                fenced = not fenced
                continue
            text = line.strip().removeprefix("$ ")
            if not fenced or not re.match(r"nnlo (layout|clusters)\b", text):
                continue
            while text.endswith("\\") and i < len(lines):
                text = text[:-1] + " " + lines[i].strip()
                i += 1
            words = shlex.split(text, comments=True)
            if not any(PLACEHOLDER.match(w) for w in words):
                found.append((f"{path.relative_to(REPO)}:{i}", shlex.join(words)))
    return found


EXAMPLES = _examples()


def test_the_docs_show_layout_and_clusters_examples() -> None:
    assert len(EXAMPLES) >= 5, EXAMPLES


@pytest.mark.parametrize(("where", "command"), EXAMPLES, ids=[w for w, _ in EXAMPLES])
def test_a_documented_command_runs_as_written(capsys: pytest.CaptureFixture[str], where: str, command: str) -> None:
    code, out, err = run(capsys, *shlex.split(command)[1:])
    assert code == 0, f"{where}: {command}: {err.strip()}"
    assert out.strip()
