"""The tools wing: what a user runs around the lessons, not what they teach.

The command line (``cli``: ``perflab run``, ``bench``, ``check``, ``report``, ...; ``perflab
run`` executes notebooks through ``kernel_client``), ``perflab check`` and its adapters
(``adapters``), the contradictions ``perflab check-results`` flags (``check_results``), every
Triton kernel compiled for GPU targets (``kernels``: ``perflab kernels``) and every kept
autotune configuration checked (``kernel_configs``), the GPU smoke command (``smoke``) and the
lease plan (``lease``), the reports and the write-up by handout problem (``report``,
``writeup``, ``handout``), the sources' claims beside the workbook's numbers (``claims``), the
findings' simulated error rates (``finding_rates``) and the notebooks' widgets (``widgets``). A
tool may import anything; nothing but a tool or a lesson module imports one
(``tests/test_layers.py``)."""
