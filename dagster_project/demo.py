"""`autheval demo`: materialize the asset graph in-process into a lake, stage by stage, and print the
study's tables. In-process (dagster.materialize) so no daemon, webserver or multiprocess executor is
needed, and each stage reports as it finishes. The command records its runs in the lake's instance
(definitions.lake_instance, which `autheval ui` serves); tests run on an in-memory one."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from dagster import AssetSelection, DagsterEventType, DagsterInstance, RunsFilter, materialize
from dagster._core.errors import DagsterAssetCheckFailedError

from assets.resources import ModelsResource, SourceResource
from autheval import __version__
from autheval.review.rules import RuleFile
from dagster_project.definitions import build_definitions, project_instance, study_assets
from dagster_project.stages import job_stages
from warehouse.lake import Lake
from warehouse.snapshots import new_run_id

STEP_TAG = "autheval/demo_step"  # one value per stage's run
QUIET = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}  # failures reach the caller as one line
# each job's stages (dagster_project.stages); the raw path's stages stop before the catalog's group
REFERENCE_STAGES, RAW_STAGES, COHORT_STAGES = (
    job_stages(job) for job in ("reference_study", "raw_path", "cohort_study")
)
# every demo lake has the recurring tables, empty before anything has landed (their columns queryable)
RECURRING_STEP = ("recurring", AssetSelection.assets("trend", "monitor", "monitor_case_mix"))


class CheckTally(dict):
    """{check name: passed} for the checks that ran; `skipped`: the checks planned that did not run
    (e.g. a reference-only check on another source), neither passed nor failed."""

    def __init__(self):
        super().__init__()
        self.skipped: list[str] = []


class BlockingCheckFailed(ValueError):
    """A blocking check failed, so the stage's downstream tables (the report, the catalog) were not
    written. A ValueError so that the command line reports it in one line; `checks` is the tally."""

    def __init__(self, stage: str, checks: CheckTally):
        failed = sorted(name for name, passed in checks.items() if not passed)
        super().__init__(
            f"stage {stage} stopped: blocking asset check failed: {', '.join(failed)}; "
            "nothing downstream of it (report, catalog) was published"
        )
        self.checks = checks


def run_stages(
    lake_root: Path,
    stages=REFERENCE_STAGES,
    out=print,
    source: SourceResource | None = None,
    extra: tuple[str, ...] = (),
    models: ModelsResource | None = None,
    receipt: dict | None = None,
    rules: RuleFile | str | None = None,
    instance: DagsterInstance | None = None,
) -> CheckTally:
    """Materialize each group in order, the recurring tables (trend, monitor: empty until logs land),
    then the `extra` assets; returns {check name: passed} of the checks that ran (with `.skipped`, those
    that did not). Raises if a stage fails (BlockingCheckFailed when a blocking check stopped it).
    `models` turns on the model mechanisms (default: as the environment says, see
    assets.resources.default_models); `rules` are the declared local rules (a RuleFile or a
    YAML path; default: the study's), parsed once for every stage. `instance`: where the runs are
    recorded (`autheval demo`: the lake's, definitions.lake_instance); default an in-memory one."""
    defs = build_definitions(str(lake_root), source, models, rules)
    assets_defs = study_assets()
    resources = defs.resources
    instance = instance or project_instance()
    checks = CheckTally()
    steps = [(stage, AssetSelection.groups(stage)) for stage in stages] + [RECURRING_STEP]
    steps += [(a, AssetSelection.assets(a)) for a in extra]
    # One lake run for every stage: they commit as one snapshot, or (a stage failed, a check blocked,
    # the process was killed) not at all, and the lake keeps serving the previous snapshot.
    lake = Lake(lake_root, keep_snapshots=resources["lake"].keep_snapshots)
    with lake.open_run(new_run_id("demo"), software=f"autheval {__version__}"):
        _run_steps(steps, assets_defs, resources, instance, checks, out)
        if receipt is not None:
            write_lake_receipt(lake, receipt)
    return checks


def write_lake_receipt(lake: Lake, receipt: dict) -> None:
    """The run's receipt.json at the lake root, committed with its snapshot: every table's rows hashed
    (autheval.reporting.receipt.table_outputs), so `autheval verify` can re-derive the whole lake. A receipt
    written after the catalog step commits with the run's last snapshot."""
    from autheval.reporting.receipt import RECEIPT, receipt_text, table_outputs
    from warehouse.atomic import atomic_write_text

    tables = {name: lake.read(name) for name in lake.tables()}
    atomic_write_text(
        lake.publish_path(RECEIPT), receipt_text({**receipt, "outputs": table_outputs(tables, lake.root)})
    )


def _run_steps(steps, assets_defs, resources, instance, checks: CheckTally, out) -> None:
    for i, (stage, selection) in enumerate(steps, 1):
        started = time.perf_counter()
        # the step's run found by its own tag: the lake's instance also holds the UI's runs
        tag = {STEP_TAG: uuid.uuid4().hex}
        try:
            run_id = materialize(
                assets_defs,
                selection=selection,
                resources=resources,
                instance=instance,
                raise_on_error=True,
                run_config=QUIET,
                tags=tag,
            ).run_id
        except DagsterAssetCheckFailedError:
            _tally(instance, instance.get_runs(filters=RunsFilter(tags=tag), limit=1)[0].run_id, checks)
            raise BlockingCheckFailed(stage, checks) from None
        names = _tally(instance, run_id, checks)
        out(f"[{i}/{len(steps)}] {stage:<10} {time.perf_counter() - started:5.1f} s  {', '.join(names)}")


def _tally(instance, run_id: str, checks: CheckTally) -> list[str]:
    """Add a run's check evaluations (and the planned checks that did not run) to `checks`; return
    the names of the assets it materialized."""

    def records(kind):
        return [r.event_log_entry.dagster_event for r in instance.get_records_for_run(run_id, of_type=kind).records]

    for event in records(DagsterEventType.ASSET_CHECK_EVALUATION):
        checks[event.event_specific_data.check_name] = event.event_specific_data.passed
    for event in records(DagsterEventType.ASSET_CHECK_EVALUATION_PLANNED):
        name = event.event_specific_data.asset_check_key.name
        if name not in checks and name not in checks.skipped:
            checks.skipped.append(name)
    return sorted(e.asset_key.to_user_string() for e in records(DagsterEventType.ASSET_MATERIALIZATION))
