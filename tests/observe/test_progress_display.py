"""Progress: a live carriage-return line on a terminal (a real pty), plain lines elsewhere."""
from __future__ import annotations

import io
import os
import select

import pytest

from nnlo.observe.progress import Progress, render


def _drain(fd: int) -> bytes:
    out = b""
    while select.select([fd], [], [], 0.2)[0]:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    return out


def test_terminal_gets_one_live_line_redrawn_in_place():
    master, slave = os.openpty()
    os.set_blocking(master, False)
    stream = os.fdopen(slave, "w", encoding="utf-8")
    try:
        p = Progress("train", stream, total=5)
        assert p.live
        for epoch in (1, 2, 3):
            p.update(epoch=epoch, train_loss=1.0 / epoch, val_loss=1.5 / epoch, val_accuracy=0.5 + epoch / 10)
        p.close()
        p.update(epoch=4)  # after close: ignored
        raw = _drain(master).decode().replace("\r\n", "\n")  # the tty turns "\n" into "\r\n"
    finally:
        stream.close()
        os.close(master)
    assert raw.count("\r") == 3 and raw.count("\x1b[K") == 3
    assert "epoch 3/5" in raw and "epoch 4" not in raw
    frames = [f for f in raw.split("\r") if f]
    assert len(frames) == 3 and frames[-1].endswith("\x1b[K\n")
    assert raw.count("\n") == 1  # one line on screen, ended at close


def test_not_a_terminal_gets_plain_lines_without_control_characters():
    out = io.StringIO()
    with Progress("optimize", out, total=20) as p:
        assert not p.live
        p.update(trial=1, fom=0.9, best_fom=0.9, best_trial=1)
        p.update(trial=1, fom=0.9, best_fom=0.9, best_trial=1)  # nothing changed: no new line
        p.update(trial=2, fom=0.7, best_fom=0.7, best_trial=2, running=3)
    text = out.getvalue()
    assert "\r" not in text and "\x1b" not in text
    lines = text.splitlines()
    assert lines == [
        "optimize trial 1/20 | best fom 0.9 (trial 1) | last fom 0.9",
        "optimize trial 2/20 | best fom 0.7 (trial 2) | last fom 0.7 | running 3",
    ]


def test_render_formats_and_hides_missing_fields():
    assert render("train", {"epoch": 2}) == "train epoch 2"
    line = render("train", {"epoch": 2, "epochs": 4, "train_loss": 0.123456, "samples_per_s": 12345.6, "lr": 0.01},
                  elapsed=3725)
    assert line == "train epoch 2/4 | loss 0.1235 | 12346 samples/s | lr 0.01 | 1:02:05"
    with pytest.raises(ValueError, match="train"):
        Progress("bogus")


def test_a_broken_stream_never_raises():
    out = io.StringIO()
    p = Progress("train", out, live=False)
    out.close()
    p.update(epoch=1)
    p.close()


def test_log_records_step_around_the_live_line():
    import logging

    from nnlo.observe.logs import RankLogging

    master, slave = os.openpty()
    os.set_blocking(master, False)
    stream = os.fdopen(slave, "w", encoding="utf-8")
    handles = RankLogging(None, 0, "master", "info", console=True, stream=stream)
    try:
        p = Progress("train", stream, total=3)
        p.update(epoch=1, train_loss=0.5)
        logging.getLogger("nnlo.test.progress").info("checkpoint written")
        p.update(epoch=2, train_loss=0.4)
        p.close()
        raw = _drain(master).decode().replace("\r\n", "\n")
    finally:
        handles.close()
        stream.close()
        os.close(master)
    # the live line is cleared, the record printed on its own row, the live line drawn again below it
    assert "\r\x1b[K[rank 0 master] info: checkpoint written\n\rtrain epoch 1/3" in raw
    rows = raw.split("\n")
    assert rows[0].endswith("checkpoint written") and "epoch 2/3" in rows[1] and rows[2] == ""


def test_for_terminal_only_on_a_terminal():
    from nnlo.observe.progress import for_terminal

    assert for_terminal("train", io.StringIO(), total=3) is None
    master, slave = os.openpty()
    stream = os.fdopen(slave, "w", encoding="utf-8")
    try:
        p = for_terminal("optimize", stream, total=4)
        assert p is not None and p.live and p.fields == {"trials": 4}
        p.close()
    finally:
        stream.close()
        os.close(master)
