"""Bring your own proposals: a proposals file (CSV or Parquet) in the lake's `proposals` contract.

The contract (shared by every mechanism, file-provided or model-made): mechanism, image_id, slate
(ranked actions a0..a3, length 2 or 4), a_head (= slate[0]), p_very_low, p_low, p_moderate, p_high
(nullable), diagnosis (nullable: a mechanism that also proposes a diagnosis, scored by hierarchical
similarity beside U_z), source. A file gives each row's ranking in one of three forms: the four probabilities
(slate = stable descending order, ties to the lower level), an explicit `slate` ("a2 a1 a3 a0"), or
only `a_head` (AuthEval spec 5.5's nearest-level rule). Validation and slates are SQL
(sql/proposals/proposals_file_validate.sql, sql/proposals/proposals_file_slates.sql); a broken rule is one RecordError
line naming the file, the column, the rule and the first offending row. Column types are checked first
(text or integer ids; numbers or text for the probabilities; text or a list of text for the slate).

Once the evaluated images are known (the lake's `proposals` asset, after ingest and clusters),
`check_coverage` decides each mechanism of a file on its own: it must propose for every evaluated
image, or it is refused in one line naming the file and the mechanism, before any table is written (a
mechanism with no evaluated image would vanish from the estimates, one with some of them would break
the paired comparisons that need the same clusters for every mechanism).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pyarrow as pa

from autheval.errors import RecordError, first_violation
from autheval.io import read_table
from autheval.raw.ingest import RISK
from autheval.records.schema import check_column_types, closest_name, is_text_type
from autheval.records.warnings import warn
from autheval.vocabulary import PROBABILITY_COLUMNS, PROPOSALS_COLUMNS, PROPOSALS_SCHEMA
from warehouse.sql import connect, load_sql

FILE_COLUMNS = tuple(name for name, _ in PROPOSALS_COLUMNS if name != "source")  # `source` says who made a row
UNKNOWN_IMAGE_RULE = 12  # sql/proposals/proposals_file_validate.sql: an image id not in the lake's images


def _as_text_columns(table: pa.Table, source: str, default_mechanism: str | None) -> pa.Table:
    """The file's columns by contract name, as text (a Parquet list slate becomes "a2 a1 ...")."""
    names = [n.strip() for n in table.column_names]
    table = table.rename_columns(names)
    for name in names:
        if name not in FILE_COLUMNS and name != "source":
            guess = closest_name(name, FILE_COLUMNS)
            if guess:
                raise RecordError(source, name, f"unknown column; did you mean '{guess}'?")
    unused = [n for n in names if n not in FILE_COLUMNS and n != "source"]
    if unused:
        warn(f"{source}: columns not used by proposals: {', '.join(unused)}")
    if "image_id" not in names:
        raise RecordError(source, "image_id", "required column is missing")
    if "mechanism" not in names and not default_mechanism:
        raise RecordError(source, "mechanism", "required column is missing")
    if not {"slate", "a_head", *PROBABILITY_COLUMNS} & set(names):
        raise RecordError(source, "slate", "give the four probabilities, a slate or an a_head column")
    _check_types(table, source)
    n = table.num_rows
    columns = {"row_index": pa.array(range(n), pa.int64())}
    for name in FILE_COLUMNS:
        if name not in names:
            value = default_mechanism if name == "mechanism" else None
            columns[name] = pa.array([value] * n, pa.string())
            continue
        column = table.column(name)
        if pa.types.is_list(column.type) or pa.types.is_large_list(column.type):
            column = pa.array([None if v is None else " ".join(map(str, v)) for v in column.to_pylist()], pa.string())
        columns[name] = column.cast(pa.string())
    return pa.table(columns)


def _check_types(table: pa.Table, source: str) -> None:
    """Each contract column of a Parquet file in a type it can mean, else one line naming it."""
    check_column_types(
        table, source, text=("mechanism", "image_id", "a_head", "diagnosis", "source"), numbers=PROBABILITY_COLUMNS
    )
    if "slate" in table.column_names:
        kind = table.schema.field("slate").type
        listed = (pa.types.is_list(kind) or pa.types.is_large_list(kind)) and is_text_type(kind.value_type)
        if not (listed or is_text_type(kind) or pa.types.is_null(kind)):
            raise RecordError(source, "slate", f'must be text ("a2 a1 a3 a0") or a list of text; got {kind}')


def proposals_from_table(
    table: pa.Table,
    source: str,
    image_ids: pa.Array | None = None,
    default_mechanism: str | None = None,
    origin: str = "file",
    excluded: Mapping[str, str] | None = None,
) -> pa.Table:
    """Validate a proposals table and return it in the contract. `image_ids`, when given, is the
    evaluated image set: an id outside it is an error. `origin` fills the `source` column. `excluded`
    (image id -> reason, autheval.raw.ingest.excluded_images) names why an image the lake left out at
    ingest (an unreadable or 0-byte file, ...) is not there, instead of calling its id unknown."""
    if table.num_rows == 0:
        raise RecordError(source, None, "file has no proposals")
    raw = _as_text_columns(table, source, default_mechanism)
    con = connect()
    con.register("raw_proposals", raw)
    known = pa.table({"image_id": pa.array([] if image_ids is None else image_ids, pa.string())})
    con.register("known_images", known)
    con.register("known_diagnoses", pa.table({"diagnosis": sorted(RISK)}))
    violations = con.execute(
        load_sql("proposals/proposals_file_validate"), {"check_images": image_ids is not None}
    ).fetchall()
    if violations:
        rule_order, _, _, row_index, image_id, _, n_rows = violations[0]
        if rule_order == UNKNOWN_IMAGE_RULE and excluded and image_id in excluded:
            raise RecordError(
                source,
                "image_id",
                f"image left out of the lake's images at ingest ({excluded[image_id]}; see the ingest_report table)",
                f"row {row_index + 1}, image {image_id!r}"
                + (f"; {n_rows} rows name an image the lake lacks" if n_rows > 1 else ""),
            )
        raise first_violation(source, violations[0], "image")
    result = con.execute(load_sql("proposals/proposals_file_slates"), {"source": origin}).arrow().read_all()
    return result.cast(PROPOSALS_SCHEMA)


def read_proposals(
    path: str | Path, image_ids: pa.Array | None = None, excluded: Mapping[str, str] | None = None
) -> pa.Table:
    """Read and validate a proposals file; a file without a `mechanism` column names its mechanism
    after the file (its stem)."""
    path = Path(path)
    return proposals_from_table(
        read_table(path), str(path), image_ids, default_mechanism=path.stem.split(".")[0], excluded=excluded
    )


def check_coverage(proposals: pa.Table, evaluated_ids: pa.Array, source: str, split: str) -> None:
    """Every mechanism of `proposals` (the contract) proposes for every evaluated image (`evaluated_ids`:
    the images the review runs on, split `split`), else one RecordError line naming the file `source`
    and the mechanism (sql/proposals/proposals_coverage.sql). Proposals for other images are allowed (unused)."""
    con = connect()
    con.register("proposals", proposals.select(["mechanism", "image_id"]))
    con.register("evaluated_images", pa.table({"image_id": pa.array(evaluated_ids, pa.string())}))
    row = con.execute(load_sql("proposals/proposals_coverage")).fetchone()
    if row is None:
        return
    mechanism, n_evaluated, n_covered, missing, outside = row
    where = f"the {n_evaluated} evaluated images (split {split!r})"
    if n_covered == 0:
        raise RecordError(
            source,
            "mechanism",
            f"mechanism {mechanism!r} proposes for none of {where}; it would vanish from the estimates",
            f"its first image {outside!r} is not evaluated",
        )
    raise RecordError(
        source,
        "mechanism",
        f"mechanism {mechanism!r} must propose for every one of {where}: "
        f"{n_evaluated - n_covered} have no proposal (every mechanism is compared on the same "
        "clusters)",
        f"e.g. image {missing!r}",
    )


def evaluated_image_ids(clusters: pa.Table, split: str) -> pa.Array:
    """The images the review runs on: the clustered images of split `split` ('all': every one)."""
    con = connect()
    con.register("clusters", clusters.select(["image_id", "split"]))
    return (
        con.execute(load_sql("proposals/proposals_evaluated_images"), {"split": split})
        .arrow()
        .read_all()
        .column("image_id")
    )


def precheck_proposals(path: str | Path, freeze: str | Path | None = None, split: str = "test") -> pa.Table:
    """What a command can decide before the lake exists (`autheval demo`'s flag check): every rule of
    the file but the image ids, and, given a frozen split (its `image_id, split` are the cohort's), that
    each mechanism covers the evaluated split. The `proposals` asset decides the rest."""
    table = read_proposals(path)
    if freeze is not None:
        from autheval.raw.splits import read_freeze

        frozen = read_freeze(freeze)
        if {"image_id", "split"} <= set(frozen.column_names):  # else the freeze's own check names it later
            check_coverage(table, evaluated_image_ids(frozen, split), str(path), split)
    return table


def as_contract(table: pa.Table) -> pa.Table:
    """A mechanism's rows (a model's, from autheval/proposals/slates.py: no `diagnosis` column) in the contract:
    the missing diagnosis is null, columns in contract order and types."""
    if "diagnosis" not in table.column_names:
        table = table.append_column("diagnosis", pa.nulls(table.num_rows, pa.string()))
    return table.select(PROPOSALS_SCHEMA.names).cast(PROPOSALS_SCHEMA)


def combine_proposals(parts: list[pa.Table]) -> pa.Table:
    """Several mechanisms' proposals as one table in the order given (the order mechanisms are declared:
    later minus earlier in the paired contrasts); a mechanism name used twice is refused."""
    parts = [as_contract(part) for part in parts]
    seen: dict[str, int] = {}
    for k, part in enumerate(parts):
        for name in dict.fromkeys(part.column("mechanism").to_pylist()):
            if seen.setdefault(name, k) != k:
                raise RecordError(
                    "proposals",
                    "mechanism",
                    f"mechanism {name!r} is given twice (by a file and a model, or by two models); rename one",
                )
    return pa.concat_tables(parts) if parts else PROPOSALS_SCHEMA.empty_table()
