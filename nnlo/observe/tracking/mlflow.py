"""MLflow runs (``--mlflow URI``): a training's options and figures, a search as a parent run with nested trials.

* a **training** is one run (in the experiment ``$MLFLOW_EXPERIMENT_NAME``, else ``nnlo``, named after the
  training): its options as parameters, every epoch's figures as metrics (step = the epoch), each
  ``--validate-every`` validation as ``by_update/<name>`` (step = the master's update count);
* a **search** is a parent run (the search's and the training's options) with one nested run per trial (its
  hyperparameters, ``fom/<name>`` at step = its epochs, and its training's figures per epoch, read from each
  fold's history when the coordinator records the trial; folds as ``fold-<f>/<name>``); the parent gets each
  recorded trial's ``fom/<name>`` and the best so far, ``best/<name>`` (step = the trials recorded).

The run's id is kept in its folder (:data:`~nnlo.contract.MLFLOW_RUN_FILE`; a search's also holds its trials'),
so the jobs of a chain, and a resumed run, log into the same runs. MLflow keeps every value it is given: the
epochs a killed job logged after its last checkpoint are logged again by the job that resumes from it (MLflow's
charts draw the newest value of a step).

Everything goes through ``MlflowClient`` (no global active run, which a script's own MLflow use may hold). A
``file:`` URI (or a plain path) is a file store, the way on clusters without a tracking server: MLflow 3 keeps
it in maintenance mode behind ``MLFLOW_ALLOW_FILE_STORE``, which a run given such a URI sets (unless set).
"""
from __future__ import annotations

import importlib.util
import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nnlo.atomic import write_json
from nnlo.contract import MLFLOW_RUN_FILE
from nnlo.observe.tracking.base import BY_UPDATE, RESUMABLE, UPDATES, TrialReport, missing, scalars

#: the experiment runs go to unless ``$MLFLOW_EXPERIMENT_NAME`` names one
EXPERIMENT = "nnlo"
#: MLflow's switch that lets it use a file store (MLflow 3)
_ALLOW_FILE_STORE = "MLFLOW_ALLOW_FILE_STORE"
#: MLflow's tag that makes a run nested under another
_PARENT_TAG = "mlflow.parentRunId"
#: MLflow's limit on one call's metrics
_BATCH = 1000


def available() -> bool:
    return importlib.util.find_spec("mlflow") is not None


def check() -> None:
    """One line (ConfigError) when no MLflow package is installed."""
    if not available():
        raise missing("--mlflow", "mlflow", "mlflow")


def _client(uri: str) -> Any:
    check()
    if "://" not in uri or uri.startswith("file:"):
        os.environ.setdefault(_ALLOW_FILE_STORE, "true")
    from mlflow.tracking import MlflowClient  # lazy: the mlflow extra, seconds to import

    return MlflowClient(tracking_uri=uri)


def _experiment(client: Any) -> str:
    name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or EXPERIMENT
    found = client.get_experiment_by_name(name)
    return str(found.experiment_id) if found is not None else str(client.create_experiment(name))


def _text(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 500 else text[:497] + "..."


class _Run:
    """One MLflow run through a client: parameters once, metrics in batches, a status at the end."""

    def __init__(self, client: Any, run_id: str) -> None:
        self.client, self.run_id = client, run_id

    @classmethod
    def create(cls, client: Any, experiment: str, name: str, params: Mapping[str, Any],
               parent: str | None = None) -> _Run:
        tags = {_PARENT_TAG: parent} if parent else {}
        run = cls(client, str(client.create_run(experiment, run_name=name, tags=tags).info.run_id))
        from mlflow.entities import Param  # lazy: the mlflow extra

        items = [Param(str(k)[:250], _text(v)) for k, v in params.items()]
        for i in range(0, len(items), 100):
            client.log_batch(run.run_id, params=items[i:i + 100])
        return run

    def metrics(self, values: Mapping[str, float], step: int) -> None:
        from mlflow.entities import Metric  # lazy: the mlflow extra

        now = int(time.time() * 1000)
        items = [Metric(k, v, now, int(step)) for k, v in values.items()]
        for i in range(0, len(items), _BATCH):
            self.client.log_batch(self.run_id, metrics=items[i:i + _BATCH])

    def running(self) -> None:
        self.client.update_run(self.run_id, status="RUNNING")

    def end(self, status: str) -> None:
        self.client.set_terminated(self.run_id, status=status)


def _status(stopped_reason: str) -> str:
    return "KILLED" if stopped_reason in RESUMABLE else "FAILED" if stopped_reason == "failed" else "FINISHED"


def _record(folder: Path) -> dict[str, Any]:
    try:
        data = json.loads((folder / MLFLOW_RUN_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _reopen(client: Any, record: Mapping[str, Any], uri: str) -> str | None:
    """The run id ``record`` names, when it was made at ``uri`` and the server still has it."""
    run_id = record.get("run_id")
    if not run_id or record.get("uri") != uri:
        return None
    try:
        client.get_run(run_id)
    except Exception:  # noqa: BLE001 - gone or unreachable: a new run is made (MLflow raises its own exceptions)
        return None
    return str(run_id)


class MlflowTraining:
    """A training's run: made at the first job, continued by the jobs that resume it."""

    def __init__(self, uri: str, folder: Path | None, name: str, params: Mapping[str, Any]) -> None:
        client = _client(uri)
        run_id = _reopen(client, _record(folder), uri) if folder is not None else None
        if run_id is None:
            self.run = _Run.create(client, _experiment(client), name, params)
            if folder is not None:
                folder.mkdir(parents=True, exist_ok=True)
                write_json(folder / MLFLOW_RUN_FILE, {"uri": uri, "run_id": self.run.run_id})
        else:
            self.run = _Run(client, run_id)
            self.run.running()

    def epoch(self, entry: Mapping[str, Any]) -> None:
        self.run.metrics(scalars(entry), int(entry["epoch"]))

    def validation(self, entry: Mapping[str, Any]) -> None:
        values = scalars(entry, skip=("epoch", UPDATES))
        self.run.metrics({f"{BY_UPDATE}/{k}": v for k, v in values.items()}, int(entry[UPDATES]))

    def close(self, stopped_reason: str) -> None:
        self.run.end(_status(stopped_reason))


class MlflowSearch:
    """A search's parent run and its trials' nested runs, in the search's folder's record."""

    def __init__(self, uri: str, folder: Path, name: str, params: Mapping[str, Any]) -> None:
        self.client = _client(uri)
        self.uri, self.folder = uri, folder
        folder.mkdir(parents=True, exist_ok=True)
        self.record = _record(folder)
        run_id = _reopen(self.client, self.record, uri)
        self.experiment = _experiment(self.client)
        if run_id is None:
            self.run = _Run.create(self.client, self.experiment, name, params)
            self.record = {"uri": uri, "run_id": self.run.run_id, "trials": {}}
            self._save()
        else:
            self.run = _Run(self.client, run_id)
            self.run.running()
        self.trials: dict[str, Any] = dict(self.record.get("trials") or {})

    def _save(self) -> None:
        write_json(self.folder / MLFLOW_RUN_FILE, self.record)

    def trial(self, report: TrialReport) -> None:
        key = str(report.trial_id)
        known = self.trials.get(key) or {}
        if known.get("run_id"):
            run = _Run(self.client, str(known["run_id"]))
            run.running()
        else:
            run = _Run.create(self.client, self.experiment, report.name, report.params, parent=self.run.run_id)
        logged = int(known.get("epochs", 0))
        last = logged
        for label, entries in report.histories:
            prefix = f"{label}/" if label else ""
            for entry in entries:
                epoch = int(entry.get("epoch", 0))
                if epoch > logged:
                    run.metrics({prefix + k: v for k, v in scalars(entry).items()}, epoch)
                    last = max(last, epoch)
        if report.fom is not None:
            run.metrics({f"fom/{report.fom_name}": report.fom}, report.epochs)
        run.end("FINISHED" if report.fom is not None else "FAILED")
        self.trials[key] = {"run_id": run.run_id, "epochs": last}
        reports = int(self.record.get("reports", 0)) + 1
        self.record.update(trials=self.trials, reports=reports)
        self._save()
        figures = {f"fom/{report.fom_name}": report.fom, f"best/{report.fom_name}": report.best}
        self.run.metrics({k: v for k, v in figures.items() if v is not None}, reports)

    def close(self, done: bool) -> None:
        self.run.end("FINISHED" if done else "KILLED")


__all__ = ["EXPERIMENT", "MlflowSearch", "MlflowTraining", "available", "check"]
