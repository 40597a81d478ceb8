"""One row of ``perflab check``: which adapter, which check on which case, whether the handout
asks for it, the error measured against the tolerance, and the verdict."""

from __future__ import annotations

import math
from dataclasses import dataclass

#: Verdicts: "pass" and "fail" are measured; "not provided" (absent or NotImplementedError),
#: "skipped" (cannot run here, e.g. Triton missing) and "needs a GPU" (a CPU limit such as
#: ``@triton.autotune`` in the interpreter) do not fail the check; "error" (the adapter raised)
#: does.
FAILING = ("fail", "error")
#: Scopes: what the handout specifies (it decides the exit status), and what perflab checks
#: beyond it (reported as findings; ``--strict`` counts them too).
HANDOUT, BEYOND = "handout", "beyond the handout"


@dataclass
class CheckRow:
    adapter: str
    check: str
    case: str = ""
    scope: str = HANDOUT
    error: float = math.nan
    tolerance: float = math.nan
    status: str = "pass"
    detail: str = ""

    @classmethod
    def measured(
        cls,
        adapter: str,
        check: str,
        error: float,
        tolerance: float,
        detail: str = "",
        case: str = "",
        scope: str = HANDOUT,
    ) -> CheckRow:
        """A pass when ``error`` is within ``tolerance`` (NaN: nothing to compare, a fail)."""
        status = "pass" if error <= tolerance else "fail"
        return cls(adapter, check, case, scope, error, tolerance, status, detail)

    @property
    def finding(self) -> bool:
        """A check beyond the handout that does not pass: reported, not failed."""
        return self.scope == BEYOND and self.status in FAILING
