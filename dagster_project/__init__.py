"""Dagster code location of the AuthEval lake (`dagster dev -m dagster_project`).

`defs` is imported on first use, not with the package: every asset module imports
assets.resources, and an eager import of the definitions here would load the asset package
from inside whichever asset module was imported first (a circular import)."""

from __future__ import annotations

__all__ = ["defs"]


def __getattr__(name: str):
    if name == "defs":
        from dagster_project.definitions import defs

        return defs
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), "defs"})  # Dagster's loader finds `defs` by listing the module
