"""Fixtures of the data tests (the HDF5 writers live in tests/helpers/h5.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.h5 import write_indexed


@pytest.fixture
def indexed_files(tmp_path: Path) -> list[Path]:
    """Four files of 7, 0, 12 and 5 samples (24 in all; one file is empty)."""
    return write_indexed(tmp_path, [7, 0, 12, 5])
