"""How a fold group evaluates one parameter set: real training, or a model module's objective hook.

:class:`TrainRunner` is the normal path: every rank of the fold group calls
``nnlo.training.driver.train`` on the group's communicator, with the trial's hyperparameters routed into
the training configuration (see :func:`split_params`), the fold's samples, and an output directory of its
own (``<out>/trials/<trial-id>/fold-<f>/``), so nothing collides between folds, blocks and trials.

:class:`HookRunner` is for synthetic objectives (benchmarks of the search itself, tests): a model module
that defines ``evaluate(params, *, fold, n_fold)`` returning a float (the figure of merit) or a dict of
metrics is evaluated on the group's top rank without training. ``examples/branin.py`` is one. A hook that
takes ``epochs=`` and ``state=`` (``examples/curves.py``) can be trained in stages by a schedule: it gets the
epochs to reach and the state it returned last time (``None`` at first), and returns its metrics with the
new ``"state"`` (any JSON), which nnlo keeps in the fold's folder as the trial's checkpoint.

Routing of hyperparameters (documented in docs/optimization.md): a parameter named like a tunable training
option (:data:`TRAINING_PARAMS`, e.g. ``batch``, ``epochs``, ``worker_optimizer``, ``gem_lr``) sets that
option; ``worker_lr`` sets the learning rate inside ``--worker-optimizer``; every other parameter is a
keyword argument of ``get_model``.
"""
from __future__ import annotations

import logging
import math
import numbers
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from nnlo.optimize.trial_files import claim, read_hook_state, trial_dir, write_hook_state

TRAINING_PARAMS = frozenset({
    "loss", "epochs", "batch", "optimizer", "worker_optimizer", "mode", "sync_every", "synchronous",
    "elastic_force", "gem_lr", "gem_momentum", "gem_kappa", "early_stopping",
})
WORKER_LR = "worker_lr"


@dataclass
class FoldOutcome:
    """What a fold group's top rank reports: final metrics, or why it failed / was interrupted."""

    metrics: dict[str, Any] | None = None
    error: str | None = None
    interrupted: bool = False
    code: int = 1  # exit-code class of the error: 2 = bad input (config, model, data), 1 = a failure
    epochs: int | None = None  # epochs trained in total (None: not known)
    checkpoint: str | None = None  # the newest checkpoint the training left (a schedule resumes from it)
    oom: bool = False  # the error says it ran out of memory (placement keeps it off this block type)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"metrics": self.metrics, "error": self.error, "interrupted": self.interrupted,
                               "code": self.code}
        if self.epochs is not None:
            out["epochs"] = self.epochs
        if self.checkpoint is not None:
            out["checkpoint"] = self.checkpoint
        if self.oom:
            out["oom"] = True
        return out


class Runner(Protocol):
    def run(self, comm: Any, trial_id: int, params: dict[str, Any], fold: int, n_fold: int,
            out_dir: Path, epochs: int | None = None) -> FoldOutcome | None:
        """Called by every rank of a fold group; the group's top rank returns the outcome, others None.
        ``epochs``: a schedule's stage, train (on, from the trial's checkpoint) to this many epochs in total."""
        ...


def outcome_of_exception(e: BaseException, logger: logging.Logger) -> FoldOutcome:
    """A failed fold from any exception: one line, whether it is bad input (2) or a failure (1), and whether it
    ran out of memory; the traceback of an error in the user's code (an objective hook's) goes to ``logger``,
    trimmed."""
    from nnlo.optimize.placement import is_out_of_memory
    from nnlo.training.failure import RankFailure, failure_line

    message, code = failure_line(e, logger, "trial failed")
    if isinstance(e, RankFailure):
        message = str(e)  # "rank R (role): message": which rank of the fold group failed
    return FoldOutcome(error=message, code=code, oom=is_out_of_memory(e) or is_out_of_memory(message))


#: the keywords an objective hook must take to be trained in stages by a schedule
STAGED_HOOK_KEYWORDS = ("epochs", "state")


def hook_keywords(evaluate: Any) -> set[str]:
    """Which of :data:`STAGED_HOOK_KEYWORDS` ``evaluate`` accepts (all of them with ``**kwargs``)."""
    import inspect

    try:
        params = inspect.signature(evaluate).parameters.values()
    except (TypeError, ValueError):
        return set()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return set(STAGED_HOOK_KEYWORDS)
    return {p.name for p in params if p.name in STAGED_HOOK_KEYWORDS}


class HookRunner:
    """Evaluates ``module.evaluate(params, fold=, n_fold=)`` on the fold group's top rank; a schedule's stage
    adds ``epochs=`` and ``state=`` (the state the hook returned last, kept in the fold's folder)."""

    def __init__(self, module: Any, fom_name: str):
        self.evaluate = module.evaluate
        self.fom_name = fom_name

    def run(self, comm: Any, trial_id: int, params: dict[str, Any], fold: int, n_fold: int,
            out_dir: Path, epochs: int | None = None) -> FoldOutcome | None:
        if comm.Get_rank() != 0:
            return None
        if epochs is None:
            return self._outcome(self.evaluate(dict(params), fold=fold, n_fold=n_fold))
        claim(out_dir, trial_id, params, epochs)  # the state in the folder must be this trial's (as run_block checked)
        folder = trial_dir(out_dir, trial_id, fold)
        state, done = read_hook_state(folder)
        value = self.evaluate(dict(params), fold=fold, n_fold=n_fold, epochs=epochs, state=state)
        if isinstance(value, dict) and "state" in value:
            value = dict(value)
            write_hook_state(folder, value.pop("state"), max(done, epochs))
        outcome = self._outcome(value)
        outcome.epochs = epochs
        return outcome

    def _outcome(self, value: Any) -> FoldOutcome:
        if isinstance(value, dict):
            return FoldOutcome(metrics=dict(value))
        if isinstance(value, numbers.Real):
            return FoldOutcome(metrics={self.fom_name: float(value)})
        raise TypeError(f"evaluate() returned {type(value).__name__}; return a float or a dict of metrics")


def split_params(params: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(training-option overrides, get_model keyword arguments) of a trial's parameters."""
    overrides = {k: v for k, v in params.items() if k in TRAINING_PARAMS or k == WORKER_LR}
    model_args = {k: v for k, v in params.items() if k not in overrides}
    return overrides, model_args


def with_lr(spec: str, lr: float) -> str:
    """``adam:lr=0.001`` -> ``adam:lr=<lr>`` (other parameters kept)."""
    from nnlo.algorithms.optimizers import parse_optimizer_spec

    name, opts = parse_optimizer_spec(spec)
    opts = {**opts, "lr": lr}
    return name + ":" + ",".join(f"{k}={v}" for k, v in opts.items())


class TrainRunner:
    """Trains the trial's model on the fold group's communicator with the real runtime."""

    def __init__(self, config: Any, seed: int, name: str = "trial", keep: int = 1):
        self.config = config
        self.seed = seed
        self.name = name  # the search's name: trials train as <name>-<trial>-fold-<f>
        self.keep = keep  # checkpoints kept per fold (PBT keeps 2: a donor's may be copied while it trains on)
        self._n_samples: int | None = None

    def config_for(self, params: dict[str, Any], out: Path, epochs: int | None = None) -> Any:
        """The trial's TrainConfig: overrides applied, hyperparameters to get_model, its own directory.

        Checkpoints go to the trial's fold directory (one kept) and ``restore="auto"`` resumes from one if a
        deadline interrupted this very trial before (a fresh trial's directory has none: it starts fresh).
        ``epochs`` (a schedule's stage) replaces ``--epochs``: the training resumes its checkpoint (the previous
        stage's last one) and trains on until that many epochs in total - the ordinary restore path.
        """
        overrides, model_args = split_params(params)
        lr = overrides.pop(WORKER_LR, None)
        if epochs is not None:
            overrides["epochs"] = epochs
        cfg = self.config.replace(
            **overrides,
            model_args={**self.config.model_args, **model_args},
            checkpoint=str(out),
            checkpoint_keep=self.keep,
            restore="auto",
            overwrite=False,  # --overwrite applies to the search's folder (cleared once), never to a trial
            trial_name=f"{self.name}-{out.parent.name}-{out.name}",
            # trainings of many blocks at once would flood the console: their progress goes to the fold's
            # logs/ and history.json; --log-level debug shows it on the console too
            log_level=self.config.log_level if self.config.log_level in ("debug", "error") else "warning",
        )
        if lr is not None:
            cfg = cfg.replace(worker_optimizer=with_lr(cfg.worker_optimizer_spec, float(lr)))
        return cfg

    def n_samples(self) -> int:
        """Samples of the training data (``--train`` or ``get_train()``: the k-fold splits them; every rank
        computes the same number)."""
        if self._n_samples is None:
            from nnlo.data import H5Dataset
            from nnlo.errors import ConfigError
            from nnlo.models import data_plan, load_model_source

            plan = data_plan(self.config, load_model_source(self.config.model), need=("train",))
            if plan.train is None:
                raise ConfigError(f"--n-fold needs training samples to split: pass --train LIST or define "
                                  f"get_train() in {self.config.model}")
            with H5Dataset(plan.train, features=plan.features, labels=plan.labels) as ds:
                self._n_samples = len(ds)
        return self._n_samples

    def fold_indices(self, fold: int, n_fold: int) -> tuple[Any, Any]:
        """(train, validation) sample indices of ``fold``: the held-out fold of the training samples is the
        validation set (the runtime reads ``val_indices`` from the training files). Same seed, same folds
        on every rank, every trial and every resubmission."""
        from nnlo.data import kfold

        return kfold(self.n_samples(), n_fold, self.seed)[fold]

    def run(self, comm: Any, trial_id: int, params: dict[str, Any], fold: int, n_fold: int,
            out_dir: Path, epochs: int | None = None) -> FoldOutcome | None:
        from nnlo.optimize.tracking import trial_config
        from nnlo.training.driver import train

        out = trial_dir(out_dir, trial_id, fold)
        cfg = trial_config(self.config_for(params, out, epochs), trial_id, fold, n_fold)
        train_idx = val_idx = None
        if n_fold > 1:
            train_idx, val_idx = self.fold_indices(fold, n_fold)
        result = train(comm, cfg, train_indices=train_idx, val_indices=val_idx,
                       out_dir=out)
        if comm.Get_rank() != 0:
            return None
        if result is None:
            return FoldOutcome(error="training returned no result on the group's top rank")
        metrics = dict(getattr(result, "final", None) or {})
        reason = str(getattr(result, "stopped_reason", "") or "")
        outcome = FoldOutcome(metrics=metrics, epochs=int(getattr(result, "epochs_done", 0) or 0),
                              checkpoint=getattr(result, "checkpoint", None))
        if reason in ("deadline", "signal"):
            outcome.interrupted = True
        elif reason == "failed":
            outcome.error = "training failed (see the fold's logs/)"
        else:
            bad = next((f"{k} is {v} (training diverged)" for k, v in metrics.items()
                        if isinstance(v, float) and not math.isfinite(v)), None)
            outcome.error = bad
        return outcome
