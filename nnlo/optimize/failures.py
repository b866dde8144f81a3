"""When failed trials stop a search (``--max-failures FRACTION[:MIN]``, default ``0.5:8``).

A search whose trials keep failing has a broken model, not bad parameters, and should not burn the allocation;
but a bad start (a few failing points in a hostile corner of the space) is no proof, and upstream went on. The
rule: stop once more than FRACTION of the finished trials failed, counted when at least MIN have finished (or
the whole budget, when it is smaller). ``1`` never stops. Pure: parsed and judged without any search.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from nnlo.contract import MAX_FAILURES
from nnlo.errors import ConfigError


@dataclass(frozen=True)
class FailureRule:
    fraction: float
    minimum: int

    @classmethod
    def default(cls) -> FailureRule:
        """The rule without ``--max-failures`` (:data:`nnlo.contract.MAX_FAILURES`)."""
        return cls.parse(MAX_FAILURES)

    @classmethod
    def parse(cls, text: str) -> FailureRule:
        """``"0.5:8"`` (``"0.5"``: the default's MIN) -> the rule; a one-line :class:`ConfigError` otherwise."""
        fraction_text, _, minimum_text = str(text).strip().partition(":")
        try:
            fraction = float(fraction_text)
            minimum = int(minimum_text or MAX_FAILURES.partition(":")[2])
        except ValueError:
            fraction, minimum = math.nan, 0
        if not (0 <= fraction <= 1 and minimum >= 1):
            raise ConfigError(f"--max-failures {text!r} is not FRACTION[:MIN] (stop once more than FRACTION of at "
                              f"least MIN finished trials failed): use e.g. {MAX_FAILURES} (the default), 0.25:4, "
                              f"or 1 to never stop")
        return cls(fraction, minimum)

    @property
    def option(self) -> str:
        """The rule as ``--max-failures`` takes it."""
        return f"{self.fraction:g}:{self.minimum}"

    def stops(self, failed: int, finished: int, budget: int) -> bool:
        """Whether ``failed`` of ``finished`` trials (of a ``budget``) stop the search."""
        return finished >= min(self.minimum, budget) and failed > self.fraction * finished

    def describe(self) -> str:
        """``more than half of at least 8 finished trials failed``: when the rule stops a search."""
        if self.fraction >= 1:
            return "never (--max-failures 1)"
        share = "half" if self.fraction == 0.5 else f"{self.fraction * 100:g}%"
        return f"more than {share} of at least {self.minimum} finished trials failed"
