"""Benchmark evidence beside the authority gap (DermoGPT spec section 7).

A user brings a closed-ended benchmark file (CSV or Parquet): item_id, image_id (an image of the lake)
or image_path (a file; relative paths are read from the benchmark file's folder), question, options (a
JSON list of strings, or the options joined by '|'), answer (an option's text, or its letter A, B,
...), axis, task, group (optional: a value, or "grouping=value" pairs joined by ';'). `read_benchmark`
validates it (sql/proposals/benchmark_parse.sql, sql/proposals/benchmark_validate.sql): a broken rule is one RecordError
line naming the file, the column, the rule and the first offending row.

Each model mechanism answers every item by option likelihood (models/benchmark.py). Here:
* `benchmark_items`: the items placed in the lake: an item of a lake image is in that image's cluster
  (items of one lesion are one cluster); an item given by image_path alone is a cluster of its own
  (sql/proposals/benchmark_items.sql);
* `accuracy_table`: accuracy over all items, per axis and per task (a task within its axis), with a
  whole-cluster bootstrap interval: the `reference` scheme of the estimates (clusters in ascending
  cluster_id order, numpy default_rng(seed).integers(0, G, size=G) per replicate, one shared set of
  resamples for every mechanism and scope, ratio of resampled sums, linear quantiles with undefined
  replicates dropped; sql/proposals/benchmark_cluster_stats.sql, sql/proposals/benchmark_intervals.sql);
* `fairness_table`: per mechanism, grouping and task (and all tasks), min group accuracy / max group
  accuracy (1 = every group equally accurate) over the groups with items (sql/proposals/benchmark_fairness.sql);
* the `transfer` table (sql/proposals/transfer.sql) puts each mechanism's benchmark accuracy beside its J,
  J_auth, p and Delta under each regime.
No Dagster here: assets/benchmark.py calls these.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa

from autheval.columns import schema
from autheval.errors import RecordError, first_violation
from autheval.io import read_table
from autheval.records.schema import check_column_types, closest_name, is_text_type
from autheval.records.warnings import warn
from warehouse.sql import connect, load_sql, run, to_table

BENCHMARK_COLUMNS = ("item_id", "image_id", "image_path", "question", "options", "answer", "axis", "task", "group")
REQUIRED_COLUMNS = ("item_id", "question", "options", "answer", "axis", "task")
# the lake's images columns an item takes: its path, then the groupings of sql/proposals/benchmark_items.sql
IMAGE_COLUMNS = ("image_id", "path", "sex", "anatomic_site", "fitzpatrick_skin_type", "ita_category")
ITEMS_SCHEMA = schema("row_index item_id image_id image_path question options answer answer_index axis task group")
RESULTS_SCHEMA = schema(
    "mechanism model model_revision item_id cluster_id axis task group lake_group input_sha256 options loglik prob",
    "choice answer_index correct",
)
ACCURACY_SCHEMA = schema(
    "mechanism model model_revision scope axis task n_items n_clusters n_correct accuracy ci_lower ci_upper reps",
    "reps_undefined available reason",
)
# An item's question and options together, in characters: a model's memory grows with the square of the
# prompt's length (a 320,000-character question asked for 16-26 GB); refused in one line instead.
MAX_PROMPT_CHARS = 8000
FAIRNESS_SCHEMA = schema(
    "mechanism model task grouping n_groups groups worst_group best_group min_accuracy max_accuracy fairness_ratio",
    "smallest_group_items smallest_group_clusters",
)


# ---------------------------------------------------------------- the file


def _as_text(table: pa.Table, source: str) -> pa.Table:
    """The file's columns by name, as text (a Parquet list of options becomes its JSON text)."""
    names = [n.strip() for n in table.column_names]
    table = table.rename_columns(names)
    for name in names:
        if name not in BENCHMARK_COLUMNS:
            guess = closest_name(name, BENCHMARK_COLUMNS)
            if guess:
                raise RecordError(source, name, f"unknown column; did you mean '{guess}'?")
    unused = [n for n in names if n not in BENCHMARK_COLUMNS]
    if unused:
        warn(f"{source}: columns not used by the benchmark: {', '.join(unused)}")
    for name in REQUIRED_COLUMNS:
        if name not in names:
            raise RecordError(source, name, "required column is missing")
    if "image_id" not in names and "image_path" not in names:
        raise RecordError(source, "image_id", "required column is missing (or give image_path)")
    check_column_types(table, source, text=[c for c in BENCHMARK_COLUMNS if c != "options"])
    columns = {"row_index": pa.array(range(table.num_rows), pa.int64())}
    for name in BENCHMARK_COLUMNS:
        if name not in names:
            columns[name] = pa.nulls(table.num_rows, pa.string())
            continue
        column = table.column(name)
        kind = column.type
        if name == "options" and (pa.types.is_list(kind) or pa.types.is_large_list(kind)):
            if not is_text_type(kind.value_type):
                raise RecordError(source, "options", f"a list of options must hold text; got {kind}")
            column = pa.array(
                [None if v is None else json.dumps(v, ensure_ascii=False) for v in column.to_pylist()], pa.string()
            )
        elif name == "options" and not is_text_type(kind) and not pa.types.is_null(kind):
            raise RecordError(
                source, "options", f"must be text (a JSON list or options joined by '|') or a list of text; got {kind}"
            )
        columns[name] = column.cast(pa.string())
    return pa.table(columns)


def read_benchmark(path: str | Path) -> pa.Table:
    """A benchmark file, validated (every rule that needs no lake), as ITEMS_SCHEMA rows; image_path
    absolute (a relative one is read from the file's folder) and its file present."""
    path = Path(path)
    source = str(path)
    table = read_table(path)
    if table.num_rows == 0:
        raise RecordError(source, None, "file has no benchmark items")
    con = connect()
    con.register("raw_benchmark", _as_text(table, source))
    to_table(con, "parsed_benchmark", "proposals/benchmark_parse")
    violations = con.execute(
        load_sql("proposals/benchmark_validate"), {"max_prompt_chars": MAX_PROMPT_CHARS}
    ).fetchall()
    if violations:
        raise first_violation(source, violations[0], "item")
    items = con.table("parsed_benchmark").order("row_index").arrow().read_all()
    from autheval.raw.phash import image_problem  # pillow: the raw extra, which a benchmark's cohort has

    paths: list[str | None] = []
    checked: set[str] = set()
    for row_index, item_id, given in zip(
        *(items.column(c).to_pylist() for c in ("row_index", "item_id", "image_path"))
    ):
        if given is None or not given.strip():
            paths.append(None)
            continue
        resolved = Path(given.strip())
        resolved = resolved if resolved.is_absolute() else path.resolve().parent / resolved
        if not resolved.is_file():
            raise first_violation(source, (0, "image_path", "no such image file", row_index, item_id, given, 1), "item")
        if str(resolved) not in checked:
            problem = image_problem(resolved)
            if problem:
                raise first_violation(source, (0, "image_path", problem, row_index, item_id, given, 1), "item")
            checked.add(str(resolved))
        paths.append(str(resolved))
    return pa.table(
        {
            "row_index": items.column("row_index"),
            "item_id": items.column("item_id"),
            "image_id": _blank_is_null(items.column("image_id")),
            "image_path": pa.array(paths, pa.string()),
            "question": items.column("question"),
            "options": items.column("option_list"),
            "answer": items.column("answer_text"),
            "answer_index": items.column("answer_index"),
            "axis": items.column("axis"),
            "task": items.column("task"),
            "group": _blank_is_null(items.column("group")),
        }
    ).cast(ITEMS_SCHEMA)


def _blank_is_null(column) -> pa.Array:
    return pa.array([None if v is None or not v.strip() else v.strip() for v in column.to_pylist()], pa.string())


def benchmark_items(
    benchmark: pa.Table, images: pa.Table, clusters: pa.Table, source: str, excluded: Mapping[str, str] | None = None
) -> pa.Table:
    """The validated items placed in the lake: image_path (given, else the lake image's), cluster_id
    (the lake image's cluster, else the image alone), cluster_source ('lake' | 'image') and lake_group
    (the image's recorded groupings: IMAGE_COLUMNS after the path; a column the lake lacks gives none).
    An image_id the lake does not know, on an item with no image_path, is one RecordError line naming
    `source` (and, for an image ingest left out, `excluded[image_id]`: why)."""
    missing = pa.nulls(images.num_rows, pa.string())
    con = connect()
    con.register("benchmark", benchmark)
    con.register(
        "images", pa.table({c: images.column(c) if c in images.column_names else missing for c in IMAGE_COLUMNS})
    )
    con.register("clusters", clusters.select(["image_id", "cluster_id"]))
    items = run(con, "proposals/benchmark_items")
    unknown = [
        row
        for row in items.select(["row_index", "item_id", "image_id", "image_path"]).to_pylist()
        if row["image_path"] is None
    ]
    if unknown:
        first = unknown[0]
        if excluded and first["image_id"] in excluded:
            raise RecordError(
                source,
                "image_id",
                f"image left out of the lake's images at ingest ({excluded[first['image_id']]}; see the "
                "ingest_report table) and no image_path",
                f"row {first['row_index'] + 1}, item {first['item_id']!r}, image {first['image_id']!r}",
            )
        raise first_violation(
            source,
            (
                0,
                "image_id",
                "unknown image id (not in the lake's images) and no image_path",
                first["row_index"],
                first["item_id"],
                first["image_id"],
                len(unknown),
            ),
            "item",
        )
    return items


# ---------------------------------------------------------------- accuracy and intervals


def results_table(items: pa.Table, scores: pa.Table, mechanism: str) -> pa.Table:
    """One mechanism's answers beside the items: mechanism, model, item_id, cluster_id, axis, task,
    group, choice, answer_index, correct (sql/proposals/benchmark_results.sql)."""
    con = connect()
    con.register("benchmark_items", items)
    con.register("benchmark_scores", scores)
    return run(con, "proposals/benchmark_results", {"mechanism": mechanism}).cast(RESULTS_SCHEMA)


def accuracy_table(results: pa.Table, reps: int, seed: int, lower: float = 0.025, upper: float = 0.975) -> pa.Table:
    """mechanism, model, scope ('all' | 'axis' | 'task'), axis, task, n_items, n_clusters, n_correct,
    accuracy, ci_lower, ci_upper, reps, reps_undefined: accuracy = correct / items (a ratio of sums),
    its interval from a whole-cluster bootstrap (the `reference` scheme: one stream for every
    mechanism and scope over the G clusters of the items, in ascending cluster_id order)."""
    import pyarrow.compute as pc

    from autheval.estimation.bootstrap import product_blocks

    con = connect()
    con.register("benchmark_results", results)
    stats = run(con, "proposals/benchmark_cluster_stats")
    con.register("benchmark_cluster_stats", stats)
    scopes = run(con, "proposals/benchmark_scopes")
    g = int(pc.max(stats.column("cluster_rank")).as_py()) + 1 if stats.num_rows else 0
    s = scopes.num_rows
    matrix = np.zeros((g, 2 * s), dtype=np.float64)
    rank = stats.column("cluster_rank").to_numpy()
    scope = stats.column("scope_index").to_numpy()
    matrix[rank, 2 * scope] = stats.column("n").to_numpy().astype(np.float64)
    matrix[rank, 2 * scope + 1] = stats.column("n_correct").to_numpy().astype(np.float64)
    parts = [_sums_table(-1, matrix.sum(axis=0, keepdims=True), s)]
    if g and reps:
        for start, sums in product_blocks(seed, reps, matrix):
            parts.append(_sums_table(start, sums, s))
    con.register("benchmark_replicate_sums", pa.concat_tables(parts))
    con.register("benchmark_scope_labels", scopes)
    table = run(con, "proposals/benchmark_intervals", {"lower": lower, "upper": upper})
    return table.cast(ACCURACY_SCHEMA)


def _sums_table(start: int, sums: np.ndarray, n_scopes: int) -> pa.Table:
    """Replicate sums (rows x 2S: items and correct per scope) in long form: scope_index, rep, n, n_correct."""
    rows = sums.shape[0]
    return pa.table(
        {
            "scope_index": pa.array(np.tile(np.arange(n_scopes, dtype=np.int64), rows)),
            "rep": pa.array(
                np.repeat(np.arange(start, start + rows, dtype=np.int64), n_scopes)
                if start >= 0
                else np.full(rows * n_scopes, -1, dtype=np.int64)
            ),
            "n": pa.array(sums[:, 0::2].ravel()),
            "n_correct": pa.array(sums[:, 1::2].ravel()),
        }
    )


def fairness_table(results: pa.Table) -> pa.Table:
    """mechanism, model, task (null: every item), grouping, n_groups, groups, worst_group, best_group,
    min_accuracy, max_accuracy, fairness_ratio (min / max; 1 = equal), smallest_group_items, over the
    groups the benchmark's `group` column names (sql/proposals/benchmark_fairness.sql)."""
    con = connect()
    con.register("benchmark_results", results)
    return run(con, "proposals/benchmark_fairness").cast(FAIRNESS_SCHEMA)


def not_scored(mechanisms, reason_of) -> pa.Table:
    """`benchmark` rows (scope 'all', accuracy null, available false) of the mechanisms no language
    model answered; `reason_of(mechanism)` says why."""
    return pa.Table.from_pylist([_not_scored(m, reason_of(m)) for m in mechanisms], schema=ACCURACY_SCHEMA)


def _not_scored(mechanism: str, reason: str) -> dict:
    return {
        "mechanism": mechanism,
        "model": None,
        "model_revision": None,
        "scope": "all",
        "axis": None,
        "task": None,
        "n_items": 0,
        "n_clusters": 0,
        "n_correct": 0,
        "accuracy": None,
        "ci_lower": None,
        "ci_upper": None,
        "reps": 0,
        "reps_undefined": 0,
        "available": False,
        "reason": reason,
    }
