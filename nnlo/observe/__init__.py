"""Observability: timeline tracing, resource monitor, per-rank logs, progress and plots."""
