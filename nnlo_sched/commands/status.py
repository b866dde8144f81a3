"""``nnlo status [RUN]``: every run (or one in detail) with its state, chain of jobs, progress and best result.

Each scheduler is asked ONCE for all the jobs of all runs (``squeue -j a,b,c``, ``bjobs a b c``,
``qstat a b c``), never once per job, and a scheduler that cannot answer makes its jobs show ``?``
rather than failing the command. A run the record calls active but whose jobs have all left the queue
(killed with its batch shell, cancelled outside nnlo) is marked failed here, with the reason.
"""
from __future__ import annotations

import contextlib
import json
import math
import shlex
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import click

from nnlo.contract import BEST_FILE, HISTORY_FILE
from nnlo_sched.params import finite_range
from nnlo_sched.state import ACTIVE_STATES

#: the state ``nnlo status`` gives a run whose record cannot be read (the reason is its ``error``)
DAMAGED = "damaged"

_JOB_MARK = {"finished": "", "walltime": "", "running": "*", "queued": "…", "failed": "!", "cancelled": "x",
             "no-checkpoint": "!", "skipped": "-",
             "rank-died": "!"}


def _query_all(states: list[tuple[Any, Any]]) -> dict[str, dict[str, Any]]:
    """Scheduler answers for every alive job of ``states`` ((run, checked record) pairs): one call per batch
    system (per run for local)."""
    from nnlo_sched.schedulers import get_scheduler

    by_sched: dict[str, list[str]] = defaultdict(list)
    answers: dict[str, dict[str, Any]] = {}
    locals_: list[tuple[Any, list[str]]] = []
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


def _answers_for(answers: dict[str, dict[str, Any]], scheduler: str, run_dir: Path) -> dict[str, Any]:
    return answers.get(f"local:{run_dir}" if scheduler == "local" else scheduler, {})


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def progress(run_dir: Path, spec: Any) -> dict[str, Any]:
    """Epochs (training) or trials (optimization) done so far, and the best figure of merit; absent -> None."""
    from nnlo_sched.chain import checkpoint_dir

    out: dict[str, Any] = {"epoch": None, "epochs": None, "trials_done": None, "trials_total": None,
                           "best": None, "best_name": None}
    if spec.kind == "train":
        out["epochs"] = spec.train.epochs
        hist = _read_json(checkpoint_dir(run_dir, spec) / HISTORY_FILE)
        entries = hist.get("history") if isinstance(hist, dict) else hist
        if isinstance(entries, list) and entries:
            last = entries[-1] if isinstance(entries[-1], dict) else {}
            out["epoch"] = last.get("epoch", len(entries))
            best = hist.get("best") if isinstance(hist, dict) else None
            if isinstance(best, dict):
                name = "val_loss" if best.get("val_loss") is not None else "loss"
                out["best"], out["best_name"] = best.get(name), name
    else:
        best = _read_json(Path(run_dir) / BEST_FILE)
        if isinstance(best, dict):
            out["trials_done"] = best.get("trials_done")
            out["trials_total"] = best.get("trials_total")
            out["best"], out["best_name"] = best.get("best_fom"), best.get("fom_name")
            out["rungs"] = best.get("rungs")  # a --schedule search: trials at each rung, by epochs
    return out


def run_view(run: Any, answers: dict[str, dict[str, Any]], reconcile: bool = True) -> dict[str, Any]:
    """Everything status shows about one run, as plain data (the --json form)."""
    from nnlo_sched.chain import reconcile as reconcile_run
    from nnlo_sched.chain import retries
    from nnlo_sched.runs import load_spec, load_state

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
        jobs.append({
            "job_id": j.job_id, "status": j.status, "scheduler_state": info.state if info and j.alive else None,
            "submitted_at": j.submitted_at, "started_at": j.started_at, "ended_at": j.ended_at, "rc": j.rc,
            "host": j.host, "depends_on": j.depends_on,
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


def search_view(run: Any, st: Any, answers: dict[str, dict[str, Any]], reconcile: bool = True) -> dict[str, Any]:
    """A search run of many chains as one run: its chains (each an ordinary run's view), all their jobs, the
    trials done / running / leased / failed (journal, else trials.csv) and the best figure of merit."""
    from nnlo.errors import NnloError
    from nnlo_sched.runs import load_spec
    from nnlo_sched.search import chain_runs, participants_running, search_state, trial_counts

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
                     "best": best.get("best_fom"), "best_name": best.get("fom_name"), "rungs": best.get("rungs")},
        "elapsed_s": elapsed, "created_at": st.created_at, "walltime_s": spec.walltime_s,
        "max_resubmits": spec.max_resubmits, "kind": spec.kind,
        "retries": sum(c.get("retries", 0) for c in chains), "max_retries": spec.max_retries,
        "command": ["nnlo", spec.kind, *spec.args],
    }


# -- text ------------------------------------------------------------------------------------------
def _fmt_elapsed(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def _fmt_num(v: Any) -> str:
    if isinstance(v, (int, float)) and math.isfinite(v):
        return f"{v:.4g}"
    return "-"


def _fmt_progress(p: dict[str, Any]) -> str:
    if p["epoch"] is not None:
        return f"epoch {p['epoch']}" + (f"/{p['epochs']}" if p["epochs"] else "")
    if p["trials_done"] is not None:
        text = f"{p['trials_done']}" + (f"/{p['trials_total']}" if p["trials_total"] else "") + " trials"
        extra = [f"{p[k]} {k.split('_')[1]}" for k in ("trials_running", "trials_leased", "trials_failed")
                 if p.get(k)]
        rungs = p.get("rungs")
        if isinstance(rungs, dict) and rungs:  # trials standing at each rung: "at epochs 1:18 3:6 9:2"
            extra.append("at epochs " + " ".join(f"{e}:{n}" for e, n in rungs.items()))
        return text + (f" ({', '.join(extra)})" if extra else "")
    return "-"


def _fmt_jobs(view: dict[str, Any], limit: int = 4) -> str:
    if view.get("chains"):  # a search: each chain's jobs, c0:812>813* c1:814*>815…
        return " ".join(f"{c['run_id'].rsplit('/', 1)[-1]}:{_fmt_jobs(c, 3)}" for c in view["chains"])
    parts = []
    for j in view["jobs"]:
        mark = _JOB_MARK.get(j["status"], "")
        if j["scheduler_state"] == "UNKNOWN":
            mark = "?"
        parts.append(f"{j['job_id']}{mark}")
    if len(parts) > limit:
        parts = [*parts[:1], "…", *parts[-(limit - 2):]]
    return ">".join(parts) or "-"


def table(views: list[dict[str, Any]]) -> str:
    header = ("RUN", "NAME", "CLUSTER", "STATE", "JOBS", "PROGRESS", "BEST", "ELAPSED")
    rows = [header]
    for v in views:
        p = v["progress"]
        rows.append((v["run_id"], v["name"], v["cluster"], v["state"], _fmt_jobs(v), _fmt_progress(p),
                     _fmt_num(p["best"]), _fmt_elapsed(v["elapsed_s"])))
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    errors = [f"  {v['run_id']}: {v['error']}" for v in views if v["state"] in ("failed", DAMAGED) and v["error"]]
    return "\n".join(lines + errors)


def search_detail(v: dict[str, Any]) -> str:
    p = v["progress"]
    lines = [
        f"search    {v['run_id']}  ({len(v['chains'])} chain(s) sharing one search, {v['name']})",
        f"dir       {v['dir']}",
        f"command   {shlex.join(v['command'])}",
        f"state     {v['state']}" + (f": {v['error']}" if v["error"] else ""),
        f"trials    {_fmt_progress(p)}" + (f" (from {p['trials_source']})" if p.get("trials_source") else "")
        + (f"; best {p['best_name']} {_fmt_num(p['best'])}" if p["best"] is not None else ""),
        f"elapsed   {_fmt_elapsed(v['elapsed_s'])}",
    ]
    for c in v["chains"]:
        lines.append("")
        lines.append(f"chain {c['run_id'].rsplit('/', 1)[-1]}: {c['state']} on {c['cluster']}"
                     + (f": {c['error']}" if c.get("error") and c["state"] != "done" else ""))
        lines.extend("  " + ln for ln in detail(c).splitlines()[7:])  # its jobs (and a failed job's log)
    return "\n".join(lines)


def detail(v: dict[str, Any]) -> str:
    from nnlo_sched.chain import log_tail

    if v.get("search"):
        return search_detail(v)
    p = v["progress"]
    lines = [
        f"run       {v['run_id']}  ({v['kind']}, {v['name']})",
        f"dir       {v['dir']}",
        f"command   {shlex.join(v['command'])}",
        f"cluster   {v['cluster']} ({v['scheduler']}); walltime {_fmt_elapsed(v['walltime_s'])} per job, "
        f"up to {v['max_resubmits']} resubmission(s); {v['retries']} of {v['max_retries']} retries after a "
        "rank death used",
        f"state     {v['state']}" + (f": {v['error']}" if v["error"] else ""),
        f"progress  {_fmt_progress(p)}" + (f"; best {p['best_name']} {_fmt_num(p['best'])}" if p["best"] is not None
                                           else ""),
        f"elapsed   {_fmt_elapsed(v['elapsed_s'])}",
        "jobs:",
    ]
    for j in v["jobs"]:
        when = time.strftime("%m-%d %H:%M:%S", time.localtime(j["started_at"])) if j["started_at"] else "-"
        took = _fmt_elapsed(j["ended_at"] - j["started_at"]) if j["ended_at"] and j["started_at"] else "-"
        sched = f" [{j['scheduler_state']}]" if j["scheduler_state"] else ""
        rc = f" rc={j['rc']}" if j["rc"] is not None else ""
        lines.append(f"  {j['job_id']:>10}  {j['status']:<13}{sched} started {when} ran {took}{rc}"
                     + (f" on {j['host']}" if j["host"] else ""))
    if v["state"] == "failed" and v["jobs"]:
        last = next((j for j in reversed(v["jobs"]) if j["started_at"]), None)
        if last is not None:
            tail = log_tail(Path(v["dir"]), last["job_id"], 10)
            if tail:
                lines.append(f"log of job {last['job_id']} (last lines):")
                lines.extend(f"  | {t}" for t in tail)
    return "\n".join(lines)


def damaged_view(run: Any, reason: str) -> dict[str, Any]:
    """What status shows for a run whose record cannot be read: its id, directory and why (``error``)."""
    return {"run_id": run.id, "name": "?", "cluster": "?", "scheduler": "?", "state": DAMAGED, "error": reason,
            "jobs": [], "dir": str(run.dir), "elapsed_s": None, "created_at": None,
            "progress": {"epoch": None, "epochs": None, "trials_done": None, "trials_total": None,
                         "best": None, "best_name": None}}


def collect(ref: str | None) -> list[dict[str, Any]]:
    """The views of run ``ref`` (a damaged one is a one-line error), or of every run (a damaged one is listed
    as ``damaged`` with the reason and never hides the others)."""
    from nnlo.errors import NnloError
    from nnlo_sched.runs import find_run, list_runs, load_spec, load_state

    runs = [find_run(ref)] if ref else list_runs()
    checked: list[tuple[Any, Any]] = []
    damaged: dict[str, str] = {}
    for run in runs:
        try:
            st = load_state(run.dir)
            checked.append((run, st))
            load_spec(run.dir)
            if st.is_search:  # its chains' jobs are asked for in the same one call per batch system
                from nnlo_sched.search import chain_runs

                for chain in chain_runs(run.dir, st):
                    with contextlib.suppress(NnloError):
                        checked.append((chain, load_state(chain.dir)))
        except NnloError as e:
            if ref:
                raise
            checked = [c for c in checked if c[0] is not run and not str(c[0].dir).startswith(f"{run.dir}/")]
            damaged[run.id] = str(e)
    answers = _query_all(checked)
    views = []
    for run in runs:
        if run.id in damaged:
            views.append(damaged_view(run, damaged[run.id]))
            continue
        try:
            views.append(run_view(run, answers))
        except NnloError as e:  # changed or damaged since it was checked: shown as such, never hiding the others
            if ref:
                raise
            views.append(damaged_view(run, str(e)))
        except Exception as e:  # a field of a damaged record that nothing checked: still one run only
            if ref:
                raise
            views.append(damaged_view(run, f"{run.dir} holds a damaged record ({type(e).__name__}: {e})"))
    return views


@click.command("status")
@click.argument("run", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.option("--watch", "-w", is_flag=True, help="Refresh until interrupted or every run shown has ended.")
@click.option("--every", type=finite_range(min=0.5), default=10.0, show_default=True, metavar="SECONDS",
              help="Seconds between refreshes with --watch.")
def status_command(run: str | None, as_json: bool, watch: bool, every: float) -> None:
    """Show runs (their state, chain of jobs, progress, best figure of merit, elapsed time), or RUN in detail.

    \b
    States: queued, running, resubmitting (waiting for its next job), done, failed, cancelled; damaged
    (its record cannot be read: the reason is shown, the other runs are listed as usual).
    Jobs: a chain like 812>813*>814… (* running, … queued, ! failed or a rank died, x cancelled,
    ? scheduler cannot tell).
    Runs live under $NNLO_HOME (default ./nnlo-runs).
    """
    while True:
        views = collect(run)
        if as_json:
            click.echo(json.dumps(views[0] if run else views, indent=2, default=str))
        elif not views:
            from nnlo_sched.runs import runs_home
            click.echo(f"no runs under {runs_home()} (submit one with `nnlo submit`, or set NNLO_HOME)")
        else:
            if watch:
                click.echo("\x1b[2J\x1b[H" + time.strftime("%H:%M:%S") + f"  (every {every:g} s; Ctrl-C to stop)")
            click.echo(detail(views[0]) if run else table(views))
        if not watch or not any(v["state"] in ACTIVE_STATES for v in views):
            return
        time.sleep(every)


command = status_command
