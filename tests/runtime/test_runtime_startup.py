"""The start-up record (startup.json) that breaks a resume down: stamps in order, the process start from /proc."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from nnlo.contract import STARTUP_FILE
from nnlo.training import startup


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")
def test_process_start_is_before_now_and_after_the_interpreter_began() -> None:
    began = startup.process_start()
    assert began is not None
    elapsed = time.time() - began
    assert 0 <= elapsed < 24 * 3600  # this test process started a little while ago, not in the future


def test_record_orders_the_stamps_and_writes_the_run_file(tmp_path: Path) -> None:
    startup.mark("zz_first")
    time.sleep(0.01)
    startup.mark("aa_second")
    startup.mark("zz_first")  # the first stamp of a name wins
    rec = startup.record()
    names = list(rec["stamps"])
    assert names.index("zz_first") < names.index("aa_second")
    assert rec["seconds"]["aa_second"] >= 0.01 - 1e-3
    startup.write(tmp_path)
    assert json.loads((tmp_path / STARTUP_FILE).read_text())["stamps"]["aa_second"] == rec["stamps"]["aa_second"]
    startup.write(tmp_path / "missing" / "folder")  # advisory: no folder, no error
    startup.write(None)
