"""``nnlo status [RUN]``: every run (or one in detail) with its state, chain of jobs, progress and best result.

The views come from the status model (:mod:`nnlo_sched.status`: one scheduler call per batch system for all
the runs' jobs); this module turns them into the table, a run's detail, or JSON. A job the scheduler cannot
answer for shows ``?`` rather than failing the command.
"""
from __future__ import annotations

import json
import math
import shlex
import time
from pathlib import Path
from typing import Any

import click

from nnlo.contract import ENV_HOME
from nnlo_sched.chain import log_tail
from nnlo_sched.params import finite_range
from nnlo_sched.runs import local_trainings, runs_home
from nnlo_sched.state import ACTIVE_STATES
from nnlo_sched.status import DAMAGED, collect

_JOB_MARK = {"finished": "", "walltime": "", "running": "*", "queued": "…", "failed": "!", "cancelled": "x",
             "no-checkpoint": "!", "skipped": "-", "not-needed": "-",
             "rank-died": "!"}


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


def _fmt_best(p: dict[str, Any], short: bool = False) -> str:
    """The best figure of merit; under a schedule at which epochs it was reached, and the best at any
    fidelity where it is another figure (``0.209@27ep, 0.127@3ep`` in the table)."""
    if p["best"] is None:
        return "-" if short else ""
    any_ = p.get("best_any")
    epochs = p.get("best_epochs")
    if short:
        text = _fmt_num(p["best"]) + (f"@{epochs}ep" if epochs is not None and p.get("rungs") else "")
        return text + (f", {_fmt_num(any_['fom'])}@{any_['epochs']}ep" if any_ else "")
    text = f"; best {p['best_name']} {_fmt_num(p['best'])}"
    if epochs is not None and p.get("rungs"):
        text += f" at {epochs} epochs (the most any trial trained)"
    if any_:
        text += (f"; best at any fidelity {_fmt_num(any_['fom'])} (trial {any_['trial']} at {any_['epochs']} "
                 "epochs)")
    return text


def _fmt_correlation(p: dict[str, Any]) -> str | None:
    """The rank correlation between a staged search's rungs and the advice when it is low, or None."""
    corr = p.get("rung_correlation")
    if not corr:
        return None
    parts = ", ".join(f"{r['epochs']} epochs {r['rho']:.2f} (n {r['n']})" for r in corr["rungs"])
    text = f"rank correlation with {corr['top_epochs']} epochs: {parts}"
    return text + (f" - low: {p['advice']}" if p.get("advice") else "")


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
                     _fmt_best(p, short=True), _fmt_elapsed(v["elapsed_s"])))
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    errors = [f"  {v['run_id']}: {v['error']}" for v in views if v["state"] in ("failed", DAMAGED) and v["error"]]
    return "\n".join(lines + errors + [f"  {v['run_id']}: {line}" for v in views for line in never_lines(v)])


def never_lines(view: dict[str, Any]) -> list[str]:
    """One line per pending job whose scheduler says it never starts as submitted: the reason and the fix."""
    if view.get("chains"):
        return [line for c in view["chains"] for line in never_lines(c)]
    return [f"job {j['job_id']} will never start ({j['pending_reason']}): {j['never_starts']}; `nnlo cancel "
            f"{view['run_id'].split('/', 1)[0]}` and submit again with the change"
            for j in view["jobs"] if j.get("never_starts")]


def search_detail(v: dict[str, Any]) -> str:
    p = v["progress"]
    lines = [
        f"search    {v['run_id']}  ({len(v['chains'])} chain(s) sharing one search, {v['name']})",
        f"dir       {v['dir']}",
        f"command   {shlex.join(v['command'])}",
        f"state     {v['state']}" + (f": {v['error']}" if v["error"] else ""),
        f"trials    {_fmt_progress(p)}" + (f" (from {p['trials_source']})" if p.get("trials_source") else "")
        + _fmt_best(p),
        *([f"rungs     {c}"] if (c := _fmt_correlation(p)) else []),
        f"elapsed   {_fmt_elapsed(v['elapsed_s'])}",
    ]
    for c in v["chains"]:
        lines.append("")
        lines.append(f"chain {c['run_id'].rsplit('/', 1)[-1]}: {c['state']} on {c['cluster']} ({c['dir']})"
                     + (f": {c['error']}" if c.get("error") and c["state"] != "done" else ""))
        own = detail(c).splitlines()
        lines.extend("  " + ln for ln in own[own.index("jobs:"):])  # its jobs (and a failed job's log)
    return "\n".join(lines)


def detail(v: dict[str, Any]) -> str:
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
        f"progress  {_fmt_progress(p)}" + _fmt_best(p),
        *([f"rungs     {c}"] if (c := _fmt_correlation(p)) else []),
        f"elapsed   {_fmt_elapsed(v['elapsed_s'])}",
        "jobs:",
    ]
    for j in v["jobs"]:
        when = time.strftime("%m-%d %H:%M:%S", time.localtime(j["started_at"])) if j["started_at"] else "-"
        took = _fmt_elapsed(j["ended_at"] - j["started_at"]) if j["ended_at"] and j["started_at"] else "-"
        sched = f" [{j['scheduler_state']}]" if j["scheduler_state"] else ""
        if j.get("pending_reason"):
            sched = f" [{j['scheduler_state']}: {j['pending_reason']}{', never starts' if j['never_starts'] else ''}]"
        rc = f" rc={j['rc']}" if j["rc"] is not None else ""
        lines.append(f"  {j['job_id']:>10}  {j['status']:<13}{sched} started {when} ran {took}{rc}"
                     + (f" on {j['host']}" if j["host"] else ""))
    lines.extend(never_lines(v))
    if v["state"] == "failed" and v["jobs"]:
        last = next((j for j in reversed(v["jobs"]) if j["started_at"]), None)
        if last is not None:
            tail = log_tail(Path(v["dir"]), last["job_id"], 10)
            if tail:
                lines.append(f"log of job {last['job_id']} (last lines):")
                lines.extend(f"  | {t}" for t in tail)
    return "\n".join(lines)


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
    - not run: the run had ended (a successor not needed, or one that started after the end), ? scheduler
    cannot tell).
    Runs live under $NNLO_HOME (default ./nnlo-runs). Trainings and searches run with -n or mpirun are not
    submitted runs and are not listed; with no submitted run, status names those in this folder.
    """
    while True:
        views = collect(run)
        if as_json:
            click.echo(json.dumps(views[0] if run else views, indent=2, default=str))
        elif not views:
            here = ", ".join(str(p) for p in local_trainings(Path.cwd()))
            click.echo(f"no submitted runs under {runs_home()} (submit one with `nnlo submit`, or set {ENV_HOME})"
                       + (f"; run here with -n or mpirun (not listed): {here} (`nnlo plot DIR` draws one)"
                          if here else ""))
        else:
            if watch:
                click.echo("\x1b[2J\x1b[H" + time.strftime("%H:%M:%S") + f"  (every {every:g} s; Ctrl-C to stop)")
            click.echo(detail(views[0]) if run else table(views))
        if not watch or not any(v["state"] in ACTIVE_STATES for v in views):
            return
        time.sleep(every)


command = status_command
