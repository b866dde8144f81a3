"""Hardware-aware placement: which job a free block takes, and why it pays where it does.

Pure modules (no MPI, no clock, no files) that :mod:`nnlo.optimize.assign` puts behind ``--assign
hardware-aware``, so that any hand-out (a plain search, a shared one, a schedule's stages) can ask them:

* :mod:`.hardware` - a block's type (ranks, GPUs per rank, memory per rank, node type);
* :mod:`.traits` - a trial's class, size hint and declared memory (the model module's optional
  ``trial_class``/``trial_size``/``trial_memory``, else the tree space's top-level branch);
* :mod:`.costs` - the observations every job leaves and the cost model per (class, type) learnt from them;
* :mod:`.memory` - what ran out of memory where, and what that rules out;
* :mod:`.policy` - the choice: memory, walltime fit, the tail of a small batch, relative speed.

:mod:`.probe` (not pure) reads a rank's hardware once at start-up.

Placement pays where a trial's duration depends on *which* block runs it beyond one speed per block: classes
that speed up differently on different hardware, trials that do not fit some blocks' memory, trials that
cannot reach a checkpoint before the deadline, and the tail of a small batch. With every block busy and one
speed per block for every trial, trials per hour do not depend on placement (docs/optimization.md).
"""
from nnlo.optimize.placement.costs import CostModel, CostObservation
from nnlo.optimize.placement.hardware import BlockType, RankFacts, block_types, differ
from nnlo.optimize.placement.memory import MemoryModel, is_out_of_memory
from nnlo.optimize.placement.policy import MORE, WAIT, Busy, Job, Moment, Placement
from nnlo.optimize.placement.traits import HOOKS, Traits, TraitsOf

__all__ = ["HOOKS", "MORE", "WAIT", "BlockType", "Busy", "CostModel", "CostObservation", "Job", "MemoryModel",
           "Moment", "Placement", "RankFacts", "Traits", "TraitsOf", "block_types", "differ", "is_out_of_memory"]
