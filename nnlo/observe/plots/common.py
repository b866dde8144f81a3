"""What every plot shares: the Agg backend, colours, JSON reading that tolerates half-written files."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display on login or compute nodes
import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator

__all__ = ["COLORS", "MaxNLocator", "history_entries", "load_json", "num", "plt", "save", "series",
           "spans_decades"]

#: the ratio of the largest to the smallest value above which a plot's axis is logarithmic
LOG_RATIO = 30.0

COLORS = {"compute": "#2ca02c", "comm": "#1f77b4", "wait": "#d62728", "io": "#9467bd", "validate": "#ff7f0e",
          "other": "#c7c7c7"}


def load_json(path: Path) -> Any:
    """Parsed JSON, or None for a missing/half-written file (plots are best effort per file)."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def history_entries(data: Any) -> list[dict[str, Any]]:
    """The per-epoch list from ``history.json``: a list, or a dict holding one under a usual key."""
    if isinstance(data, dict):
        for key in ("history", "epochs", "entries"):
            if isinstance(data.get(key), list):
                data = data[key]
                break
    if not isinstance(data, list):
        return []
    return [d for d in data if isinstance(d, dict)]


def num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def spans_decades(values: list[float], ratio: float = LOG_RATIO) -> bool:
    """Whether ``values`` (all positive) span more than ``ratio`` from smallest to largest: a linear axis would
    flatten the later, smaller ones (a loss, a search's figure of merit falling from 300 to 0.4)."""
    return bool(values) and min(values) > 0 and max(values) / min(values) > ratio


def series(entries: list[dict[str, Any]], key: str) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for i, entry in enumerate(entries):
        y = num(entry.get(key))
        if y is None:
            continue
        x = num(entry.get("epoch"))
        xs.append(x if x is not None else float(i + 1))
        ys.append(y)
    return xs, ys


def save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
