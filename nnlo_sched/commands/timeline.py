"""``nnlo timeline RUN``: merge a run's per-rank trace lines into one Chrome trace and print where time went.

Works on a finished run, on a run still going (a snapshot) and on a run killed at its walltime (torn last
lines are dropped). Open the result in https://ui.perfetto.dev or chrome://tracing.
"""
from __future__ import annotations

import json
from pathlib import Path

import click

from nnlo.contract import TIMELINE_FILE
from nnlo.errors import ConfigError
from nnlo.observe import summary as summ
from nnlo.observe import timeline
from nnlo_sched.commands.plot import resolve_run_dir
from nnlo_sched.params import finite_range


@click.command("timeline")
@click.argument("run", metavar="RUN_OR_DIR")
@click.option("--out", "-o", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help=f"Where to write the merged trace [default: RUN/{TIMELINE_FILE}].")
@click.option("--summary/--no-summary", default=True, show_default=True,
              help="Print the per-role time breakdown computed from the trace.")
@click.option("--from", "start", type=finite_range(min=0), default=None, metavar="SECONDS",
              help="Keep only events from this many seconds after the trace's start (a slice of a long run).")
@click.option("--to", "end", type=finite_range(min=0), default=None, metavar="SECONDS",
              help="Keep only events up to this many seconds after the trace's start.")
@click.option("--per-rank", is_flag=True, help="Also print one row per rank (to spot a straggler).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON (paths, ranks, summary).")
def timeline_command(run: str, out: Path | None, summary: bool, start: float | None, end: float | None,
                     per_rank: bool, as_json: bool) -> None:
    """Merge RUN's trace/rank-*.jsonl (written with --timeline) into one Chrome trace file.

    Works on finished runs, running ones (a snapshot) and killed ones (torn lines are dropped). The summary
    always covers the whole run; --from/--to only slice the written trace."""
    if start is not None and end is not None and end <= start:
        raise click.BadParameter(f"--to {end:g} must be after --from {start:g}", param_hint="--to")
    run_dir = resolve_run_dir(run)
    streams = timeline.load_run(run_dir)
    if not streams:
        raise ConfigError(
            f"no trace in {run_dir}: the run was not started with --timeline (add --timeline to nnlo train/optimize)"
        )
    result = timeline.write_trace(streams, out if out is not None else run_dir / timeline.MERGED_NAME, (start, end))
    ranks = summ.from_streams(streams)
    roles = summ.by_role(ranks)
    if as_json:
        click.echo(json.dumps({"path": str(result.path), "ranks": result.ranks, "events": result.events,
                               "dropped_lines": result.dropped_lines, "unclosed": result.unclosed,
                               "roles": roles, "per_rank": ranks if per_rank else None}, indent=1))
        return
    click.echo(result.describe())
    if summary and ranks:
        click.echo(summ.format_table(roles))
    if per_rank and ranks:
        click.echo(summ.format_rank_table(ranks))
    click.echo(f"open it in https://ui.perfetto.dev (or chrome://tracing): {result.path}")


command = timeline_command
