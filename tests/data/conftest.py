"""Fixtures of the data tests (helpers live in h5_fixtures.py, importable by the test modules)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # h5_fixtures, whatever pytest's import mode

from h5_fixtures import write_indexed  # noqa: E402


@pytest.fixture
def indexed_files(tmp_path: Path) -> list[Path]:
    """Four files of 7, 0, 12 and 5 samples (24 in all; one file is empty)."""
    return write_indexed(tmp_path, [7, 0, 12, 5])
