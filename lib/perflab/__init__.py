"""perflab: the library behind the performance-engineering workbook in ``notebooks/``.

Without CUDA the workbook's Triton kernels run in the Triton interpreter, which must be chosen
(``TRITON_INTERPRET=1``) before anything imports Triton: ``torch.compile`` does, and a Triton
imported without it makes every interpreted kernel fail. So it is chosen here, on the first
``import perflab``, unless the environment already says otherwise (or Triton is already
imported: then ``perflab.implementations.attention.interpreter`` refuses to load, with the reason).
"""

import os
import sys

if "TRITON_INTERPRET" not in os.environ and "triton.language" not in sys.modules:
    import torch

    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"

__version__ = "0.1.0"
