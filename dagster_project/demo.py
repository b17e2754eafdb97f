"""`autheval demo`: materialize the asset graph in-process into a lake, stage by stage, and print the
study's tables. In-process (dagster.materialize) so no daemon, webserver or multiprocess executor is
needed, and each stage reports as it finishes."""

from __future__ import annotations

import time
from pathlib import Path

from dagster import AssetSelection, DagsterEventType, materialize

from dagster_project.definitions import build_definitions, project_instance, study_assets
from dagster_project.resources import SourceResource

QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
REFERENCE_STAGES = ("ingest", "duplicates", "proposals", "review", "scoring", "estimates", "reports")
RAW_STAGES = ("ingest", "duplicates")


class CheckTally(dict):
    """{check name: passed} for the checks that ran; `skipped`: the checks planned that did not run
    (e.g. a reference-only check on another source), neither passed nor failed."""

    def __init__(self):
        super().__init__()
        self.skipped: list[str] = []


def run_stages(lake_root: Path, stages=REFERENCE_STAGES, out=print, source: SourceResource | None = None,
               extra: tuple[str, ...] = ()) -> CheckTally:
    """Materialize each group in order, then the `extra` assets; returns {check name: passed} of the
    checks that ran (with `.skipped`, those that did not). Raises if a stage fails."""
    defs = build_definitions(str(lake_root), source)
    assets_defs = study_assets()
    resources = defs.resources
    instance = project_instance()
    checks = CheckTally()
    steps = [(stage, AssetSelection.groups(stage)) for stage in stages] + [(a, AssetSelection.assets(a)) for a in extra]
    for i, (stage, selection) in enumerate(steps, 1):
        started = time.perf_counter()
        result = materialize(assets_defs, selection=selection, resources=resources,
                             instance=instance, raise_on_error=True, run_config=QUIET)
        names = sorted(e.asset_key.to_user_string() for e in result.get_asset_materialization_events())
        for evaluation in result.get_asset_check_evaluations():
            checks[evaluation.check_name] = evaluation.passed
        planned = instance.get_records_for_run(result.run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION_PLANNED).records
        for record in planned:
            name = record.event_log_entry.dagster_event.event_specific_data.asset_check_key.name
            if name not in checks and name not in checks.skipped:
                checks.skipped.append(name)
        out(f"[{i}/{len(steps)}] {stage:<10} {time.perf_counter() - started:5.1f} s  {', '.join(names)}")
    return checks
