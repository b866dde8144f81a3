"""The distributed training runtime.

One entry point, :func:`nnlo.training.driver.train` (``nnlo train`` and the optimization engine both call
it), and one class per role, talking through :mod:`nnlo.transport`:

====================  ==============================================================================
module                what it holds
====================  ==============================================================================
``driver``            collective, failure-safe set-up; runs the rank's role; shares the result
``context``           what every role needs (communicator, config, hierarchy, output folder, stop)
``master``            the parameter server: serves workers, epoch barrier, validation, checkpoints
``worker``            trains its shard ``sync_every`` batches at a time, exchanges, writes its part
``modes``             what one exchange means per algorithm (Downpour, EASGD, GEM; synchronous)
``stopping``          early stopping and target metrics (``val_loss,<,4``)
``callbacks``         the Python API's epoch-end callbacks on the master (one may stop the training)
``deadline``          the walltime deadline's stop margin (stop signals: :mod:`nnlo.stop`)
``history``           per-epoch history, best epoch, :class:`~nnlo.training.history.TrainResult`
``failure``           :class:`~nnlo.training.failure.RankFailure`: one rank's failure known to all
``watchdog``          aborts the job when a blocking wait outlives ``NNLO_COMM_TIMEOUT`` (dead peer)
``allreduce``         pure all-reduce data parallelism (``--mode allreduce`` / ``--n-masters 0``)
``groups``            all-reduce worker groups (``--n-processes K``) acting as one worker
``streams``           a rank's random streams in the checkpoint: every rank's kept, each rank's restored
``submaster``         sub-masters under an uber-master (``--n-masters M > 1``)
``serve``             the exchange loop masters and sub-masters share: barrier, stops, failure protocol
``buffers``           the mean of the workers' BatchNorm-like buffers, for a model that never trains
``validation``        validation loss and accuracy of the central weights
``checkpoint_round``  the master's share of a checkpoint: whether one is due, opening and publishing it
====================  ==============================================================================

The shape of a training group (:attr:`nnlo.config.TrainConfig.training_group_shape`, ruled by
:meth:`nnlo.roles.Shape.for_run`) picks the roles; every role class talks to its peers only through
:class:`~nnlo.transport.Link` (parameter-server exchanges) or flat-buffer collectives, arms the watchdog
around blocking waits, and reports failures through the master so that no rank is left waiting.
"""
