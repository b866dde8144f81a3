"""The distributed training runtime: one entry point, :func:`nnlo.training.driver.train`, and one class per
role (:mod:`~nnlo.training.master`, :mod:`~nnlo.training.worker`) that talk through :mod:`nnlo.transport`."""
