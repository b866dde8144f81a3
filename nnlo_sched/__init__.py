"""nnlo orchestration: the ``nnlo`` command line, cluster profiles, layouts, batch scripts and run chains."""
