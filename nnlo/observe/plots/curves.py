"""Learning curves: loss and metrics per epoch of one training, and every trial's curve of a search."""
from __future__ import annotations

import math
from collections.abc import Collection
from pathlib import Path
from typing import Any

from nnlo.observe.plots.common import MaxNLocator, num, plt, save, series, spans_decades

_LOSS_KEYS = ("train_loss", "loss", "val_loss")
_NOT_METRICS = {"epoch", "time", "timestamp", "wall_time", "t", "step", "samples", "updates"}
_MAX_PANELS = 12
_MAX_CURVES = 500
_LABELS = {"train_loss": "train loss", "loss": "train loss", "val_loss": "validation loss"}


def plot_history(entries: list[dict[str, Any]], out_dir: Path, prefix: str = "") -> list[Path]:
    """``loss.png`` (train/val loss per epoch) and ``metrics.png`` (other numeric series).

    A metric and its ``val_`` twin (``accuracy``/``val_accuracy``) share one panel: train against validation.
    """
    written: list[Path] = []
    curves = {k: series(entries, k) for k in _LOSS_KEYS}
    if curves["train_loss"][0]:
        curves.pop("loss")
    curves = {k: v for k, v in curves.items() if v[0]}
    if curves:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for key, (xs, ys) in curves.items():
            ax.plot(xs, ys, marker="o", ms=3, label=_LABELS.get(key, key.replace("_", " ")))
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel("loss")
        if spans_decades([y for _, ys in curves.values() for y in ys]):
            ax.set_yscale("log")
        ax.set_title(f"{prefix or 'training'}: loss per epoch")
        ax.grid(alpha=0.3)
        ax.legend()
        written.append(save(fig, out_dir / f"{prefix}{'-' if prefix else ''}loss.png"))
    keys: list[str] = []
    for entry in entries:
        for key, value in entry.items():
            if key not in keys and key not in _LOSS_KEYS and key not in _NOT_METRICS and num(value) is not None:
                keys.append(key)
    panels: list[list[str]] = []
    for key in keys:
        base = key.removeprefix("val_")
        twin = next((p for p in panels if p[0].removeprefix("val_") == base), None)
        if twin is not None and key != twin[0]:
            twin.append(key)
        else:
            panels.append([key])
    panels = panels[:_MAX_PANELS]
    if panels:
        cols = min(3, len(panels))
        rows = math.ceil(len(panels) / cols)
        fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
        for ax, panel in zip(axes.flat, panels, strict=False):  # the grid may have spare axes
            for key in sorted(panel, key=lambda k: k.startswith("val_")):
                xs, ys = series(entries, key)
                label = "validation" if key.startswith("val_") else "train"
                ax.plot(xs, ys, marker="o", ms=3, label=label if len(panel) > 1 else None)
            ax.set_title(panel[0].removeprefix("val_").replace("_", " "), fontsize=10)
            ax.set_xlabel("epoch")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.grid(alpha=0.3)
            if len(panel) > 1:
                ax.legend(fontsize=8)
        for ax in list(axes.flat)[len(panels):]:
            ax.axis("off")
        fig.suptitle(f"{prefix or 'training'}: metrics per epoch")
        written.append(save(fig, out_dir / f"{prefix}{'-' if prefix else ''}metrics.png"))
    return written


def plot_trial_curves(curves: list[tuple[str, list[dict[str, Any]]]], out_dir: Path,
                      stopped: Collection[int] = ()) -> list[Path]:
    """``trial-curves.png``: the validation loss (else the loss) per epoch of every trial and fold.

    One thin line each, coloured from the best final value (dark) to the worst (light), the best labelled:
    shows at a glance whether bad trials could have been stopped early. ``stopped``: ids of trials a schedule
    did stop early (their curves, labelled ``trials/<id>/...``, are grey and dashed, ending in a cross).
    """
    key = "val_loss" if any(series(e, "val_loss")[0] for _, e in curves) else "loss"
    runs = [(label, *series(entries, key)) for label, entries in curves]
    runs = [(label, xs, ys) for label, xs, ys in runs if xs][:_MAX_CURVES]
    if not runs:
        return []
    early = [_trial_id(label) in stopped for label, _, _ in runs]
    finals = [ys[-1] if not early[i] else math.inf for i, (_, _, ys) in enumerate(runs)]
    order = sorted(range(len(runs)), key=lambda i: finals[i])
    rank_of = {i: r for r, i in enumerate(order)}
    cmap = plt.get_cmap("viridis")
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for i, (label, xs, ys) in enumerate(runs):
        if early[i]:
            ax.plot(xs, ys, ls="--", lw=0.8, color="#9a9a9a", alpha=0.7, zorder=1)
            ax.plot(xs[-1:], ys[-1:], marker="x", ms=5, color="#7f7f7f", ls="none", zorder=1)
            continue
        shade = rank_of[i] / max(1, len(runs) - 1)
        best = rank_of[i] == 0
        ax.plot(xs, ys, lw=2.2 if best else 1.0, alpha=1.0 if best else 0.6, color=cmap(0.85 * shade),
                label=f"best: {label}" if best else None, zorder=3 if best else 2)
    ax.set_xlabel("epoch")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(key.replace("_", " "))
    ends = [ys[-1] for _, _, ys in runs]
    if all(y > 0 for _, _, ys in runs for y in ys) and max(ends) / max(min(ends), 1e-300) > 30:
        ax.set_yscale("log")
    if any(early):
        ax.plot([], [], ls="--", marker="x", ms=5, color="#9a9a9a", label=f"stopped early ({sum(early)})")
    ax.set_title(f"{key.replace('_', ' ')} per epoch of {len(runs)} trial runs (dark = better)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return [save(fig, out_dir / "trial-curves.png")]


def _trial_id(label: str) -> int | None:
    """The trial id of a curve labelled ``trials/<id>/fold-<f>`` (None for another label)."""
    parts = label.split("/")
    if len(parts) >= 2 and parts[0] == "trials" and parts[1].isdigit():
        return int(parts[1])
    return None


