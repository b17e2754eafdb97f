"""Dagster code location of the AuthEval lake (`dagster dev -m dagster_project`)."""

from dagster_project.definitions import defs

__all__ = ["defs"]
