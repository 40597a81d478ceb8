"""perflab: the library behind the performance-engineering workbook in ``notebooks/``."""

__version__ = "0.1.0"
