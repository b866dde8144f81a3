"""``nnlo plot RUN``: PNG plots of a run's learning curves, optimization trials and per-rank utilisation."""
from __future__ import annotations

import importlib
from pathlib import Path

import click


@click.command("plot")
@click.argument("run", metavar="RUN_OR_DIR")
@click.option("--out", "-o", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder for the PNG files [default: RUN/plots].")
def plot_command(run: str, out: Path | None) -> None:
    """Write loss/metric curves (history.json), best fom vs trials and each parameter vs fom (trials.json),
    and per-rank utilisation (the --timeline trace) of RUN as PNG files."""
    from nnlo.errors import ConfigError
    from nnlo.observe.plots import plot_run

    run_dir = resolve_run_dir(run)
    written = plot_run(run_dir, out)
    if not written:
        raise ConfigError(
            f"nothing to plot in {run_dir}: no history.json, trials.json or --timeline trace found there"
        )
    for path in written:
        click.echo(str(path))



def resolve_run_dir(value: str) -> Path:
    """An existing directory as given; otherwise a run name, looked up by ``nnlo_sched.runs`` if present."""
    path = Path(value).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise click.BadParameter(f"{value} is a file; pass the run's directory", param_hint="RUN_OR_DIR")
    try:
        runs = importlib.import_module("nnlo_sched.runs")
    except ImportError:
        runs = None
    for name in ("resolve_run_dir", "resolve", "find_run", "run_dir"):
        finder = getattr(runs, name, None) if runs is not None else None
        if callable(finder):
            try:
                found = finder(value)
            except Exception:  # noqa: BLE001 - any lookup failure becomes the one-line error below
                found = None
            found = getattr(found, "path", getattr(found, "dir", found))
            if found is not None and Path(found).is_dir():
                return Path(found)
            break
    raise click.BadParameter(
        f"no run directory or run named {value!r}; pass the directory the run wrote (its --checkpoint/output dir)",
        param_hint="RUN_OR_DIR",
    )


command = plot_command
