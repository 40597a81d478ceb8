"""What the ranks' forkserver imports once, so that each rank forked from it need not: the
tables, the symbolic formulas and the plots that a lesson's front door imports (a rank imports
its function's module, and with it that lesson's ``__init__``). A package that fails to import
here (a bad ``MPLBACKEND`` makes matplotlib raise ``ValueError``, which the forkserver would not
catch) is left for a rank to import itself, where its error is that rank's."""

import importlib

for _name in ("pandas", "sympy", "matplotlib.pyplot"):
    try:
        importlib.import_module(_name)
    except Exception:  # only a head start: a rank imports it again where it needs it
        pass
