"""Run ``nnlo`` in-process, as a user's shell would, for the command tests."""
from __future__ import annotations

import pytest

from nnlo_sched.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``nnlo ARGV...`` through the real entry point: (exit status, stdout, stderr)."""
    try:
        main(list(argv))
        code = 0
    except SystemExit as e:
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err
