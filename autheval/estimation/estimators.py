"""The authority-gap estimators: point estimates and whole-cluster bootstrap intervals.

Python only orchestrates; the statistics are the SQL files in `sql/`:
cluster_stats -> (cluster_matrix x numpy multiplicities | poisson weights in SQL) -> replicate sums
-> replicate_metrics -> intervals, identity_check, paired_contrast.

Schemes (declared on every output row):
* reference: AuthEval's analysis scheme, bit-compatible with its published intervals (one shared
  numpy stream for every metric, unit and analysis with the same cluster count; seed 20260711).
* evaluator: AuthEval's generic log evaluator (seed 20260710 + a per-metric offset; delta resampled
  over intervened rows only).
* poisson: Poisson(1) cluster weights hashed inside SQL; constant memory; a different
  (asymptotically equivalent) bootstrap for logs too large for the exact schemes.
* poisson_by_site: the poisson weights keyed by site (cluster ids '<site>:<id>'), the replicates a hub
  pools from site exports, to the bit (autheval/estimation/by_site.py).

A scheme changes intervals only: every scheme's point estimates are one computation
(estimates/replicates_point.sql through estimates/replicate_metrics.sql, rep -1), so Delta = p * delta holds on the
point in both units whatever the scheme.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from autheval.errors import RecordError
from autheval.estimation.bootstrap import (
    POISSON_BLOCK,
    POISSON_CHUNK,
    Progress,
    lockstep_blocks,
    one_blas_thread,
    poisson_piece_products,
    poisson_products,
    stream_sums,
)
from autheval.estimation.by_site import SITE_SCHEME, site_poisson_products, site_runs
from autheval.estimation.exact import clopper_pearson, sign_flip_floor
from autheval.estimation.multiplicity import (
    DEFAULT_CONTRAST_FAMILY,
    DEFAULT_QUANTILES,
    TESTED_METRICS,
    add_adjusted_columns,
    alpha_of,
    contrast_family,
)
from autheval.records.cluster_stats import register_cluster_stats
from autheval.records.registration import register_records
from autheval.records.schema import FULL, PROPOSAL_ONLY, RecordSet
from autheval.records.warnings import warn
from autheval.vocabulary import SCHEMES, SITE_KEYED_SCHEMES
from warehouse import sql
from warehouse.sql import MIN_MEMORY_MB, available_cores, connect, load_sql

DEFAULT_SEEDS = {"reference": 20260711, "evaluator": 20260710, "poisson": 20260711, "poisson_by_site": 20260711}
DEFAULT_REPS = 5000
# Replicates are streamed in blocks, so memory does not grow with them until the interval step, which
# keeps every replicate value of every metric and unit (reps x 16 doubles per analysis: 128 MB at MAX_REPS).
MAX_REPS = 1_000_000
MIN_STABLE_REPS = 1000  # fewer replicates: the interval ends are noisy (a warning)
POISSON_BLOCK_REPS = 1 << 16  # at most this many replicates per block of replicate rows handed to DuckDB
METRICS_BLOCK_REPS = 1 << 13  # replicate sums are handed to DuckDB's metric formulas this many at a time
MATRIX_BATCH_ROWS = 1 << 16  # cluster rows of the statistics matrix fetched at a time (8 MB of doubles)
METRICS = (
    "J",
    "intervention_rate",
    "J_auth",
    "Delta_authority",
    "delta",
    "J_std",
    "Delta_total",
    "Delta_utility",
)
# Whether a number is supported, and by how many clusters: the same columns in estimates and intervals.
AVAILABILITY_COLUMNS = ("n_clusters", "available", "status", "reason", "support_clusters", "warning")
UNITS = ("image_weighted", "cluster_equal")
# Few clusters (docs/evaluating.md, "Few clusters"): a number carried by fewer clusters than this is flagged
# (its row's `warning`, one line on stderr): measured coverage of nominal 95% intervals was 0.85-0.92 at 10
# clusters and 0.90-0.95 at 20, bootstrap or delta method (benchmarks/small_sample_coverage.py).
MIN_CLUSTERS = 30
CHANGE_METRICS = ("Delta_authority", "delta")  # carried only by the clusters with a changed action
CLOPPER_PEARSON = "clopper_pearson"  # the interval method of an intervention rate whose interval is degenerate

NO_LOCAL = "utility_proposed_local not supplied"
NO_GLOBAL = "utility_proposed_global not supplied"
NO_CHANGE = "no interventions observed"
NO_SELECTION = "executed_action not supplied (proposal-only record)"


def no_local(records: RecordSet, metric: str) -> str:
    """Why the proposal's local score does not support `metric`: absent, or given on the wrong rows (a
    score on unchanged rows only is supplied, yet says nothing about the changed rows that carry the gap)."""
    if records.level == PROPOSAL_ONLY:  # scores of the proposal alone: nothing was selected
        return NO_SELECTION
    if records.n_local == 0:
        return NO_LOCAL
    # validation refuses a score on some changed rows only: here it is on unchanged rows only
    return (
        f"utility_proposed_local is given only on rows where the action was not changed, so {metric} is not recoverable"
    )


@dataclass(frozen=True)
class Availability:
    available: bool
    status: str  # 'estimated' | 'not_recoverable' | 'undefined' | 'not_supplied'
    reason: str | None = None


def availability(records: RecordSet, metric: str) -> Availability:
    """Which numbers a record level supports (AuthEval 6.8), with the reason when it does not."""
    ok = Availability(True, "estimated")
    proposal_only = records.level == PROPOSAL_ONLY
    if metric in ("J", "intervention_rate"):
        return Availability(False, "not_recoverable", NO_SELECTION) if proposal_only else ok
    if metric == "J_auth":
        return ok if records.has_local else Availability(False, "not_recoverable", no_local(records, metric))
    if metric == "Delta_authority":
        if proposal_only:
            return Availability(False, "not_recoverable", NO_SELECTION)
        if records.level == FULL or records.n_changed == 0:
            return ok  # p = 0 identifies Delta = 0 without the proposal's score
        return Availability(False, "not_recoverable", no_local(records, metric))
    if metric == "delta":
        if proposal_only:
            return Availability(False, "not_recoverable", NO_SELECTION)
        if not records.has_local:
            return Availability(False, "not_recoverable", no_local(records, metric))
        return ok if records.n_changed > 0 else Availability(False, "undefined", NO_CHANGE)
    if metric == "J_std":
        return ok if records.has_global else Availability(False, "not_supplied", NO_GLOBAL)
    if metric == "Delta_total":
        if not records.has_global:
            return Availability(False, "not_supplied", NO_GLOBAL)
        return Availability(False, "not_recoverable", NO_SELECTION) if proposal_only else ok
    if metric == "Delta_utility":
        if not records.has_global:
            return Availability(False, "not_supplied", NO_GLOBAL)
        return ok if records.has_local else Availability(False, "not_recoverable", no_local(records, metric))
    raise KeyError(metric)


@dataclass
class EstimationResult:
    """Long estimate rows, the Delta = p * delta checks, and paired contrasts."""

    scheme: str
    reps: int
    seed: int
    quantiles: tuple[float, float]
    records: dict[str, RecordSet]
    estimates: list[dict] = field(default_factory=list)
    checks: list[dict] = field(default_factory=list)
    contrasts: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # degenerate intervals (also issued as warnings)
    support: dict[str, tuple[int, int]] = field(default_factory=dict)  # analysis -> (clusters, with a change)

    def estimate(self, analysis: str, unit: str, metric: str) -> dict:
        for row in self.estimates:
            if (row["analysis"], row["unit"], row["metric"]) == (analysis, unit, metric):
                return row
        raise KeyError((analysis, unit, metric))

    def check(self, analysis: str, unit: str) -> dict | None:
        for row in self.checks:
            if (row["analysis"], row["unit"]) == (analysis, unit):
                return row
        return None


# sql/records/cluster_matrix.sql column -> replicate-sum column (estimates/replicates_point.sql layout)
MATRIX_TO_SUMS = {
    "n": "w_n",
    "sum_changed": "w_changed",
    "sum_exec": "w_exec",
    "sum_prop": "w_prop",
    "sum_gap": "w_gap",
    "sum_glob": "w_glob",
    "sum_total_gap": "w_total_gap",
    "sum_utility_gap": "w_utility_gap",
    "one": "c_n",
    "mean_changed": "c_changed",
    "mean_exec": "c_exec",
    "mean_prop": "c_prop",
    "mean_gap": "c_gap",
    "mean_glob": "c_glob",
    "mean_total_gap": "c_total_gap",
    "mean_utility_gap": "c_utility_gap",
}
EVALUATOR_TO_SUMS = {
    "s": "w_s",
    "n": "w_n",
    "m": "c_m",
    "k": "c_k",
}  # sql/estimates/evaluator_clusters.sql -> evaluator_sums


def metric_cells(recordsets: Iterable[RecordSet], computed: Mapping[tuple[str, str, str], dict]):
    """(records, unit, metric, its computed row ({} where none), availability) for every analysis, unit
    and metric, in that order: the loop every interval table runs (the bootstrap's here, the delta
    method's in autheval/estimation/analytic.py), so both report and withhold a metric the same way."""
    for records in recordsets:
        for unit in UNITS:
            for metric in METRICS:
                row = computed.get((records.analysis, unit, metric), {})
                yield records, unit, metric, row, availability(records, metric)


def kept_values(row: dict, avail: Availability, *names: str) -> dict:
    """`names` from a computed row where the record level supports the metric, else None (never a
    number the records cannot support)."""
    return {name: row.get(name) if avail.available else None for name in names}


def support_clusters(metric: str, n_clusters: int, changed_clusters: int) -> int:
    """The clusters that carry `metric`: those with a changed action for the gap metrics (the gap is 0
    on an unchanged case), every cluster otherwise."""
    return changed_clusters if metric in CHANGE_METRICS else n_clusters


def small_sample_warning(metric: str, clusters: int) -> str | None:
    """The row's `warning` when fewer than MIN_CLUSTERS clusters carry `metric`, else None."""
    if clusters >= MIN_CLUSTERS:
        return None
    which = "clusters with a changed action" if metric in CHANGE_METRICS else "clusters"
    return (
        f"few clusters: {clusters} {which} (fewer than {MIN_CLUSTERS}); the interval may cover less than its "
        f"level and no p-value is below 2^(1-{clusters})"
    )


def exact_rate_interval(
    records: RecordSet, unit: str, estimate_value: float, n_clusters: int, quantiles: tuple[float, float]
) -> tuple[float, float]:
    """The Clopper-Pearson interval of the intervention rate (autheval.estimation.exact): over the
    cases (image_weighted: k changed of n cases) or over the clusters (cluster_equal: k = p * G of G, each
    cluster one trial, as conservative as clustering can require)."""
    if unit == "image_weighted":
        return clopper_pearson(records.n_changed, records.n_cases, quantiles)
    return clopper_pearson(min(max(estimate_value * n_clusters, 0.0), n_clusters), n_clusters, quantiles)


def honest_small_sample(
    row: dict, records: RecordSet, support: tuple[int, int], quantiles: tuple[float, float]
) -> dict:
    """An interval row (bootstrap or delta method) with the small-sample rules applied in place: its
    `support_clusters` and `warning`; a p-value no smaller than the sign-flip floor of its clusters
    (exact.sign_flip_floor); an intervention rate whose interval is a single point replaced by the exact
    Clopper-Pearson interval (interval_method 'clopper_pearson')."""
    if not row.get("available"):
        row.update(support_clusters=None, warning=None)
        return row
    n_clusters, changed = support
    clusters = support_clusters(row["metric"], n_clusters, changed)
    row["support_clusters"] = clusters
    row["warning"] = small_sample_warning(row["metric"], clusters)
    if row.get("p_value") is not None:
        row["p_value"] = max(row["p_value"], sign_flip_floor(clusters))
    lo, hi = row.get("ci_lower"), row.get("ci_upper")
    degenerate = lo is not None and lo == hi
    if row["metric"] == "intervention_rate" and row.get("estimate") is not None and degenerate:
        row["ci_lower"], row["ci_upper"] = exact_rate_interval(
            records, row["unit"], row["estimate"], n_clusters, quantiles
        )
        row["interval_method"] = CLOPPER_PEARSON
    return row


def cluster_support(con, engine=None) -> dict[str, tuple[int, int]]:
    """analysis -> (clusters, clusters with a changed action), from cluster_stats (sql/estimates/cluster_support.sql):
    on `con`, or on `engine` where the statistics live there."""
    if engine is None or engine.kind == "duckdb":
        rows = sql.rows(con, "estimates/cluster_support")
    else:
        rows = engine.read("estimates/cluster_support").to_pylist()
    return {r["analysis"]: (int(r["n_clusters"]), int(r["changed_clusters"] or 0)) for r in rows}


def availability_columns(records: RecordSet, avail: Availability) -> dict:
    """The columns that close every interval row, whatever its method: clusters, availability, status
    and the reason a metric is withheld."""
    return {
        "n_clusters": records.n_clusters,
        "available": avail.available,
        "status": avail.status,
        "reason": avail.reason,
    }


def _stream_metrics(
    con,
    sums_name: str,
    metrics_sql: str,
    streams,
    reps: int,
    columns: dict[str, str],
    progress=None,
    scheme: str = "reference",
    site_runs: dict | None = None,
    blocks=None,
) -> None:
    """Append to replicate_metrics the metrics of every replicate of row blocks sharing resamples,
    {(seed, G): [(labels, G x len(columns) matrix)]}: one block of replicates at a time, all streams in
    lockstep (numpy's streams, or the poisson weights), is registered as `sums_name` and turned into
    metrics by `metrics_sql` (bounded memory). `site_runs` (poisson_by_site): {stream key: the sites'
    runs of its rows}. `blocks`: the (first_rep, [sums per stream]) blocks where already summed (the
    streamed poisson scheme: each member's matrix is then None)."""
    keys = list(streams)
    matrices = []
    for seed, g in keys:
        members = [m for _, m in streams[(seed, g)]]
        matrices.append((seed, members[0] if len(members) == 1 else np.hstack(members)))  # one analysis: no copy
    counter = Progress(
        reps,
        None
        if progress is None
        else (lambda done, total: progress(f"bootstrap: {done:,} of {total:,} replicates ({scheme} scheme)")),
    )
    if blocks is not None:
        pass
    elif scheme == "reference":
        blocks = lockstep_blocks(matrices, reps)
    elif scheme == SITE_SCHEME:
        blocks = _site_poisson_blocks(matrices, reps, site_runs or {})
    else:
        blocks = _poisson_blocks(matrices, reps)
    for start, sums_per_stream in _merged_blocks(blocks, METRICS_BLOCK_REPS, counter):
        parts = []
        for key, sums in zip(keys, sums_per_stream):
            parts += _sums_tables(streams[key], start, sums, columns)
        con.register(sums_name, pa.concat_tables(parts))
        con.sql(load_sql(metrics_sql)).insert_into("replicate_metrics")
    con.unregister(sums_name)


def _sums_tables(members, start: int, sums: np.ndarray, columns: dict[str, str]) -> list[pa.Table]:
    """A block of one stream's replicate sums (rows x members * len(columns), replicates start..) as
    one Arrow table per member (labels, matrix): its labels, rep and the sum columns named by
    `columns` (member i's are columns i * len(columns) ..): the layout both schemes' SQL reads."""
    rows, width = sums.shape[0], len(columns)
    rep = pa.array(np.arange(start, start + rows, dtype=np.int64))
    parts = []
    for i, (labels, _) in enumerate(members):
        block = {k: pa.array([v] * rows, pa.string()) for k, v in labels.items()}
        block["rep"] = rep
        for j, name in enumerate(columns.values()):
            block[name] = pa.array(sums[:, i * width + j])
        parts.append(pa.table(block))
    return parts


def _merged_blocks(blocks, min_reps: int, counter: Progress):
    """Consecutive (first_rep, [sums per stream]) blocks joined until they hold `min_reps` replicates
    (the sums are small: replicates x statistics), progress counted as each block arrives. The metric
    rows are the same; each hand-off to DuckDB has a fixed cost of registering and SQL, paid once per merged
    block instead of once per block."""
    pending, first, held = [], None, 0
    for start, parts in blocks:
        first = start if first is None else first
        pending.append(parts)
        held += parts[0].shape[0]
        counter.add(parts[0].shape[0])
        if held >= min_reps:
            yield first, [np.vstack(stream) for stream in zip(*pending)]
            pending, first, held = [], None, 0
    if pending:
        yield first, [np.vstack(stream) for stream in zip(*pending)]


def _poisson_blocks(matrices, reps: int):
    """(first_rep, [sums per (seed, matrix)]) of the poisson scheme, POISSON_BLOCK replicates at a time
    (at most POISSON_BLOCK_REPS): the weights of sql/estimates/portable_replicates_poisson.sql, computed in C or
    numpy and multiplied with the statistics matrix (autheval/estimation/bootstrap.py)."""
    block = min(POISSON_BLOCK, POISSON_BLOCK_REPS)
    for first in range(0, reps, block):
        rows = min(block, reps - first)
        yield first, [poisson_products(seed, first, rows, matrix) for seed, matrix in matrices]


def _site_poisson_blocks(matrices, reps: int, site_runs: dict):
    """`_poisson_blocks` of the poisson_by_site scheme: each stream's sums are its sites' sums, each
    site's clusters weighted by the site's own stream (autheval/estimation/by_site.py), the blocks of
    POISSON_BLOCK replicates a site export forms."""
    block = min(POISSON_BLOCK, POISSON_BLOCK_REPS)
    for first in range(0, reps, block):
        rows = min(block, reps - first)
        yield first, [site_poisson_products(seed, site_runs[i], first, rows, m) for i, (seed, m) in enumerate(matrices)]


class _RowsOutOfOrder(Exception):
    """The cluster matrix's rows did not come in matrix_row order (the streamed poisson sums need it)."""


def _matrix_batches(con) -> Iterator[np.ndarray]:
    """The rows of cluster_matrix on `con` (a connection of one thread: the statistics file's order,
    analysis then rank) as (rows x statistics) arrays, checked to come in matrix_row order. Only the
    columns read are computed (all of the view's: 6.6x the time at 10^7 clusters)."""
    expected = 0
    columns = con.table("cluster_matrix").select("matrix_row", *MATRIX_TO_SUMS)
    for batch in columns.to_arrow_reader(MATRIX_BATCH_ROWS):
        at = batch.column("matrix_row").to_numpy(zero_copy_only=False)
        if at.size and (at[0] != expected or at[-1] != expected + at.size - 1 or (np.diff(at) != 1).any()):
            raise _RowsOutOfOrder
        expected += at.size
        rows = np.empty((at.size, len(MATRIX_TO_SUMS)), dtype=np.float64)
        for j, column in enumerate(MATRIX_TO_SUMS):
            rows[:, j] = batch.column(column).to_numpy(zero_copy_only=False)
        yield rows


def _streamed_poisson_sums(con, runs, seed: int, reps: int) -> list[np.ndarray]:
    """Each analysis's (reps x statistics) poisson sums (`runs`: (analysis, clusters) in matrix order),
    the matrix read a piece at a time (bootstrap.poisson_piece_products: poisson_products' numbers)."""
    batches = _Rebatch(_matrix_batches(con))
    out = []
    for _, n_clusters in runs:
        sums = poisson_piece_products(seed, reps, batches.pieces(int(n_clusters), POISSON_CHUNK))
        out.append(sums if sums is not None else np.zeros((reps, len(MATRIX_TO_SUMS))))
    return out


class _Rebatch:
    """Arrays of rows read in order, handed out as pieces of given sizes across analyses."""

    def __init__(self, batches: Iterator[np.ndarray]):
        self.batches = batches
        self.held = np.empty((0, len(MATRIX_TO_SUMS)))

    def take(self, n: int) -> np.ndarray:
        while self.held.shape[0] < n:
            batch = next(self.batches)
            self.held = batch if self.held.shape[0] == 0 else np.concatenate([self.held, batch])
        piece, self.held = self.held[:n], self.held[n:]
        return piece

    def pieces(self, n_rows: int, size: int) -> Iterator[np.ndarray]:
        for first in range(0, n_rows, size):
            yield self.take(min(size, n_rows - first))


def _sums_blocks(sums: list[np.ndarray], reps: int):
    """(first_rep, [sums per stream]) blocks of POISSON_BLOCK replicates of summed replicates."""
    block = min(POISSON_BLOCK, POISSON_BLOCK_REPS)
    for first in range(0, reps, block):
        yield first, [s[first : first + block] for s in sums]


def _replicate_metrics(
    con, scheme: str, reps: int, seed: int, skip=frozenset(), progress=None, by_name: dict | None = None
) -> None:
    """Create replicate_metrics(analysis, rep, unit, <one column per metric>); rep -1 = the point, the
    same rows for every scheme (a scheme adds its replicates only).
    `skip`: (analysis, metric) pairs no record supports (their streams are not drawn). `by_name`: the
    records by analysis, which a refusal names."""
    _point_metrics(con)
    if scheme == "evaluator":
        _evaluator_metrics(con, reps, seed, skip, progress)
    else:
        _shared_stream_metrics(con, scheme, reps, seed, progress, by_name or {})


def _point_metrics(con) -> None:
    """replicate_metrics holding the point estimates (rep -1): every cluster once, by the formulas of
    sql/estimates/replicate_metrics.sql, whatever the scheme."""
    con.register("replicate_sums", con.execute(load_sql("estimates/replicates_point")).arrow().read_all())
    sql.to_table(con, "replicate_metrics", "estimates/replicate_metrics")
    con.unregister("replicate_sums")


def _evaluator_metrics(con, reps: int, seed: int, skip=frozenset(), progress=None) -> None:
    """Per-metric streams (seed + offset), each over its own clusters (AuthEval's generic evaluator),
    appended to replicate_metrics. The streams are independent, so they are drawn at once on all cores
    (`stream_sums`); a metric its record cannot support is not drawn (its rows are reported
    unavailable). Each stream's replicate sums are appended to one DuckDB table (which spills past its
    memory limit), then turned into metrics in one pass; a stream's numbers do not depend on the other
    streams."""
    sql.to_table(con, "evaluator_clusters", "estimates/evaluator_clusters")
    values = con.table("evaluator_clusters").select(*EVALUATOR_TO_SUMS).fetchnumpy()  # numbers only
    streams: dict = {}
    first = 0
    for analysis, metric, seed_offset, n_clusters in con.execute(
        load_sql("estimates/evaluator_stream_runs")
    ).fetchall():
        part = slice(first, first + n_clusters)  # the run of this stream's clusters, in rank order
        first += n_clusters
        if (analysis, metric) in skip:
            continue
        stream = (seed + int(seed_offset), int(n_clusters))
        labels = {"analysis": analysis, "metric": metric}
        streams.setdefault(stream, []).append((labels, {c: values[c][part] for c in EVALUATOR_TO_SUMS}))
    jobs = [
        (stream_seed, np.column_stack([m[c] for _, m in members for c in EVALUATOR_TO_SUMS]))
        for (stream_seed, _), members in streams.items()
    ]
    report = (
        None
        if progress is None
        else (
            lambda done, total: progress(
                f"bootstrap: {done // max(len(jobs), 1):,} of {reps:,} replicates "
                f"({len(jobs)} evaluator streams on {min(len(jobs), available_cores())} threads)"
            )
        )
    )
    all_sums = stream_sums(jobs, reps, progress=report)
    created = False
    for start in range(0, reps, POISSON_BLOCK_REPS):  # every stream's block in one insert
        parts = []
        for members, stream_sums_ in zip(streams.values(), all_sums):
            block = stream_sums_[start : start + POISSON_BLOCK_REPS]
            parts += _sums_tables(members, start, block, EVALUATOR_TO_SUMS)
        if parts:
            sums_block = con.from_arrow(pa.concat_tables(parts))
            if created:
                sums_block.insert_into("evaluator_sums")
            else:
                sums_block.create("evaluator_sums")
                created = True
    if created:
        con.sql(load_sql("estimates/evaluator_metrics")).insert_into("replicate_metrics")


def _shared_stream_metrics(con, scheme: str, reps: int, seed: int, progress=None, by_name=None) -> None:
    """One set of resamples for every metric and unit and every analysis with the same cluster count:
    numpy's stream (reference) or the Poisson(1) weights of sql/estimates/portable_replicates_poisson.sql
    (poisson; the same integer hash computed in C or numpy, so the weights of a block are one dense
    matrix times the statistics, as for the reference scheme: faster than the weights in SQL, same
    weights; figures: docs/benchmarks.md, "Figures behind design choices"), appended to replicate_metrics
    block by block."""
    con.sql(load_sql("records/cluster_matrix")).create_view("cluster_matrix")
    runs = con.execute(load_sql("records/cluster_matrix_runs")).fetchall()
    if scheme == "poisson" and len({n for _, n in runs}) == len(runs):
        # each analysis its own stream: its sums from the matrix read a piece at a time, never held whole
        con.execute(sql.fill("warehouse/duckdb_memory_limit", literals={"limit": f"{MIN_MEMORY_MB}MB"}))
        try:
            sums = _streamed_poisson_sums(con, runs, seed, reps)
        except _RowsOutOfOrder:
            pass  # (not seen) the whole matrix below, the same numbers
        else:
            labels = {(seed, int(n)): [({"analysis": a}, None)] for a, n in runs}
            _stream_metrics(
                con,
                "replicate_sums",
                "estimates/replicate_metrics",
                labels,
                reps,
                MATRIX_TO_SUMS,
                progress,
                scheme,
                blocks=_sums_blocks(sums, reps),
            )
            return
    sites = site_runs(con, by_name or {}) if scheme == SITE_SCHEME else {}
    matrix = np.empty((sum(int(n) for _, n in runs), len(MATRIX_TO_SUMS)), dtype=np.float64)
    # streamed a batch at a time, each row put at its matrix_row: no sort and no copy of the matrix in DuckDB
    # (only the columns read: _matrix_batches)
    for batch in con.table("cluster_matrix").select("matrix_row", *MATRIX_TO_SUMS).to_arrow_reader(1 << 17):
        at = batch.column("matrix_row").to_numpy(zero_copy_only=False)
        for j, column in enumerate(MATRIX_TO_SUMS):
            matrix[at, j] = batch.column(column).to_numpy(zero_copy_only=False)
    streams: dict[tuple, list[tuple[dict, np.ndarray]]] = {}
    by_site: dict[int, list[tuple[str, int, int]]] = {}
    first = 0
    for analysis, n_clusters in runs:
        if scheme == SITE_SCHEME:  # each analysis its own stream: its sites' runs are its own
            by_site[len(streams)] = sites[analysis]
            streams[(seed, analysis)] = [({"analysis": analysis}, matrix[first : first + n_clusters])]
        else:
            streams.setdefault((seed, int(n_clusters)), []).append(
                ({"analysis": analysis}, matrix[first : first + n_clusters])
            )
        first += n_clusters
    # What DuckDB still does here (replicate sums, intervals) is small; the cluster statistics it keeps
    # spill. So this process holds the matrix beside DuckDB's floor, not beside its whole limit
    # (10^7 clusters: a matrix of 10^7 x 16 doubles beside up to MAX_MEMORY_MB of DuckDB buffers; the peak
    # measured: docs/evaluating.md, "Large logs: records as a dataset").
    con.execute(sql.fill("warehouse/duckdb_memory_limit", literals={"limit": f"{MIN_MEMORY_MB}MB"}))
    _stream_metrics(
        con, "replicate_sums", "estimates/replicate_metrics", streams, reps, MATRIX_TO_SUMS, progress, scheme, by_site
    )


# The in-process schemes hold a (clusters x statistics) matrix of doubles: the reference scheme 16
# statistics per cluster (sql/records/cluster_matrix.sql), the evaluator scheme 4 per metric and cluster (8
# metrics, sql/estimates/evaluator_clusters.sql), the poisson scheme the reference's 16 (its weights are hashed
# a block at a time). Working copies: the fetched matrix, the live columns the products read and their
# transposed copy for one-replicate products (autheval/estimation/bootstrap.py product_blocks); poisson
# multiplies slices of the fetched matrix itself.
MATRIX_STATISTICS = {
    "reference": len(MATRIX_TO_SUMS),
    "evaluator": 8 * len(EVALUATOR_TO_SUMS),
    "poisson": len(MATRIX_TO_SUMS),
    "poisson_by_site": len(MATRIX_TO_SUMS),
}
MATRIX_COPIES = {"reference": 3, "evaluator": 3, "poisson": 1, "poisson_by_site": 1}
MEMORY_LIMIT_VARIABLE = "AUTHEVAL_MEMORY_LIMIT"
# A declared limit may be small (it only decides whether an exact scheme's matrix fits: 64kb sends every
# record to poisson), but not zero or a few bytes, which are mistakes.
MIN_MEMORY_LIMIT_BYTES = 1000


def matrix_bytes(scheme: str, n_clusters: int) -> int:
    """Bytes the in-process `scheme` holds for `n_clusters` clusters (over every analysis): G x
    statistics x 8 bytes, times its working copies."""
    return int(n_clusters) * MATRIX_STATISTICS[scheme] * 8 * MATRIX_COPIES[scheme]


def memory_limit_bytes() -> int | None:
    """The memory a run may use: AUTHEVAL_MEMORY_LIMIT when set (bytes, or a size such as 512MB,
    2GB, 1.5GiB), else the available memory (warehouse.sql.available_memory_bytes); None when
    neither is known."""
    from warehouse.sql import MAX_DECLARED_SIZE, available_memory_bytes, size_bytes

    text = os.environ.get(MEMORY_LIMIT_VARIABLE, "").strip()
    if not text:
        return available_memory_bytes()
    limit = size_bytes(text)
    if limit is None or not MIN_MEMORY_LIMIT_BYTES <= limit <= MAX_DECLARED_SIZE:
        rule = f"must be a size such as 512MB or 2GB, from 1kB to 1PiB, got {text[:40]!r}"
        raise RecordError(MEMORY_LIMIT_VARIABLE, None, rule)
    return limit


def _size(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


def check_matrix_memory(scheme: str, recordsets: Sequence[RecordSet]) -> None:
    """Before any work, refuse in one line a scheme whose clusters-by-statistics matrix would not fit
    in the memory limit (memory_limit_bytes), naming the scheme that would: `--scheme poisson`
    (one copy of its matrix), else `--engine spark` (nothing per cluster in this process)."""
    limit = memory_limit_bytes()
    if limit is None:
        return
    clusters = sum(r.n_clusters for r in recordsets)
    need = matrix_bytes(scheme, clusters)
    if need <= limit:
        return
    declared = os.environ.get(MEMORY_LIMIT_VARIABLE, "").strip()
    where = f"{MEMORY_LIMIT_VARIABLE}={declared}" if declared else "available memory"
    poisson = matrix_bytes("poisson", clusters)
    fix = (
        f"use --scheme poisson (its weights are hashed a block at a time: one copy, {_size(poisson)})"
        if scheme not in ("poisson", "poisson_by_site") and poisson <= limit
        else "use --engine spark (the statistics stay on the engine)"
    )
    raise RecordError(
        "--scheme",
        None,
        f"the {scheme} scheme holds {clusters:,} clusters x "
        f"{MATRIX_STATISTICS[scheme]} statistics as doubles in this process, {_size(need)} with its "
        f"working copies, more than the {_size(limit)} of {where}; {fix}",
    )


def check_reps(reps: int) -> int:
    """The replicate count, or RecordError naming --reps when it is out of range."""
    if isinstance(reps, bool) or not isinstance(reps, (int, np.integer)):
        raise RecordError("--reps", None, f"must be a whole number, got {reps!r}")
    if not 1 <= reps <= MAX_REPS:
        raise RecordError(
            "--reps",
            None,
            f"must be between 1 and {MAX_REPS:,} (got {reps:,}); "
            "intervals keep every replicate value, so memory grows with replicates",
        )
    return int(reps)


def warn_if_no_contrast(arms: Sequence[str], contrasts: Sequence) -> bool:
    """A comparison with nothing to compare: warn (one line) and return True."""
    if contrasts:
        return False
    if len(arms) < 2:
        warn(
            f"compare was given one arm ({', '.join(arms) or 'none'}): no paired contrast was asked; "
            "give a second --arm (or use evaluate)"
        )
    else:
        warn("compare: no paired contrast was asked")
    return True


def degenerate_warnings(result: EstimationResult) -> list[str]:
    """Why some intervals of `result` mean little: one cluster, fewer than MIN_CLUSTERS clusters (overall or
    with a changed action), fewer than MIN_STABLE_REPS replicates, an interval that does not contain its own
    point estimate, or too few replicates for any contrast to pass the multiplicity adjustment (the
    smallest p-value is 2 / (B + 1))."""
    messages = []
    if result.reps < MIN_STABLE_REPS:
        messages.append(
            f"{result.reps} bootstrap replicates (fewer than {MIN_STABLE_REPS}): the interval "
            "ends are noisy; use --reps 1000 or more"
        )
    if result.contrasts:
        m = max(c["family_size"] or 1 for c in result.contrasts)
        alpha, smallest = alpha_of(result.quantiles), min(1.0, 2.0 * m / (result.reps + 1))
        if smallest >= alpha:
            messages.append(
                f"{m} contrasts per unit: with {result.reps} replicates no Holm-adjusted p-value can "
                f"fall below {alpha:g} (the smallest is {smallest:.3g}); use --reps "
                f"{math.ceil(2 * m / alpha)} or more"
            )
    for analysis, records in result.records.items():
        rows = [
            r for r in result.estimates if r["analysis"] == analysis and r["available"] and r["ci_lower"] is not None
        ]
        if rows and records.n_clusters == 1:
            messages.append(
                f"{analysis}: one cluster, so every replicate resamples the same cluster and "
                "the intervals are degenerate"
            )
            continue
        if analysis in result.support:
            few = few_clusters_message(analysis, *result.support[analysis])
            if few:
                messages.append(few)
        outside = []
        for r in rows:
            est, lo, hi = r["estimate"], r["ci_lower"], r["ci_upper"]
            tol = 1e-12 * max(1.0, abs(est), abs(lo), abs(hi))
            if est is not None and not (lo - tol <= est <= hi + tol):
                outside.append(f"{r['metric']} ({r['unit']})")
        if outside:
            messages.append(
                f"{analysis}: the interval excludes its own point estimate for {', '.join(outside)} "
                "(a skewed or degenerate bootstrap distribution)"
            )
    return messages


def few_clusters_message(analysis: str, n_clusters: int, changed: int) -> str | None:
    """The stderr line of an analysis with fewer than MIN_CLUSTERS clusters, or with a change in fewer than
    MIN_CLUSTERS (and at least one: with none the gap is 0 by identification and p's interval is exact)."""
    if n_clusters >= MIN_CLUSTERS and (changed >= MIN_CLUSTERS or changed == 0):
        return None
    return (
        f"{analysis}: few clusters ({n_clusters} clusters, {changed} with a changed action; the threshold is "
        f"{MIN_CLUSTERS}): intervals may cover less than their level (95% intervals covered about 0.9 with 10 "
        "clusters) and p-values are kept at or above what an exact sign-flip test over those clusters can "
        "give, 2^(1-G); see the estimates' warning column"
    )


def estimate(
    recordsets: Sequence[RecordSet],
    scheme: str = "reference",
    reps: int = DEFAULT_REPS,
    seed: int | None = None,
    quantiles: tuple[float, float] = DEFAULT_QUANTILES,
    contrasts: Sequence[tuple[str, str]] = (),
    engine=None,
    progress: Callable[[str], None] | None = None,
    family: str = DEFAULT_CONTRAST_FAMILY,
) -> EstimationResult:
    """Estimate every metric in both units for each record set, and the paired contrasts.
    `family`: the label of this call's contrasts; their multiplicity family is every contrast of the
    call in one unit, named '<family> / <unit>' in each row (autheval.estimation.multiplicity).
    `engine` (warehouse.engine.Engine): None or DuckDB = here, in process; Spark = the work that grows
    with records and replicates runs there (autheval.estimation.engine_estimates), the rest here. `progress`:
    called with a line now and then during a long bootstrap (the CLI prints it on stderr)."""
    if scheme not in (*SCHEMES, *SITE_KEYED_SCHEMES):
        raise ValueError(f"unknown scheme {scheme!r}: expected one of {', '.join((*SCHEMES, *SITE_KEYED_SCHEMES))}")
    reps = check_reps(reps)
    lower, upper = quantiles
    if not 0.0 <= lower < upper <= 1.0:
        raise ValueError("quantiles must satisfy 0 <= lower < upper <= 1")
    seed = DEFAULT_SEEDS[scheme] if seed is None else int(seed)
    by_name = {r.analysis: r for r in recordsets}
    if len(by_name) != len(recordsets):
        raise ValueError("analysis names must be unique")
    if engine is None or engine.kind == "duckdb":
        check_matrix_memory(scheme, recordsets)

    con = connect(threads=1)  # same inputs, same bytes (warehouse.sql.connect)
    register_records(con, recordsets)
    if engine is None or engine.kind == "duckdb":
        register_cluster_stats(con, recordsets)  # summed once, when the records were read
        with one_blas_thread():
            _replicate_metrics(con, scheme, reps, seed, _unsupported(by_name), progress, by_name)
    else:
        from autheval.estimation.engine_estimates import replicate_metrics_on_engine

        replicate_metrics_on_engine(engine, con, scheme, reps, seed, recordsets, stats_back=bool(contrasts))
    q = {"lower": lower, "upper": upper}
    result = EstimationResult(scheme, reps, seed, (lower, upper), by_name)
    result.support = cluster_support(con, engine)

    computed = {(r["analysis"], r["unit"], r["metric"]): r for r in sql.rows(con, "estimates/intervals", q)}
    for records, unit, metric, row, avail in metric_cells(by_name.values(), computed):  # {}: no rows to resample
        keep = avail.available
        n = records.n_changed if metric == "delta" else records.n_cases
        support = result.support.get(records.analysis, (records.n_clusters, records.n_clusters))
        result.estimates.append(
            honest_small_sample(
                {
                    "analysis": records.analysis,
                    "unit": unit,
                    "metric": metric,
                    **kept_values(row, avail, "estimate", "ci_lower", "ci_upper"),
                    "p_value": row.get("p_value") if keep and metric in TESTED_METRICS else None,
                    "n": n if keep else 0,
                    **availability_columns(records, avail),
                    "reps_undefined": row.get("reps_undefined") if keep else None,
                },
                records,
                support,
                (lower, upper),
            )
        )

    for row in sql.rows(con, "estimates/identity_check"):  # the point in both units, for every scheme
        records = by_name[row["analysis"]]
        if availability(records, "delta").available or records.level == FULL:
            if scheme == "evaluator":  # per-metric streams: a replicate's Delta, p and delta are not one resample
                row["max_replicate_residual"] = None
            result.checks.append(row)

    if contrasts:
        result.contrasts = _paired_contrasts(con, by_name, contrasts, q)
        add_adjusted_columns(
            result.contrasts, [contrast_family(family, r["unit"]) for r in result.contrasts], (lower, upper), con
        )
    result.warnings = degenerate_warnings(result)
    for message in result.warnings:
        warn(message)
    return result


def _unsupported(by_name: dict[str, RecordSet]) -> frozenset[tuple[str, str]]:
    """(analysis, metric) pairs whose record level supports no number: nothing to resample."""
    return frozenset(
        (analysis, metric)
        for analysis, records in by_name.items()
        for metric in METRICS
        if not availability(records, metric).available
    )


def _cases(n) -> str:
    return "no" if n is None else str(int(n))


def check_contrast_pairs(con, by_name, contrasts) -> list[dict]:
    """The pairs {contrast, arm_a, arm_b} of `contrasts` ((arm a, arm b) names), registered on `con` as
    contrast_pairs, each arm known and its Delta_authority recoverable, the two arms on identical clusters
    with identical case counts (estimates/paired_clusters_mismatch.sql on the cluster_stats of `con`);
    else one line naming the record and the rule."""
    pairs = []
    for arm_a, arm_b in contrasts:
        for arm in (arm_a, arm_b):
            if arm not in by_name:
                raise RecordError("--contrast", None, f"unknown arm {arm!r} (arms: {', '.join(by_name)})")
            if not availability(by_name[arm], "Delta_authority").available:
                raise RecordError(
                    by_name[arm].source, "utility_proposed_local", "Delta_authority is not recoverable, so no contrast"
                )
        pairs.append({"contrast": f"{arm_a} minus {arm_b}", "arm_a": arm_a, "arm_b": arm_b})
    pair_schema = pa.schema([(name, pa.string()) for name in ("contrast", "arm_a", "arm_b")])  # typed: no inference
    con.register("contrast_pairs", pa.Table.from_pylist(pairs, schema=pair_schema))
    mismatch = sql.rows(con, "estimates/paired_clusters_mismatch")
    if mismatch:
        first = mismatch[0]
        raise RecordError(
            first["contrast"],
            "cluster_id",
            "a paired contrast needs identical clusters with identical case counts in both arms",
            f"cluster {first['cluster_id']!r}: {_cases(first['n_arm_a'])} vs {_cases(first['n_arm_b'])} cases",
        )
    return pairs


def _paired_contrasts(con, by_name, contrasts, q) -> list[dict]:
    pairs = check_contrast_pairs(con, by_name, contrasts)
    support = {r["contrast"]: int(r["changed_clusters"] or 0) for r in sql.rows(con, "estimates/contrast_support")}
    return contrast_rows(con, pairs, support, q)


def contrast_rows(con, pairs: list[dict], support: dict[str, int], q: dict) -> list[dict]:
    """The paired-contrast rows of `pairs` (registered on `con` as contrast_pairs) from the
    replicate_metrics of `con` (estimates/paired_contrast.sql): p-values no smaller than the sign-flip
    floor of `support` (contrast -> clusters with a change in either arm), in the order of `pairs` and
    UNITS, each with its arms and whether its interval excludes 0."""
    rows = sql.rows(con, "estimates/paired_contrast", q)
    for row in rows:  # no p-value below what the clusters with a change in either arm can support
        if row["p_value"] is not None:
            row["p_value"] = max(row["p_value"], sign_flip_floor(support.get(row["contrast"], 0)))
    unit_order = {u: i for i, u in enumerate(UNITS)}
    contrast_order = {p["contrast"]: i for i, p in enumerate(pairs)}
    rows.sort(key=lambda r: (contrast_order[r["contrast"]], unit_order[r["unit"]]))
    arms = {p["contrast"]: p for p in pairs}
    for row in rows:
        row["excludes_zero"] = bool(row["ci_lower"] > 0 or row["ci_upper"] < 0)
        row["arm_a"], row["arm_b"] = arms[row["contrast"]]["arm_a"], arms[row["contrast"]]["arm_b"]
    return rows
