"""Pure update rules on flat float32 numpy vectors: no MPI, no framework.

Every rule here works on the flat, contiguous float32 weight vector the backends expose
(:mod:`nnlo.backends.base`), updates it *in place* and keeps its state as plain numpy/python values, so the
runtime can move weights over MPI without copies and checkpoint any rule with ``state_dict()``.

- :mod:`nnlo.algorithms.specs`: the ``name:key=value,...`` optimizer spec strings shared by master and
  workers (parsing, defaults, the matching torch/Keras optimizer).
- :mod:`nnlo.algorithms.optimizers`: the master's optimizers (sgd, adam, rmsprop, adadelta) with torch's
  exact semantics (re-exports the spec API).
- :mod:`nnlo.algorithms.downpour`: the master applies a worker's accumulated weight delta.
- :mod:`nnlo.algorithms.easgd`: elastic averaging between a worker and the center.
- :mod:`nnlo.algorithms.gem`: Gradient Energy Matching, the rescaling a worker applies before it commits.
- :mod:`nnlo.algorithms.synchronous`: the mean of the workers' updates.
"""
