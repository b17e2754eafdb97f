"""Dagster resources: where the lake lives and which data it is built from. The storage code itself
is in warehouse/ (no Dagster).

Fields read the environment through Dagster's EnvVar (resolved when a run starts and shown in the UI):
AUTHEVAL_LAKE (lake root, default warehouse/lake), AUTHEVAL_LANDING (default <lake>/landing),
AUTHEVAL_SOURCE (reference | synthetic | isic2019), AUTHEVAL_INPUT, AUTHEVAL_FREEZE."""

from __future__ import annotations

from pathlib import Path

from dagster import ConfigurableResource, EnvVar

from autheval.estimators import DEFAULT_REPS
from warehouse.lake import DEFAULT_LAKE, Lake

LAKE_ENV = "AUTHEVAL_LAKE"
LANDING_ENV = "AUTHEVAL_LANDING"
INPUT_ENV = "AUTHEVAL_INPUT"
FREEZE_ENV = "AUTHEVAL_FREEZE"


def env_or(name: str, default: str) -> EnvVar | str:
    """EnvVar(name) where the variable is set, else the default: the field then follows the variable
    (Dagster resolves it when a run starts), and an unset variable is no configuration error."""
    var = EnvVar(name)
    return var if var.get_value() is not None else default


class LakeResource(ConfigurableResource):
    """The Parquet lake root (catalog at <root>/autheval.duckdb; landing folder <root>/landing unless
    `landing` says otherwise)."""

    root: str = str(DEFAULT_LAKE)
    landing: str = ""

    def lake(self) -> Lake:
        return Lake(self.root)

    def landing_dir(self) -> Path:
        return Path(self.landing or Path(self.root) / "landing").resolve()


def lake_resource(root: str | None = None) -> LakeResource:
    """The lake at `root`, else at $AUTHEVAL_LAKE (default warehouse/lake); landing at $AUTHEVAL_LANDING
    (default <root>/landing)."""
    return LakeResource(root=root or env_or(LAKE_ENV, str(DEFAULT_LAKE)), landing=env_or(LANDING_ENV, ""))


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
    proposals: str = ""  # a proposals file (CSV or Parquet); synthetic: <input_dir>/proposals.csv if present
    rules: str = ""  # declared local rules (YAML); default: the study's rules shipped in the package
    gate_scores: str = ""  # per-image s_gate given by the source (image_id, s_gate), instead of the proxy
    evaluate_split: str = "test"  # the split the review and the estimates run on; 'all' for every image
    min_group_clusters: int = 30  # subgroups with fewer clusters (or images) are reported as not estimable

    def check(self) -> None:
        if self.kind not in SOURCES:
            raise ValueError(f"unknown source {self.kind!r}: expected one of {', '.join(SOURCES)}")
        if self.kind != "reference" and not self.input_dir:
            raise ValueError(f"source {self.kind!r} needs input_dir (a folder in the ISIC 2019 layout)")

    @property
    def is_reference(self) -> bool:
        return self.kind == "reference"

    def require_raw(self, what: str) -> None:
        """Raw-path tables (gate proxy, contexts) need a cohort: the reference study ships neither its
        images' metadata nor its gate scores."""
        if self.is_reference:
            raise ValueError(f"{what} is built from a raw cohort (source synthetic or isic2019); the reference "
                             "study ships no image metadata or gate scores")

    def proposals_file(self) -> str | None:
        """The proposals file of a raw source: as configured, else the synthetic cohort's own."""
        if self.proposals:
            return self.proposals
        default = Path(self.input_dir) / "proposals.csv"
        return str(default) if self.kind == "synthetic" and default.is_file() else None

    def require_reference(self, what: str) -> None:
        """The reference study's traces exist only for the embedded reference source."""
        if not self.is_reference:
            raise ValueError(f"{what} comes from the reference study's traces; source is {self.kind!r}. "
                             "Materialize the ingest and duplicates groups for a raw cohort.")


def default_source() -> SourceResource:
    """The source named by $AUTHEVAL_SOURCE, $AUTHEVAL_INPUT and $AUTHEVAL_FREEZE (default: the
    embedded reference study)."""
    return SourceResource(kind=env_or(SOURCE_ENV, "reference"), input_dir=env_or(INPUT_ENV, ""),
                          freeze=env_or(FREEZE_ENV, ""))
