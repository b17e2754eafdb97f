"""`autheval demo`: materialize the asset graph in-process into a lake, stage by stage, and print the
study's tables. In-process (dagster.materialize) so no daemon, webserver or multiprocess executor is
needed, and each stage reports as it finishes."""

from __future__ import annotations

import time
from pathlib import Path

from dagster import AssetSelection, DagsterInstance, materialize

from dagster_project.definitions import build_definitions, study_assets

QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
REFERENCE_STAGES = ("ingest", "proposals", "review", "scoring", "estimates", "reports")


def run_stages(lake_root: Path, stages=REFERENCE_STAGES, out=print, extra_resources: dict | None = None) -> dict:
    """Materialize each group in order; returns {check name: passed}. Raises if a stage fails."""
    defs = build_definitions(str(lake_root))
    assets_defs = study_assets()
    resources = {**defs.resources, **(extra_resources or {})}
    instance = DagsterInstance.ephemeral()
    checks: dict[str, bool] = {}
    for i, stage in enumerate(stages, 1):
        started = time.perf_counter()
        result = materialize(assets_defs, selection=AssetSelection.groups(stage), resources=resources,
                             instance=instance, raise_on_error=True, run_config=QUIET)
        names = sorted(e.asset_key.to_user_string() for e in result.get_asset_materialization_events())
        for evaluation in result.get_asset_check_evaluations():
            checks[evaluation.check_name] = evaluation.passed
        out(f"[{i}/{len(stages)}] {stage:<10} {time.perf_counter() - started:5.1f} s  {', '.join(names)}")
    return checks
