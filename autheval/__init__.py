"""AuthEval lake: authority-preserving evaluation of medical VLM assistants.

The core (records, estimators, CLI) imports neither Dagster nor torch, so `autheval evaluate` stays quick.
"""

__version__ = "0.1.0"
