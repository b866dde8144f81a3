"""The submitit payload of bench/slurm_requeue.py, in its own module so that the requeued job can unpickle it.

It records each (re)start and the pre-walltime signal in a JSON-lines file, and otherwise just waits, like a
training that is stopped only by the time limit.
"""
from __future__ import annotations

import json
import time
from typing import Any


class Resumable:
    def __init__(self, log: str) -> None:
        self.log = log

    def _note(self, event: str) -> None:
        with open(self.log, "a") as f:
            f.write(json.dumps({"event": event, "t": time.time()}) + "\n")

    def __call__(self) -> None:
        self._note("start")
        time.sleep(600)

    def checkpoint(self) -> Any:
        """submitit calls this on the signal; returning a DelayedSubmission asks it to requeue the job."""
        import submitit

        self._note("signal")
        return submitit.helpers.DelayedSubmission(Resumable(self.log))
