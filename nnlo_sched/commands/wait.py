"""``nnlo wait RUN``: block until a run's chain has ended, printing each change of its state; the exit status
says how it ended (0 done, 1 failed or cancelled or still going at --timeout).

It waits with :func:`nnlo_sched.api.wait`, which reads the run the way `nnlo status` does, so a run whose
jobs have all left the queue without recording an end is marked failed there and the wait ends: it never
hangs on a lost chain.
"""
from __future__ import annotations

from typing import Any

import click

from nnlo.contract import EXIT_DONE, EXIT_FAILED
from nnlo_sched import api
from nnlo_sched.commands.status import _fmt_jobs, _fmt_progress
from nnlo_sched.params import finite_range


def _line(view: dict[str, Any]) -> str:
    text = f"{view['run_id']}: {view['state']}, jobs {_fmt_jobs(view) or '-'}"
    prog = _fmt_progress(view["progress"])
    return text + (f", {prog}" if prog and prog != "-" else "")


@click.command("wait")
@click.argument("run")
@click.option("--timeout", type=finite_range(min=0), default=None, metavar="SECONDS",
              help="Give up after this long (exit 1; the run goes on).")
@click.option("--every", type=finite_range(min=0.2), default=2.0, show_default=True, metavar="SECONDS",
              help="Seconds between looks at the run.")
@click.option("--quiet", "-q", is_flag=True, help="Print nothing but the final line.")
def wait_command(run: str, timeout: float | None, every: float, quiet: bool) -> None:
    """Wait until RUN's chain has ended (done, failed or cancelled), printing each change of state.

    \b
    Exit status: 0 when the run is done; 1 when it failed or was cancelled, or is still going after
    --timeout (the run itself is left alone).
    """
    last = ""

    def show(st: api.RunStatus) -> None:
        nonlocal last
        line = _line(st.view)
        if line != last and (not quiet or st.ended):
            click.echo(line)
            last = line

    try:
        st = api.wait(run, timeout, every=every, on_change=show)
    except api.WaitTimeout as e:
        click.echo(f"nnlo: error: {e}; wait again with `nnlo wait {run}` or follow it with "
                   f"`nnlo status {run} --watch`", err=True)
        raise SystemExit(EXIT_FAILED) from None
    if st.state != "done":
        if st.error:
            click.echo(f"nnlo: error: run {st.run_id} {st.state}: {st.error}", err=True)
        raise SystemExit(EXIT_FAILED)
    raise SystemExit(EXIT_DONE)


command = wait_command
