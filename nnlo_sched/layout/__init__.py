"""Resource layout: how many nodes and ranks a run takes on a cluster, and which rank sits where.

``compute_layout(profile, shape, kind, workers=..., blocks=..., nodes=...)`` returns a :class:`Layout`;
the shape comes from :meth:`nnlo.roles.Shape.for_run` (a submitted run's: ``RunSpec.shape``, laid out by
``RunSpec.layout_on``);
``summary(layout)`` is the text that ``nnlo layout`` prints.
"""
from nnlo_sched.layout.compute import LayoutError, compute_layout, gpu_fraction, idle_gpu_notes, oversubscribed
from nnlo_sched.layout.model import Layout, LayoutRecord, Placement
from nnlo_sched.layout.text import summary

__all__ = [
    "Layout",
    "LayoutError",
    "LayoutRecord",
    "Placement",
    "compute_layout",
    "gpu_fraction",
    "idle_gpu_notes",
    "oversubscribed",
    "summary",
]
