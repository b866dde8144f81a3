"""Checks before anything is queued: what a job would find wrong in its first second, found on the login node.

A job can wait hours in a queue; one that then fails because its model file is missing burns the user's
day. So ``nnlo submit`` (and ``--dry-run``) checks, after parsing the inner command:

* the model: the file exists; a model module imports with ``get_model`` (in a subprocess, bounded by
  ``NNLO_CHECK_TIMEOUT`` seconds, default 120: a module may import a framework, and a hung import must not
  hang the submission); a search's space is valid (``get_model.parameter_range`` or ``--space``);
* the data: the ``--train``/``--val`` lists (or the module's ``get_train()``/``get_val()``) exist, every
  HDF5 file they name exists, and a bounded sample of them holds the datasets the run reads;
* ``--space``, ``--restore DIR`` and ``--opt-restore``'s ``--output`` exist;
* the run home can be written, and compute nodes can write it (the profile's read-only file systems).

Each failure is one line naming the file and the fix (a :class:`~nnlo.errors.ConfigError`, exit 2), raised
before any run directory exists. ``--no-check`` skips the path checks (for paths that only compute nodes
see) and :func:`skipped_checks` says which. ``nnlo train|optimize -n`` queues nothing: its ranks start at once
and import the model and open the data themselves, so it checks the paths and the data lists only.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nnlo.checkpoint import RESTORE_AUTO, restore_point
from nnlo.config import TrainConfig
from nnlo.contract import ENV_CHECK_TIMEOUT, ENV_HOME, OPTIMIZER_STATE_FILE
from nnlo.errors import ConfigError, NnloError
from nnlo.models import data_plan, load_model_source
from nnlo.observe import tracking
from nnlo.optimize.options import SearchConfig, check_schedule, trial_overrides

if TYPE_CHECKING:
    from nnlo_sched.profiles.schema import Profile

CHECK_TIMEOUT_ENV = ENV_CHECK_TIMEOUT
DEFAULT_TIMEOUT_S = 120.0
_RESULT = "nnlo-check-result: "  # the probe's answer line (a model module may print anything before it)


def skipped_checks(import_model: bool = True) -> str:
    """What ``--no-check`` leaves out, for the note it prints (``import_model``: as :func:`check_run`'s)."""
    model, files = ("the model file and its import", "HDF5 files") if import_model else ("the model file", "files")
    return f"{model}, the data lists and their {files}, --space, --restore and --opt-restore paths"


def check_run(config: TrainConfig, search: SearchConfig | None, *, cwd: Path | None = None,
              import_model: bool = True) -> list[str]:
    """Every path check of a run about to be queued; returns notes to print (e.g. a sampled list).

    Raises :class:`ConfigError` (one line) on the first problem. Relative paths mean what they mean in
    ``cwd`` (the submission's working directory, where the jobs start too). ``import_model=False`` leaves out
    the probe (the model's import and the data it names, in a fresh interpreter) and checks only that the
    ``--train``/``--val`` lists and their files exist: for a run whose ranks start here and now (``nnlo
    train|optimize -n``), which import the model and open the data at once themselves and stop with one line
    and exit 2 too, so the probe would only add an interpreter and a framework import before them.
    """
    cwd = Path(cwd or os.getcwd())
    if config.tensorboard or config.mlflow:  # the tracking packages, on the login node as in the job
        tracking.check(config)
    if search is not None:
        trial_overrides(config, cwd, "")  # a search refuses --restore before any path is looked at
        search.schedule_spec(config)  # and a schedule that cannot run (--min-epochs above --epochs, ...)
    _check_paths(config, search, cwd)
    if import_model:
        return _probe(config, search, cwd)
    _check_lists(config, cwd)
    return []


def check_script(path: str, cwd: Path | None = None) -> None:
    """A script run's file exists, is a file and compiles (a syntax error is one line with its file and line;
    the script is not run: its own imports and data are its business)."""
    file = Path(path).expanduser()
    file = file if file.is_absolute() else Path(cwd or os.getcwd()) / file
    if not file.is_file():
        raise ConfigError(f"script {path}: no such file" + (" (it is a folder)" if file.is_dir() else "")
                          + "; give the path of the Python file to run")
    try:
        compile(file.read_bytes(), str(file), "exec")
    except SyntaxError as e:
        raise ConfigError(f"script {e.filename}:{e.lineno}: {e.msg}; fix the file before submitting") from None
    except (OSError, ValueError) as e:
        raise ConfigError(f"script {path} cannot be read as Python: {' '.join(str(e).split())[:200]}") from None


def check_run_home(run_dir: Path | None, home: Path) -> None:
    """The folder the run directory goes into can be created and written by this user."""
    target = Path(run_dir).expanduser().resolve() if run_dir is not None else Path(home)
    probe = target
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        raise ConfigError(f"cannot create the run directory under {target}: {probe} is not a folder; "
                          f"choose another --run-dir or set {ENV_HOME}")
    if not os.access(probe, os.W_OK | os.X_OK):
        what = "--run-dir" if run_dir is not None else "the runs home"
        raise ConfigError(f"{what} {target} cannot be written ({probe} is not writable by you); "
                          f"choose another --run-dir or set {ENV_HOME} to a folder you can write")


def _under(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def check_site_run_home(profile: Profile, account: str | None, target: Path) -> list[str]:
    """Refuse a run directory on a file system the profile says compute nodes cannot write; note one outside
    the site's run area (the folder of its ``runs_home``). Returns the notes to print. Paths are compared as
    given and with symbolic links resolved (a link into a read-only home is still read-only)."""
    target = Path(os.path.abspath(target))
    real = Path(os.path.realpath(target))
    home_hint = profile.expand_runs_home(account)
    shown = home_hint or profile.runs_home_for(account)
    fix = (f"set {ENV_HOME}={shown} or pass --run-dir under it" if shown else
           f"set {ENV_HOME} (or --run-dir) to a folder on a file system that {profile.name}'s compute nodes write")
    for folder in profile.compute_read_only:
        ro = Path(os.path.abspath(os.path.expanduser(os.path.expandvars(folder))))
        if _under(target, ro) or _under(real, ro) or _under(real, Path(os.path.realpath(ro))):
            raise ConfigError(f"run directory {target} is under {ro}, which {profile.name}'s compute nodes "
                              f"cannot write (jobs write their state, logs and checkpoints there); {fix}")
    if home_hint is not None:
        # the site's area is the run home's folder ($MEMBERWORK/<project>, $SCRATCH): anywhere in it will do
        area = Path(os.path.abspath(home_hint)).parent
        if not (_under(target, area) or _under(real, Path(os.path.realpath(area)))):
            return [f"run directory {target} is not under {area}, where {profile.name} runs belong "
                    f"({profile.runs_home}); compute nodes must be able to write it: {fix}"]
    return []


def _abs(path: str, cwd: Path) -> Path:
    p = Path(os.path.expandvars(path)).expanduser()
    return p if p.is_absolute() else cwd / p


def _check_lists(config: TrainConfig, cwd: Path) -> None:
    """The ``--train``/``--val`` lists exist and every file they name does (no file opened, no model imported)."""
    from nnlo.data.lists import read_list_file  # lazy: the nnlo.data package imports h5py (only -n needs it here)

    for given in (config.train, config.val):
        if given:  # named as given where it means the same (the probe reads it so, from cwd)
            read_list_file(given if cwd == Path.cwd() else _abs(given, cwd))


def _check_paths(config: TrainConfig, search: SearchConfig | None, cwd: Path) -> None:
    model = _abs(config.model, cwd)
    if not model.exists():
        raise ConfigError(f"model file {config.model} does not exist (looked in {cwd}); check --model")
    if model.is_dir():
        raise ConfigError(f"--model {config.model} is a folder; pass the model module (.py) or a saved model file")
    if config.restore and config.restore != RESTORE_AUTO:  # missing, or a folder without a checkpoint: now
        restore_point(config.restore, None, folder=_abs(config.restore, cwd))
    if search is None:
        return
    if search.space and not _abs(search.space, cwd).is_file():
        raise ConfigError(f"--space {search.space} does not exist; write a TOML file with one [name] table "
                          "per parameter, or leave --space out to use get_model.parameter_range")
    if search.opt_restore and search.output and not search.shared:  # a shared search resumes its journal anyway
        state = _abs(search.output, cwd) / OPTIMIZER_STATE_FILE
        if not state.is_file():
            raise ConfigError(f"--opt-restore: {search.output} holds no search to resume (no {OPTIMIZER_STATE_FILE}); "
                              "give the --output folder of an earlier search, or drop --opt-restore")


def _timeout() -> float:
    raw = os.environ.get(CHECK_TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise ConfigError(f"{CHECK_TIMEOUT_ENV}={raw!r} is not a positive number of seconds")
    return value


def _probe(config: TrainConfig, search: SearchConfig | None, cwd: Path) -> list[str]:
    """Import the model and open the data in a fresh interpreter, bounded in time."""
    payload = json.dumps({"config": config.to_dict(), "search": search.to_dict() if search else None})
    timeout = _timeout()
    try:
        proc = subprocess.run([sys.executable, "-m", "nnlo_sched.checks"], input=payload, capture_output=True,
                              text=True, errors="replace", cwd=cwd, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ConfigError(f"checking {config.model} (importing it and opening its data) took more than "
                          f"{timeout:.0f} s; raise {CHECK_TIMEOUT_ENV}, or pass --no-check if the model "
                          "only works on compute nodes") from None
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(_RESULT):
            answer: dict[str, Any] = json.loads(line[len(_RESULT):])
            if answer.get("error"):
                raise ConfigError(str(answer["error"]))
            return [str(n) for n in answer.get("notes", [])]
    raise probe_failure(config.model, proc.returncode, proc.stderr or proc.stdout)


def probe_failure(model: str, returncode: int, output: str, folder: Path | None = None) -> ConfigError:
    """The line for a probe that died without its answer: the cause (a traceback's last line, the exception,
    whole up to 300 characters) and, when there was more, the file the whole output was saved to (in
    ``folder``, default the temporary folder)."""
    import tempfile  # lazy: only a probe that died writes a file

    lines = [ln.rstrip() for ln in output.splitlines() if ln.strip()]
    causes = [ln for ln in lines if not ln.startswith((" ", "\t", "Traceback ", "During handling", "The above"))]
    cause = (causes or lines or ["no output"])[-1].strip()
    cause = cause if len(cause) <= 300 else cause[:299] + "…"
    saved = ""
    if len(lines) > 1:
        try:
            fd, path = tempfile.mkstemp(prefix="nnlo-check-", suffix=".txt", dir=folder)
            with open(fd, "w", encoding="utf-8") as f:
                f.write(output)
            saved = f"; the whole output is in {path}"
        except OSError:
            saved = ""
    return ConfigError(f"checking {model} failed (exit {returncode}): {cause}{saved}; fix that, or pass "
                       "--no-check to skip the checks")


# -- the probe (runs in its own interpreter) -----------------------------------------------------------
def probe(config: TrainConfig, search: SearchConfig | None) -> list[str]:
    """Load the model as a rank would, check a search's space and open a sample of the data; the notes."""
    from nnlo.data.check import check_plan  # lazy: h5py, numpy (only the probe's own interpreter reads data)
    from nnlo.optimize import space as space_mod  # lazy: numpy

    source = load_model_source(config.model)
    hook = False
    if search is not None:
        space = space_mod.from_toml(search.space) if search.space else space_mod.from_model(source.module)
        check_schedule(search.schedule_spec(config), space.names, source.module, config.model)
        hook = source.module is not None and callable(getattr(source.module, "evaluate", None))
    if hook:
        return []  # a synthetic objective: no data is read
    return check_plan(data_plan(config, source))


def _main() -> None:
    data = json.loads(sys.stdin.read())
    try:
        config = TrainConfig.from_dict(data["config"])
        search = SearchConfig.from_dict(data["search"]) if data.get("search") else None
        answer: dict[str, Any] = {"notes": probe(config, search)}
    except NnloError as e:
        answer = {"error": str(e)}
    sys.stdout.write("\n" + _RESULT + json.dumps(answer) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    _main()
