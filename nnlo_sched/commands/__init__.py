"""The `nnlo` sub-commands, one module each (registered in nnlo_sched/cli.py)."""
