"""One row of ``perflab check``: which adapter, which check, the error measured against the
tolerance, and the verdict."""

from __future__ import annotations

import math
from dataclasses import dataclass

#: Verdicts: "pass" and "fail" are measured; "not provided" (absent or NotImplementedError)
#: and "skipped" (cannot run here, e.g. Triton missing) do not fail the check; "error" (the
#: adapter raised) does.
FAILING = ("fail", "error")


@dataclass
class CheckRow:
    adapter: str
    check: str
    error: float = math.nan
    tolerance: float = math.nan
    status: str = "pass"
    detail: str = ""

    @classmethod
    def measured(cls, adapter: str, check: str, error: float, tolerance: float,
                 detail: str = "") -> CheckRow:  # fmt: skip
        """A pass when ``error`` is within ``tolerance`` (NaN: nothing to compare, a fail)."""
        status = "pass" if error <= tolerance else "fail"
        return cls(adapter, check, error, tolerance, status, detail)
