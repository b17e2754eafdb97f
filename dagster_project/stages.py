"""The stage plan, declared once: the asset groups in the order a run materializes them, and which
groups each job runs. The jobs (dagster_project.definitions) and the demo's stages
(dagster_project.demo) are derived from it; which asset is in which group is the asset's own
`group_name`. No asset is imported here, so anything may import the plan."""

from __future__ import annotations

from assets.common import CONTEXT, DUPLICATES, ESTIMATES, INGEST, PROPOSALS, REPORTS, REVIEW, SCORING

# every stage group, in run order (each after the groups it reads); the `recurring` group (landed logs,
# the trend) runs from the landing sensor and the schedule, not as a stage
STAGES = (INGEST, DUPLICATES, CONTEXT, PROPOSALS, REVIEW, SCORING, ESTIMATES, REPORTS)

# the catalog commits the run's snapshot, so it is the last step of every job (assets/catalog.py)
COMMIT = "catalog"


def _in_order(*groups: str) -> tuple[str, ...]:
    return tuple(stage for stage in STAGES if stage in groups)


# job name -> (its groups in run order, its description)
JOBS = {
    "reference_study": (
        _in_order(INGEST, DUPLICATES, PROPOSALS, REVIEW, SCORING, ESTIMATES, REPORTS),
        "The reference AuthEval study from the embedded traces: every table, check and the report.",
    ),
    "raw_path": (
        _in_order(INGEST, DUPLICATES, CONTEXT),
        "A raw ISIC-layout cohort (source synthetic or isic2019): images, hashes, duplicates, clusters, "
        "splits, gate proxy and review contexts.",
    ),
    "cohort_study": (
        STAGES,
        "A raw cohort end to end: the raw path, the declared local review of every proposal mechanism "
        "under each regime, scores, records, estimates with paired contrasts, subgroups, the report.",
    ),
}


def job_stages(job: str) -> tuple[str, ...]:
    """The groups `job` materializes, in run order."""
    return JOBS[job][0]
