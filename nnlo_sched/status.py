"""The status model: every run's state, chain of jobs, progress and best result, as plain data.

What ``nnlo status``, ``nnlo wait`` and :func:`nnlo_sched.api.query` show (the ``--json`` form); the text is
the command's (:mod:`nnlo_sched.commands.status`). Each scheduler is asked ONCE for all the jobs of all runs
(``squeue -j a,b,c``, ``bjobs a b c``, ``qstat a b c``), never once per job, and a scheduler that cannot
answer makes its jobs ``UNKNOWN`` rather than failing. A run the record calls active but whose jobs have all
left the queue (killed with its batch shell, cancelled outside nnlo) is marked failed here, with the reason.
"""
from __future__ import annotations

import contextlib
import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from nnlo.contract import BEST_FILE, HISTORY_FILE
from nnlo.errors import NnloError
from nnlo_sched.chain import reconcile as reconcile_run
from nnlo_sched.chain import retries
from nnlo_sched.inner import SCRIPT
from nnlo_sched.runs import Run, chain_runs, find_run, list_runs, load_state
from nnlo_sched.schedulers import JobInfo, get_scheduler
from nnlo_sched.schedulers.base import PENDING
from nnlo_sched.search import participants_running, search_state, trial_counts
from nnlo_sched.spec import RunSpec, checkpoint_dir, load_spec
from nnlo_sched.state import ACTIVE_STATES, RunState

#: the state a run gets whose record cannot be read (the reason is its ``error``)
DAMAGED = "damaged"
#: a scheduler's answers: {scheduler name, or ``local:<run dir>``: {job id: JobInfo}}
Answers = dict[str, dict[str, JobInfo]]


def query_jobs(states: list[tuple[Run, RunState]]) -> Answers:
    """Scheduler answers for every alive job of ``states`` ((run, checked record) pairs): one call per batch
    system (per run for local)."""
    by_sched: dict[str, list[str]] = defaultdict(list)
    answers: Answers = {}
    locals_: list[tuple[Run, list[str]]] = []
    for run, st in states:
        ids = [j.job_id for j in st.jobs if j.alive]
        if not ids:
            continue
        if st.scheduler == "local":
            locals_.append((run, ids))
        else:
            by_sched[st.scheduler].extend(ids)
    for name, ids in by_sched.items():
        answers[name] = get_scheduler(name).query(ids)
    for run, ids in locals_:
        answers[f"local:{run.dir}"] = get_scheduler("local", run.dir).query(ids)
    return answers


def _answers_for(answers: Answers, scheduler: str, run_dir: Path) -> dict[str, JobInfo]:
    return answers.get(f"local:{run_dir}" if scheduler == "local" else scheduler, {})


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def progress(run_dir: Path, spec: RunSpec) -> dict[str, Any]:
    """Epochs (training) or trials (optimization) done so far, and the best figure of merit; absent -> None."""
    out: dict[str, Any] = {"epoch": None, "epochs": None, "trials_done": None, "trials_total": None,
                           "best": None, "best_name": None}
    folder = checkpoint_dir(run_dir, spec)  # a script run: the training or search its script runs now
    hist = _read_json(folder / HISTORY_FILE) if spec.kind != "optimize" else None
    if spec.kind == "train" or (spec.kind == SCRIPT and hist is not None):
        config = hist.get("config") if isinstance(hist, dict) else None
        out["epochs"] = config.get("epochs") if spec.kind == SCRIPT and isinstance(config, dict) else spec.train.epochs
        entries = hist.get("history") if isinstance(hist, dict) else hist
        if isinstance(entries, list) and entries:
            last = entries[-1] if isinstance(entries[-1], dict) else {}
            out["epoch"] = last.get("epoch", len(entries))
            best = hist.get("best") if isinstance(hist, dict) else None
            if isinstance(best, dict):
                name = "val_loss" if best.get("val_loss") is not None else "loss"
                out["best"], out["best_name"] = best.get(name), name
    else:
        best = _read_json((folder if spec.kind == SCRIPT else Path(run_dir)) / BEST_FILE)
        if isinstance(best, dict):
            out["trials_done"] = best.get("trials_done")
            out["trials_total"] = best.get("trials_total")
            out["best"], out["best_name"] = best.get("best_fom"), best.get("fom_name")
            out["rungs"] = best.get("rungs")  # a --schedule search: trials at each rung, by epochs
            out.update(fidelity(best, spec))
    return out


def fidelity(best: dict[str, Any], spec: RunSpec) -> dict[str, Any]:
    """A staged search's figures by fidelity, from its best.json: the epochs and rung of the best
    (``best_epochs``, ``best_rung``), the best at any fidelity where it differs (``best_any``), the rank
    correlation between rungs (``rung_correlation``) and, when it is low, what to do (``advice``)."""
    if not best.get("rungs"):
        return {}
    schedule = spec.search.schedule if spec.search is not None else None
    corr = best.get("rung_correlation") if isinstance(best.get("rung_correlation"), dict) else None
    return {"best_epochs": best.get("best_epochs"), "best_rung": best.get("best_rung"),
            "best_any": best.get("best_any") if isinstance(best.get("best_any"), dict) else None,
            "rung_correlation": corr,
            "advice": correlation_advice(schedule) if corr is not None and corr.get("low") else None}


def correlation_advice(schedule: str | None) -> str | None:
    """What to do when a search's early ranks predict its late ones poorly (None: PBT, whose steps are no
    stopping decisions on an early rank)."""
    if schedule == "asha":
        return ("early ranks predict late ones poorly here, so ASHA may have stopped the eventual best: a larger "
                "--min-epochs, or --schedule hyperband (it hedges with brackets that start later)")
    if schedule == "hyperband":
        return "early ranks predict late ones poorly here: a larger --min-epochs (or --schedule full)"
    return None


def run_view(run: Run, answers: Answers, reconcile: bool = True) -> dict[str, Any]:
    """Everything status shows about one run, as plain data (the --json form)."""
    st = load_state(run.dir)
    if st.is_search:
        return search_view(run, st, answers, reconcile)
    infos = _answers_for(answers, st.scheduler, run.dir)
    if reconcile and st.state in ACTIVE_STATES:
        st = reconcile_run(run.dir, infos)
    spec = load_spec(run.dir)
    started = [j.started_at for j in st.jobs if j.started_at]
    ended = [j.ended_at for j in st.jobs if j.ended_at]
    if started:
        end = time.time() if st.state in ACTIVE_STATES or not ended else max(ended)
        elapsed = max(0.0, end - min(started))
    else:
        elapsed = None
    jobs = []
    for j in st.jobs:
        info = infos.get(j.job_id)
        reason, never = _pending(st.scheduler, info if j.alive else None)
        jobs.append({
            "job_id": j.job_id, "status": j.status, "scheduler_state": info.state if info and j.alive else None,
            "submitted_at": j.submitted_at, "started_at": j.started_at, "ended_at": j.ended_at, "rc": j.rc,
            "host": j.host, "depends_on": j.depends_on, "pending_reason": reason, "never_starts": never,
        })
    return {
        # the run id is the directory's name: what every command takes (a moved or copied run keeps working)
        "run_id": run.id, "name": st.name, "cluster": st.cluster, "scheduler": st.scheduler,
        "state": st.state, "error": st.error, "dir": str(run.dir), "jobs": jobs,
        "progress": progress(run.dir, spec), "elapsed_s": elapsed, "created_at": st.created_at,
        "walltime_s": spec.walltime_s, "max_resubmits": spec.max_resubmits, "kind": spec.kind,
        "retries": retries(st), "max_retries": spec.max_retries,
        "command": ["nnlo", spec.kind, *spec.args],  # as typed (the job runs the typed record in spec.json)
    }


def _pending(scheduler: str, info: JobInfo | None) -> tuple[str | None, str | None]:
    """A pending job's reason from its scheduler (``squeue %r``), and the fix when that reason means it never
    starts as submitted (:meth:`~nnlo_sched.schedulers.base.Scheduler.never_starts`)."""
    if info is None or info.state != PENDING or not info.reason or info.reason == "None":
        return None, None
    try:
        never = get_scheduler(scheduler).never_starts(info.reason) if scheduler != "local" else None
    except NnloError:  # a record naming a scheduler this nnlo does not know: the reason alone
        never = None
    return info.reason, never


def search_view(run: Run, st: RunState, answers: Answers, reconcile: bool = True) -> dict[str, Any]:
    """A search run of many chains as one run: its chains (each an ordinary run's view), all their jobs, the
    trials done / running / leased / failed (journal, else trials.csv) and the best figure of merit."""
    chains = []
    for c in chain_runs(run.dir, st):
        try:
            chains.append(run_view(c, answers, reconcile))
        except NnloError as e:
            chains.append(damaged_view(c, str(e)))
    state, error = search_state(run.dir)
    spec = load_spec(run.dir)
    counts = trial_counts(run.dir, spec, participants_running(run.dir))
    best = _read_json(Path(run.dir) / BEST_FILE)
    best = best if isinstance(best, dict) else {}
    jobs = [dict(j, chain=c["run_id"].rsplit("/", 1)[-1]) for c in chains for j in c["jobs"]]
    started = [j["started_at"] for j in jobs if j["started_at"]]
    ended = [j["ended_at"] for j in jobs if j["ended_at"]]
    elapsed = None
    if started:
        end = time.time() if state in ACTIVE_STATES or not ended else max(ended)
        elapsed = max(0.0, end - min(started))
    return {
        "run_id": run.id, "name": st.name, "search": True,
        "cluster": ",".join(dict.fromkeys(c["cluster"] for c in chains)) or st.cluster,
        "scheduler": ",".join(dict.fromkeys(c["scheduler"] for c in chains)) or st.scheduler,
        "state": state, "error": error, "dir": str(run.dir), "jobs": jobs, "chains": chains,
        "progress": {"epoch": None, "epochs": None, "trials_done": counts.done, "trials_total": counts.total,
                     "trials_failed": counts.failed, "trials_leased": counts.leased,
                     "trials_running": counts.running, "trials_source": counts.source,
                     "best": best.get("best_fom"), "best_name": best.get("fom_name"), "rungs": best.get("rungs"),
                     **fidelity(best, spec)},
        "elapsed_s": elapsed, "created_at": st.created_at, "walltime_s": spec.walltime_s,
        "max_resubmits": spec.max_resubmits, "kind": spec.kind,
        "retries": sum(c.get("retries", 0) for c in chains), "max_retries": spec.max_retries,
        "command": ["nnlo", spec.kind, *spec.args],
    }


def damaged_view(run: Run, reason: str) -> dict[str, Any]:
    """What status shows for a run whose record cannot be read: its id, directory and why (``error``)."""
    return {"run_id": run.id, "name": "?", "cluster": "?", "scheduler": "?", "state": DAMAGED, "error": reason,
            "jobs": [], "dir": str(run.dir), "elapsed_s": None, "created_at": None,
            "progress": {"epoch": None, "epochs": None, "trials_done": None, "trials_total": None,
                         "best": None, "best_name": None}}


def collect(ref: str | None) -> list[dict[str, Any]]:
    """The views of run ``ref`` (a damaged one is a one-line error), or of every run (a damaged one is listed
    as ``damaged`` with the reason and never hides the others)."""
    return views([find_run(ref)], named=True) if ref else views(list_runs(), named=False)


def views(runs: list[Run], *, named: bool) -> list[dict[str, Any]]:
    """The views of ``runs``, every batch system asked once for all their jobs (a search's chains' too).

    ``named``: the user named these runs, so a damaged one raises its one-line reason; otherwise it is listed
    as ``damaged`` with the reason and never hides the others.
    """
    checked: list[tuple[Run, RunState]] = []
    damaged: dict[str, str] = {}
    for run in runs:
        try:
            st = load_state(run.dir)
            checked.append((run, st))
            load_spec(run.dir)
            if st.is_search:  # its chains' jobs are asked for in the same one call per batch system
                for chain in chain_runs(run.dir, st):
                    with contextlib.suppress(NnloError):
                        checked.append((chain, load_state(chain.dir)))
        except NnloError as e:
            if named:
                raise
            checked = [c for c in checked if c[0] is not run and not str(c[0].dir).startswith(f"{run.dir}/")]
            damaged[run.id] = str(e)
    answers = query_jobs(checked)
    out = []
    for run in runs:
        if run.id in damaged:
            out.append(damaged_view(run, damaged[run.id]))
            continue
        try:
            out.append(run_view(run, answers))
        except NnloError as e:  # changed or damaged since it was checked: shown as such, never hiding the others
            if named:
                raise
            out.append(damaged_view(run, str(e)))
        except Exception as e:  # a field of a damaged record that nothing checked: still one run only
            if named:
                raise
            out.append(damaged_view(run, f"{run.dir} holds a damaged record ({type(e).__name__}: {e})"))
    return out
