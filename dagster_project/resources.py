"""Dagster resources: where the lake lives. The storage code itself is in warehouse/ (no Dagster)."""

from __future__ import annotations

import os

from dagster import ConfigurableResource

from autheval.estimators import DEFAULT_REPS
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


SOURCE_ENV = "AUTHEVAL_SOURCE"
SOURCES = ("reference", "synthetic", "isic2019")


class SourceResource(ConfigurableResource):
    """Which data the lake is built from: the embedded reference study, or a cohort folder in the
    official ISIC 2019 layout (synthetic or real) with an optional frozen split."""

    kind: str = "reference"
    input_dir: str = ""
    freeze: str = ""
    workers: int = 0  # hashing processes; 0 = all cores
    reps: int = DEFAULT_REPS  # bootstrap replicates of the estimates (`autheval demo --reps`)

    def check(self) -> None:
        if self.kind not in SOURCES:
            raise ValueError(f"unknown source {self.kind!r}: expected one of {', '.join(SOURCES)}")
        if self.kind != "reference" and not self.input_dir:
            raise ValueError(f"source {self.kind!r} needs input_dir (a folder in the ISIC 2019 layout)")

    @property
    def is_reference(self) -> bool:
        return self.kind == "reference"

    def require_reference(self, what: str) -> None:
        """The reference study's traces exist only for the embedded reference source."""
        if not self.is_reference:
            raise ValueError(f"{what} comes from the reference study's traces; source is {self.kind!r}. "
                             "Materialize the ingest and duplicates groups for a raw cohort.")


def default_source() -> SourceResource:
    return SourceResource(kind=os.environ.get(SOURCE_ENV, "reference"),
                          input_dir=os.environ.get("AUTHEVAL_INPUT", ""),
                          freeze=os.environ.get("AUTHEVAL_FREEZE", ""))
