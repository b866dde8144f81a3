"""TensorBoard event files (``--tensorboard DIR``), written with TensorBoard's own event-file writer.

Layout of DIR::

    DIR/                  a training: its figures every epoch (tags as in history.json: loss, val_loss, ...),
                          step = the epoch
    DIR/by_update/        its --validate-every validations (tags by_update/val_loss, ...), step = the master's
                          update count
    DIR/trial-0003/       a search's trial: its training's figures, written by the trial's master as it trains
                          (with --n-fold F: in fold-<f>/ below it), and the trial's hyperparameters and figure of
                          merit (fom/<name>, step = its epochs), written by the coordinator for TensorBoard's
                          HParams view

A job that resumes a run writes on into the same folders. Each job's stream starts with a SessionLog START at
the first step it writes (TensorBoard's ``purge_step``): readers drop what an earlier job wrote from that step
on - the epochs it trained after the checkpoint this job resumed from - so every step is there once. A fresh
start writes no marker: in a search, the coordinator's file in the trial's folder (its FOM) may be read first.

Why not ``torch.utils.tensorboard``: it imports TensorFlow when TensorFlow is installed (10-15 s in a rank, and
a second framework in a torch process) and torch in a Keras run. TensorBoard's own writer
(``EventFileWriter``, its protocol buffers and its HParams plugin's) needs neither: where TensorFlow is not
imported yet, TensorBoard's own switch to its TensorFlow stub (the ``tensorboard.compat.notf`` module its
no-TensorFlow build provides) keeps it out.
"""
from __future__ import annotations

import importlib.util
import sys
import time
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nnlo.observe.tracking.base import BY_UPDATE, UPDATES, TrialReport, missing, param_value, scalars

#: the tag prefix of a trial's figure of merit in its run (the HParams view's metric)
FOM_TAG = "fom/"
#: TensorBoard's module that, when importable, makes it use its TensorFlow stub
_NO_TENSORFLOW = "tensorboard.compat.notf"


def available() -> bool:
    """Whether the tensorboard package is installed (nothing imported)."""
    return importlib.util.find_spec("tensorboard") is not None


def check() -> None:
    """One line (ConfigError) when the tensorboard package is missing."""
    if not available():
        raise missing("--tensorboard", "tensorboard", "tensorboard")


def _tensorboard() -> types.SimpleNamespace:
    """TensorBoard's writer and protocol buffers, imported without TensorFlow where it is not loaded yet."""
    check()
    if "tensorflow" not in sys.modules:
        sys.modules.setdefault(_NO_TENSORFLOW, types.ModuleType(_NO_TENSORFLOW))
    from google.protobuf import struct_pb2  # lazy: the tensorboard extra
    from tensorboard.compat.proto import event_pb2, summary_pb2  # lazy: the tensorboard extra
    from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2  # lazy: the tensorboard extra
    from tensorboard.summary.writer.event_file_writer import EventFileWriter  # lazy: the tensorboard extra

    return types.SimpleNamespace(event=event_pb2, summary=summary_pb2, struct=struct_pb2, api=api_pb2,
                                 hparams=metadata, plugin=plugin_data_pb2, Writer=EventFileWriter)


class EventStream:
    """One event file in ``folder``; with ``purge_step``, readers drop what earlier files hold from that step on."""

    def __init__(self, folder: Path, purge_step: int | None = None) -> None:
        self.tb = _tensorboard()
        folder.mkdir(parents=True, exist_ok=True)
        self.writer = self.tb.Writer(str(folder))
        if purge_step is not None:
            start = self.tb.event.SessionLog(status=self.tb.event.SessionLog.START)
            self.writer.add_event(self.tb.event.Event(wall_time=time.time(), step=purge_step, session_log=start))

    def scalars(self, values: Mapping[str, float], step: int, prefix: str = "") -> None:
        """One event holding every value (tag ``prefix + name``) at ``step``, on disk when this returns."""
        if not values:
            return
        summary = self.tb.summary.Summary(value=[self.tb.summary.Summary.Value(tag=prefix + k, simple_value=v)
                                                 for k, v in values.items()])
        self.writer.add_event(self.tb.event.Event(wall_time=time.time(), step=int(step), summary=summary))
        self.writer.flush()  # a job killed after its next checkpoint must not lose this step

    def hparams(self, tag: str, data: Any) -> None:
        """An HParams plugin summary (``data``: a ``HParamsPluginData``) under ``tag``."""
        value = self.tb.summary.Summary.Value(tag=tag, metadata=self.tb.hparams.create_summary_metadata(data),
                                              tensor=self.tb.hparams.NULL_TENSOR)
        event = self.tb.event.Event(wall_time=time.time(), summary=self.tb.summary.Summary(value=[value]))
        self.writer.add_event(event)

    def close(self) -> None:
        self.writer.close()


class TensorBoardTraining:
    """A training's figures in ``folder``: epochs from ``epoch + 1`` on, validations after ``updates`` updates
    (``epoch``, ``updates``: where the training starts, restored or 0)."""

    def __init__(self, folder: Path, epoch: int, updates: int) -> None:
        self.folder = folder
        # a fresh start purges nothing: a purge marker would also drop what another writer (a search's coordinator,
        # the trial's FOM) put in the same folder in a file that TensorBoard happens to read first
        self.epochs = EventStream(folder, purge_step=epoch + 1 if epoch or updates else None)
        self.first_update: int | None = updates + 1 if epoch or updates else None
        self.updates: EventStream | None = None

    def epoch(self, entry: Mapping[str, Any]) -> None:
        self.epochs.scalars(scalars(entry), int(entry["epoch"]))

    def validation(self, entry: Mapping[str, Any]) -> None:
        if self.updates is None:
            self.updates = EventStream(self.folder / BY_UPDATE, purge_step=self.first_update)
        self.updates.scalars(scalars(entry, skip=("epoch", UPDATES)), int(entry[UPDATES]), prefix=BY_UPDATE + "/")

    def close(self, stopped_reason: str) -> None:
        self.epochs.close()
        if self.updates is not None:
            self.updates.close()


class TensorBoardSearch:
    """A search's trials in ``folder``: each trial's run gets its hyperparameters and figure of merit."""

    def __init__(self, folder: Path) -> None:
        _tensorboard()
        self.folder = folder

    def trial(self, report: TrialReport) -> None:
        stream = EventStream(self.folder / report.name)
        tb = stream.tb
        try:
            hparams = {}
            for name, raw in report.params.items():
                value = param_value(raw)
                hparams[name] = (tb.struct.Value(bool_value=value) if isinstance(value, bool) else
                                 tb.struct.Value(number_value=value) if isinstance(value, float) else
                                 tb.struct.Value(string_value=value))
            start = tb.plugin.SessionStartInfo(hparams=hparams, group_name=report.name,
                                               start_time_secs=time.time())
            stream.hparams(tb.hparams.SESSION_START_INFO_TAG, tb.plugin.HParamsPluginData(session_start_info=start))
            if report.fom is not None:
                stream.scalars({FOM_TAG + report.fom_name: report.fom}, report.epochs)
            status = tb.api.STATUS_SUCCESS if report.fom is not None else tb.api.STATUS_FAILURE
            end = tb.plugin.SessionEndInfo(status=status, end_time_secs=time.time())
            stream.hparams(tb.hparams.SESSION_END_INFO_TAG, tb.plugin.HParamsPluginData(session_end_info=end))
        finally:
            stream.close()

    def close(self, done: bool) -> None:
        """Nothing is left open between trials."""


__all__ = ["FOM_TAG", "EventStream", "TensorBoardSearch", "TensorBoardTraining", "available", "check"]
