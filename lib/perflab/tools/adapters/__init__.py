"""Check anyone's CS336 systems implementation: ``perflab check --adapters PATH_OR_MODULE``.

The adapters module is the course's ``tests/adapters.py`` (or any module with the same
function names, ``perflab.cs336`` included). Each adapter it provides is checked against a
plain reference: FlashAttention against float64 (``attention_checks``), its Triton kernels
compiled for A100 and H100 (``kernel_compile``), data parallelism, FSDP and the sharded
optimizer against one process on 2 and 4 Gloo ranks (``distributed_checks``). ``battery`` runs
them all into one table, where the handout's spec decides pass or fail and checks beyond it are
findings; ``errors`` turns an adapter's exception into a line a student can act on.
"""

from perflab.tools.adapters.attention_checks import attention_functions
from perflab.tools.adapters.battery import (
    PARTS,
    check_adapters,
    findings,
    format_table,
    missing_adapters,
    passed,
    passing_adapters,
    summary,
)
from perflab.tools.adapters.loading import (
    ADAPTER_NAMES,
    AdapterLoadError,
    load_adapters,
    results_name,
)

__all__ = [
    "ADAPTER_NAMES",
    "PARTS",
    "AdapterLoadError",
    "attention_functions",
    "check_adapters",
    "findings",
    "format_table",
    "load_adapters",
    "missing_adapters",
    "passed",
    "passing_adapters",
    "results_name",
    "summary",
]
