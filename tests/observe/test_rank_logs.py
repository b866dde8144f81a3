"""Per-rank log files, the merged all-ranks log and --log-level."""
from __future__ import annotations

import io
import time
import logging

import pytest

from nnlo.errors import ConfigError
from nnlo.observe import logs


def test_each_rank_writes_its_file_and_the_merge_is_time_ordered(tmp_path):
    console = io.StringIO()
    handles = [logs.RankLogging(tmp_path, r, f"role{r}", "info", console=(r == 1), stream=console) for r in (0, 1)]
    log = logging.getLogger("nnlo.test.logs")
    try:
        for i in range(3):
            for h in handles:
                # route each record to one rank's file only, as separate processes would
                for other in handles:
                    other._handlers[0].setLevel(logging.CRITICAL + 1 if other is not h else logging.INFO)
                log.info("rank %d message %d", h.rank, i)
                time.sleep(0.001)
        try:
            raise ValueError("bad thing")
        except ValueError:
            handles[1]._handlers[0].setLevel(logging.INFO)
            log.exception("rank 1 failed")
        log.debug("too detailed")
    finally:
        for h in handles:
            h.close()
    assert not any(getattr(x, "baseFilename", "").startswith(str(tmp_path)) for x in logging.getLogger("nnlo").handlers)
    rank1 = (tmp_path / "logs" / "rank-1.log").read_text()
    assert "rank 1 message 2" in rank1 and "rank 0 message" not in rank1 and "too detailed" not in rank1
    merged_path = logs.merge_logs(tmp_path)
    merged = merged_path.read_text()
    order = [f"rank {r} message {i}" for i in range(3) for r in (0, 1)]
    positions = [merged.index(text) for text in order]
    assert positions == sorted(positions)
    # the traceback stays attached to its record, after it
    assert merged.index("rank 1 failed") < merged.index("ValueError: bad thing")
    # the rank-1 console shows only warnings and worse
    assert "message" not in console.getvalue() and "[rank 1 role1] error: rank 1 failed" in console.getvalue()


def test_log_level_names_and_a_clear_error():
    assert logs.parse_level("DEBUG") == logging.DEBUG and logs.parse_level("warning") == logging.WARNING
    with pytest.raises(ConfigError, match="--log-level 'verbose' is not a level; use one of debug, info"):
        logs.parse_level("verbose")


def test_no_logs_means_no_merged_file(tmp_path):
    assert logs.merge_logs(tmp_path) is None


def test_a_console_handler_installed_by_a_command_prints_no_more_than_before(tmp_path):
    logger = logging.getLogger("nnlo")
    theirs = logging.StreamHandler(io.StringIO())
    logger.addHandler(theirs)
    old_level = logger.level
    logger.setLevel(logging.WARNING)  # e.g. nnlo optimize on a non-zero rank
    try:
        h = logs.RankLogging(tmp_path, 3, "b1:worker:w0", "info", console=True)
        assert len(logger.handlers) == 2  # our file; no second console handler
        logging.getLogger("nnlo.test.console").info("detail for the file only")
        logging.getLogger("nnlo.test.console").warning("for both")
        h.close()
        assert theirs.stream.getvalue() == "for both\n"
        text = (tmp_path / "logs" / "rank-3.log").read_text()
        assert "detail for the file only" in text and "for both" in text
        assert logger.level == logging.WARNING and theirs.level == logging.NOTSET  # all put back
    finally:
        logger.removeHandler(theirs)
        logger.setLevel(old_level)


@pytest.mark.parametrize("level", ["info", "debug"])
def test_run_wide_warnings_once_and_details_for_the_files(tmp_path, level):
    """ONCE: the screen shows it from the speaking rank only, once however often it comes; DETAIL: every file
    at any level, the screen at debug only."""
    screens = {r: io.StringIO() for r in (0, 1)}
    log = logging.getLogger("nnlo.test.once")
    for rank in (0, 1):  # one process at a time, as each rank's own
        h = logs.RankLogging(tmp_path, rank, f"role{rank}", level, console=True, stream=screens[rank])
        try:
            for _ in range(2):
                log.warning("no validation data", extra=logs.ONCE)
            log.error("their traceback", extra=logs.DETAIL)
            with logs.speaking_for_the_run(rank == 1):  # a search: the first block's rank speaks
                log.warning("every trial says this", extra=logs.ONCE)
                log.warning("every trial says this", extra=logs.ONCE)
        finally:
            h.close()
    assert screens[0].getvalue().count("no validation data") == 1 and "no validation" not in screens[1].getvalue()
    assert screens[1].getvalue().count("every trial says this") == 1 and "every trial" not in screens[0].getvalue()
    for rank in (0, 1):
        text = (tmp_path / "logs" / f"rank-{rank}.log").read_text()
        assert text.count("no validation data") == 2 and "their traceback" in text
        assert ("their traceback" in screens[rank].getvalue()) is (level == "debug")


@pytest.fixture
def users_basic_config():
    """A root handler as a model module's ``logging.basicConfig()`` installs one (Python's default format); the
    ``nnlo`` logger's handlers, level and propagation are put back afterwards."""
    nnlo_logger, root = logging.getLogger("nnlo"), logging.getLogger()
    saved = (list(nnlo_logger.handlers), nnlo_logger.level, nnlo_logger.propagate)
    users = io.StringIO()
    handler = logging.StreamHandler(users)
    handler.setFormatter(logging.Formatter(logging.BASIC_FORMAT))
    root.addHandler(handler)
    for h in list(nnlo_logger.handlers):
        nnlo_logger.removeHandler(h)
    try:
        yield users
    finally:
        root.removeHandler(handler)
        for h in list(nnlo_logger.handlers):
            nnlo_logger.removeHandler(h)
        for h in saved[0]:
            nnlo_logger.addHandler(h)
        nnlo_logger.setLevel(saved[1])
        nnlo_logger.propagate = saved[2]


def test_a_models_basic_config_does_not_print_a_search_ranks_records_again(users_basic_config, capsys):
    """Issue 45 item 4: a failed trial's traceback (a DETAIL record, for the log files) was printed on the
    console by the root handler a model's logging.basicConfig() installed, as ``ERROR:nnlo.worker:training
    failed:`` and a traceback, from every rank, beside nnlo's one line; every other record twice."""
    logs.console_logging("info", 1)
    log = logging.getLogger("nnlo.worker")
    log.error("training failed:\nTraceback (most recent call last):\nValueError: odd", extra=logs.DETAIL)
    log.warning("a warning of nnlo's")
    assert users_basic_config.getvalue() == ""
    console = capsys.readouterr().err
    assert "Traceback" not in console and console.count("a warning of nnlo's") == 1


def test_a_models_basic_config_does_not_print_a_trainings_records_again(users_basic_config, tmp_path):
    console = io.StringIO()
    handle = logs.RankLogging(tmp_path, 1, "worker:w0", "info", console=True, stream=console)
    try:
        logging.getLogger("nnlo.worker").error("training failed:\nTraceback ...\nValueError: odd",
                                               extra=logs.DETAIL)
    finally:
        handle.close()
    assert users_basic_config.getvalue() == "" and "Traceback" not in console.getvalue()
    assert "Traceback" in (tmp_path / "logs" / "rank-1.log").read_text()
    assert logging.getLogger("nnlo").propagate  # put back at close
