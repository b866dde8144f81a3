"""``python -m nnlo``: the command line lives in ``nnlo_sched`` (the runtime never imports it), so say where."""
import sys

from nnlo.contract import EXIT_BAD_INPUT

sys.stderr.write("nnlo: error: the command line is `nnlo` (or `python -m nnlo_sched`, the same); "
                 "e.g. python -m nnlo_sched train --help\n")
sys.exit(EXIT_BAD_INPUT)
