"""Resource layout: how many nodes and ranks a run takes on a cluster, and which rank sits where.

``compute_layout(profile, shape, kind, workers=..., blocks=..., nodes=...)`` returns a :class:`Layout`;
``shape_from_args(kind, inner_argv)`` reads the process shape from an inner ``nnlo train/optimize`` argv;
``summary(layout)`` is the text that ``nnlo layout`` prints.
"""
from nnlo_sched.layout.compute import LayoutError, compute_layout, gpu_fraction, layout_for_spec
from nnlo_sched.layout.model import Layout, Placement
from nnlo_sched.layout.shape import shape_from_args, shape_from_options
from nnlo_sched.layout.text import summary

__all__ = [
    "Layout",
    "LayoutError",
    "Placement",
    "compute_layout",
    "gpu_fraction",
    "layout_for_spec",
    "shape_from_args",
    "shape_from_options",
    "summary",
]
