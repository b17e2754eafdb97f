"""Dagster resources: where the lake lives. The storage code itself is in warehouse/ (no Dagster)."""

from __future__ import annotations

import os

from dagster import ConfigurableResource

from warehouse.lake import DEFAULT_LAKE, Lake

LAKE_ENV = "AUTHEVAL_LAKE"
LANDING_ENV = "AUTHEVAL_LANDING"


def default_lake_root() -> str:
    return os.environ.get(LAKE_ENV, str(DEFAULT_LAKE))


class LakeResource(ConfigurableResource):
    """The Parquet lake root (catalog at <root>/autheval.duckdb; landing folder <root>/landing unless
    AUTHEVAL_LANDING or `landing` says otherwise)."""

    root: str
    landing: str = ""

    def lake(self) -> Lake:
        return Lake(self.root)

    def landing_dir(self):
        from pathlib import Path

        return Path(self.landing or os.environ.get(LANDING_ENV, "") or Path(self.root) / "landing").resolve()
