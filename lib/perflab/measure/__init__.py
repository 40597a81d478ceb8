"""The measuring core: what times, compares, profiles and stores any callable's results, and
imports nothing else of perflab (``tests/test_layers.py`` holds it to that).

``timer`` (the one timer), ``stats`` (medians, intervals, ``ROUNDS``), ``comparison``
(``Comparison`` and ``compare``: two callables timed interleaved, with a verdict), ``simulate``
(the intervals' confidence tested by simulation), ``sweep`` (sweeps that keep every row),
``peak`` (bests of several), ``crosscheck`` (the timer against torch.utils.benchmark and
triton.testing), ``conclusions`` and ``tables``; ``capture``, ``trace``, ``summary``,
``hotspots`` and ``nsys`` (profiler traces and what they say); ``timeline`` (memory over a
step); ``paths`` (the results store with provenance), ``device``, ``progress``, ``ranges``
(named ranges for profilers), ``hardware`` (the GPUs' figures), ``triton_compile`` (the one
module that compiles a kernel for a GPU target) and ``processes`` (child processes that leave
nothing behind: the compiles' workers, the ranks).

Empty on purpose: importing one module here runs this file first, and a rank process should
import no more than it uses.
"""
