"""Deep-learning backends behind one small interface (see :mod:`nnlo.backends.base`)."""
