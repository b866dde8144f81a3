"""The distributed training runtime.

One entry point, :func:`nnlo.training.driver.train` (``nnlo train`` and the optimization engine both call
it), and one class per role, talking through :mod:`nnlo.transport`:

====================  ==============================================================================
module                what it holds
====================  ==============================================================================
``driver``            collective, failure-safe set-up; runs the rank's role; shares the result
``context``           what every role needs (communicator, config, hierarchy, output folder, stop flag)
``master``            the parameter server: serves workers, epoch barrier, validation, checkpoints
``worker``            trains its shard ``sync_every`` batches at a time, exchanges, writes its part
``modes``             what one exchange means per algorithm (Downpour, EASGD, GEM; synchronous)
``stopping``          early stopping and target metrics (``val_loss,<,4``)
``deadline``          walltime deadline and stop signals (SIGUSR1/SIGUSR2/SIGTERM)
``history``           per-epoch history, best epoch, :class:`~nnlo.training.history.TrainResult`
``failure``           :class:`~nnlo.training.failure.RankFailure`: one rank's failure known to all
====================  ==============================================================================

Seams for what comes next (no rewrite needed):

- *pure all-reduce* (``--n-masters 0``): a third role class beside Master/Worker whose exchange is an
  ``Allreduce`` of the delta on the group communicator; :func:`driver.training_shape` is where it is
  switched on, :func:`driver._build_role` where the role is picked.
- *sub-masters* (``--n-masters M > 1``): a sub-master is a Master towards its workers
  (``hierarchy.group.worker_leaders(m)``) and a worker towards the uber-master (a second
  :class:`~nnlo.transport.Link`); the uber-master is a Master whose "workers" are the masters.
- *all-reduce worker groups* (``--n-processes K``): ranks of one logical worker all-reduce their gradients
  in :meth:`worker.Worker._train_batch` (each reading its part of the batch,
  :func:`nnlo.data.split_batch`), and only the leader (``RankInfo.is_leader``) calls the exchange.
"""
