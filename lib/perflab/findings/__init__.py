"""The sentences the notebooks print, computed from their measured tables (each tested on
small tables made by hand, tests/test_*_findings.py): one module per topic."""
