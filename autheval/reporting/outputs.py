"""Result files: summary.json / summary.md / authority_summary.csv for one record, and the
proposal-dependence and paired-contrast tables for several arms. A set of result files is written
all or nothing: into a temporary folder inside the output folder first, then each renamed into place.

CSV numbers are Python float reprs (shortest round-trip), as in the published AuthEval files, so the
same inputs give the same bytes.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import tempfile
from functools import partial
from pathlib import Path

from autheval import __version__
from autheval.errors import RecordError
from autheval.estimation.estimators import METRICS, EstimationResult
from autheval.estimation.study import CONTRAST_COLUMNS, ESTIMATE_COLUMNS, estimate_rows, metric_seed
from autheval.records.schema import PROPOSAL_ONLY
from autheval.reporting.tables import cell

# the files each command writes into --output-dir, in this order (checked against its inputs first)
EVALUATE_FILES = ("summary.json", "summary.md", "authority_summary.csv", "estimates.csv")
COMPARE_FILES = ("proposal_dependence_summary.csv", "paired_contrast.csv", "estimates.csv")
SUMMARY_COLUMNS = (
    "estimand",
    "n_images",
    "n_clusters",
    "J_auth",
    "J",
    "intervention_rate",
    "delta",
    "Delta_authority",
    "J_auth_ci_lower",
    "J_auth_ci_upper",
    "J_ci_lower",
    "J_ci_upper",
    "intervention_rate_ci_lower",
    "intervention_rate_ci_upper",
    "delta_ci_lower",
    "delta_ci_upper",
    "Delta_authority_ci_lower",
    "Delta_authority_ci_upper",
)
SUMMARY_METRICS = ("J_auth", "J", "intervention_rate", "delta", "Delta_authority")
# The published cluster-equal row fills Delta_authority only; the layout is kept exactly.
CLUSTER_ROW_METRICS = ("Delta_authority",)
MARKDOWN_ORDER = (
    "J_std",
    "J_auth",
    "J",
    "intervention_rate",
    "delta",
    "Delta_utility",
    "Delta_authority",
    "Delta_total",
)
PROPOSAL_COLUMNS = (
    "proposal",
    "n_images",
    "n_clusters",
    "intervention_rate",
    "delta",
    "Delta_authority_image",
    "Delta_authority_image_ci_lower",
    "Delta_authority_image_ci_upper",
    "Delta_authority_cluster",
    "Delta_authority_cluster_ci_lower",
    "Delta_authority_cluster_ci_upper",
)


# The published paired_contrast.csv columns first, then the multiplicity columns (autheval.estimation.multiplicity).
def csv_text(columns, rows) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([cell(row.get(c)) for c in columns])
    return buffer.getvalue()


def _metric_block(result: EstimationResult, analysis: str, unit: str) -> dict:
    block = {}
    for metric in METRICS:
        e = result.estimate(analysis, unit, metric)
        entry = {
            "name": metric,
            "estimate": e["estimate"],
            "ci_lower": e["ci_lower"],
            "ci_upper": e["ci_upper"],
            "n": e["n"],
            "available": e["available"],
        }
        if not e["available"]:
            entry["reason"] = e["reason"]
        entry["status"] = e["status"]
        block[metric] = entry
    return block


def summary_json(result: EstimationResult, analysis: str) -> dict:
    """The generic evaluator's summary.json layout (image unit), with our additions beside it."""
    records = result.records[analysis]
    image = _metric_block(result, analysis, "image_weighted")
    checks = {c["unit"]: c for c in result.checks if c["analysis"] == analysis}
    return {
        "mode": records.mode,
        "n": records.n_cases,
        "n_clusters": records.n_clusters,
        "seed": result.seed,
        "bootstrap_reps": result.reps,
        "quantiles": list(result.quantiles),
        "metrics": image,
        "scheme": result.scheme,
        "record_level": records.level,
        "schema": records.schema,
        "source": records.source,
        "data_sha256": records.data_sha256,
        "metric_seeds": {m: metric_seed(result, m) for m in METRICS},
        "units": {
            "image_weighted": image,
            "cluster_equal": _metric_block(result, analysis, "cluster_equal"),
        },
        "checks": {
            unit: {
                "identity_residual": c["point_residual"],
                "max_replicate_identity_residual": c["max_replicate_residual"],
                "reps_without_change": c["reps_without_change"],
            }
            for unit, c in sorted(checks.items())
        },
        "autheval_version": __version__,
    }


def authority_summary_rows(result: EstimationResult, analysis: str) -> list[dict]:
    records = result.records[analysis]
    rows = []
    for estimand, unit, metrics in (
        ("image_weighted_primary", "image_weighted", SUMMARY_METRICS),
        ("cluster_equal_sensitivity", "cluster_equal", CLUSTER_ROW_METRICS),
    ):
        row = {"estimand": estimand, "n_images": records.n_cases, "n_clusters": records.n_clusters}
        for metric in metrics:
            e = result.estimate(analysis, unit, metric)
            row[metric] = e["estimate"]
            row[f"{metric}_ci_lower"] = e["ci_lower"]
            row[f"{metric}_ci_upper"] = e["ci_upper"]
        rows.append(row)
    return rows


def _fmt(value) -> str:
    return "NA" if value is None else f"{value:.6f}"


def _changed_text(records) -> str:
    """A proposal-only record has no executed action, so how many cases were changed is unknown: never 0."""
    if records.level == PROPOSAL_ONLY:
        return "not recoverable (proposal-only record: no executed action)"
    return str(records.n_changed)


def summary_markdown(result: EstimationResult, analysis: str) -> str:
    records = result.records[analysis]
    lo, hi = result.quantiles
    lines = [
        f"# Authority-preserving evaluation: {analysis}",
        "",
        f"- Source: `{records.source}` (sha256 `{records.data_sha256[:16]}…`)",
        f"- Mode: {records.mode}; record level: {records.level}",
        f"- Cases: {records.n_cases}; clusters: {records.n_clusters}; changed: {_changed_text(records)}",
        f"- Bootstrap: scheme `{result.scheme}`, {result.reps} whole-cluster replicates, "
        f"seed {result.seed}, quantiles {lo:g}/{hi:g}",
        "",
        "| metric | unit | estimate | CI lower | CI upper | n |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for unit in ("image_weighted", "cluster_equal"):
        for metric in MARKDOWN_ORDER:
            e = result.estimate(analysis, unit, metric)
            if e["available"]:
                lines.append(
                    f"| {metric} | {unit} | {_fmt(e['estimate'])} | {_fmt(e['ci_lower'])} | "
                    f"{_fmt(e['ci_upper'])} | {e['n']} |"
                )
            else:
                lines.append(f"| {metric} | {unit} | NA ({e['status']}: {e['reason']}) | | | 0 |")
    for c in result.checks:
        if c["analysis"] == analysis:
            lines.append("")
            lines.append(
                f"Identity residual Delta - p*delta ({c['unit']}): {c['point_residual']:.3e}; "
                f"replicates without a change: {c['reps_without_change']}"
            )
    lines += [
        "",
        "Delta_authority = J_auth - J: what the local authority's selection changed in the declared "
        "local utility. Numbers a record level cannot support are reported as NA with the reason.",
        "",
    ]
    return "\n".join(lines)


def check_output_dir(path: str | os.PathLike, flag: str = "--output-dir") -> Path:
    """Fail early, in one line naming `flag`, when `path` cannot be (or become) a folder this process
    can write: it is a file, it lies under a file, or the folder it would be made in is not writable."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise RecordError(flag, None, f"{path} is a file, not a folder")
    existing = path
    while not existing.exists():  # the nearest existing folder, where the missing ones would be made
        existing = existing.parent
    if not existing.is_dir():
        raise RecordError(flag, None, f"{path} lies under {existing}, which is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise RecordError(flag, None, f"{existing} is not writable")
    return path


def write_files(
    out_dir: str | os.PathLike, files: dict[str, str], flag: str = "--output-dir", receipt: dict | None = None
) -> list[Path]:
    """Write {file name: text} into `out_dir` all or nothing: every file goes to a temporary folder inside
    `out_dir`, and only when all are written are they renamed into place (same file system, so each
    rename is atomic). A target that is a folder, or an output folder that cannot be written, is one
    line naming `flag`; nothing is left behind. `receipt` (autheval.reporting.receipt.build_receipt, outputs
    empty): completed with every file's SHA-256 and written beside them as receipt.json."""
    if receipt is not None:
        from autheval.reporting.receipt import RECEIPT, file_outputs, receipt_text

        encoded = {name: text.encode("utf-8") for name, text in files.items()}
        files = {**files, RECEIPT: receipt_text({**receipt, "outputs": file_outputs(encoded)})}
    out_dir = check_output_dir(out_dir, flag)
    for name in files:
        if (out_dir / name).is_dir():
            raise RecordError(flag, None, f"{out_dir / name} is a folder; {name} cannot be written there")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".autheval-", suffix=".tmp", dir=out_dir))
    except OSError as err:
        raise RecordError(flag, None, f"cannot write to {out_dir}: {err.strerror or err}") from err
    try:
        for name, text in files.items():
            (staging / name).write_bytes(text.encode("utf-8"))  # mode from the umask
        for name in files:
            os.replace(staging / name, out_dir / name)
    except OSError as err:
        raise RecordError(flag, None, f"cannot write to {out_dir}: {err.strerror or err}") from err
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return [out_dir / name for name in files]


def write_evaluate_outputs(
    result: EstimationResult, analysis: str, out_dir: Path, receipt: dict | None = None
) -> list[Path]:
    out_dir = Path(out_dir)
    files = dict(
        zip(
            EVALUATE_FILES,
            (
                json.dumps(summary_json(result, analysis), indent=2, allow_nan=False) + "\n",
                summary_markdown(result, analysis),
                csv_text(SUMMARY_COLUMNS, authority_summary_rows(result, analysis)),
                csv_text(ESTIMATE_COLUMNS, estimate_rows(result)),
            ),
        )
    )
    return write_files(out_dir, files, receipt=receipt)


def proposal_rows(result: EstimationResult) -> list[dict]:
    rows = []
    for analysis, records in result.records.items():
        image = partial(result.estimate, analysis, "image_weighted")
        cluster = result.estimate(analysis, "cluster_equal", "Delta_authority")
        gap = image("Delta_authority")
        rows.append(
            {
                "proposal": analysis,
                "n_images": records.n_cases,
                "n_clusters": records.n_clusters,
                "intervention_rate": image("intervention_rate")["estimate"],
                "delta": image("delta")["estimate"],
                "Delta_authority_image": gap["estimate"],
                "Delta_authority_image_ci_lower": gap["ci_lower"],
                "Delta_authority_image_ci_upper": gap["ci_upper"],
                "Delta_authority_cluster": cluster["estimate"],
                "Delta_authority_cluster_ci_lower": cluster["ci_lower"],
                "Delta_authority_cluster_ci_upper": cluster["ci_upper"],
            }
        )
    return rows


def write_compare_outputs(result: EstimationResult, out_dir: Path, receipt: dict | None = None) -> list[Path]:
    out_dir = Path(out_dir)
    files = dict(
        zip(
            COMPARE_FILES,
            (
                csv_text(PROPOSAL_COLUMNS, proposal_rows(result)),
                csv_text(CONTRAST_COLUMNS, result.contrasts),
                csv_text(ESTIMATE_COLUMNS, estimate_rows(result)),
            ),
        )
    )
    return write_files(out_dir, files, receipt=receipt)


# `evaluate --by`: the estimates of every group, each row labelled by its group
BY_FILES = ("estimates.csv",)


def by_columns(columns) -> tuple[str, ...]:
    """The columns naming a row's group in `evaluate --by` estimates.csv: by_<column> per column."""
    return tuple(f"by_{c}" for c in columns)


def write_by_outputs(
    result: EstimationResult, columns, groups: dict[str, dict[str, str]], out_dir: Path, receipt: dict | None = None
) -> list[Path]:
    """estimates.csv of `evaluate --by`: the estimate rows of every group (analysis `col=value,...`),
    then by_<col> columns holding the group's values."""
    rows = [{**row, **{f"by_{c}": groups[row["analysis"]][c] for c in columns}} for row in estimate_rows(result)]
    files = {"estimates.csv": csv_text((*ESTIMATE_COLUMNS, *by_columns(columns)), rows)}
    return write_files(Path(out_dir), files, receipt=receipt)


# `compare --unpaired`: the unpaired contrasts, and each arm's (or arm and stratum's) estimates
UNPAIRED_FILES = ("unpaired_contrast.csv", "estimates.csv")


def write_unpaired_outputs(
    rows: list[dict], result: EstimationResult, out_dir: Path, receipt: dict | None = None
) -> list[Path]:
    from autheval.estimation.unpaired import UNPAIRED_COLUMNS

    files = dict(
        zip(
            UNPAIRED_FILES,
            (csv_text(UNPAIRED_COLUMNS, rows), csv_text(ESTIMATE_COLUMNS, estimate_rows(result))),
        )
    )
    return write_files(Path(out_dir), files, receipt=receipt)
