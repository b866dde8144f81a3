"""Fixtures of the fault-injection suite: the helpers importable as ``fault_tools``, a tiny HDF5 data set."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from fault_tools import write_blobs  # noqa: E402


@pytest.fixture(scope="session")
def blobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_blobs(tmp_path_factory.mktemp("reliability-blobs"))
