"""ISIC-Archive-style metadata checked against the Archive's own published schema (`isic-metadata`, its
pydantic `MetadataRow`): age (`age_approx` in the Archive's exports, `85+` read as 85), sex, the general
and the hierarchical anatomic sites (`anatom_site_general`, `anatom_site_special`, `anatom_site` or
`anatom_site_1..5`), `fitzpatrick_skin_type`, the image type and its dermoscopic type, the diagnosis
confirmation, the melanoma fields, ... and the rules that tie two fields together (a dermoscopic type
needs an image type, a special site must fit its general site, ...).

A column is checked when its name (case-insensitive) is one of the Archive's fields; fields a source
does not have are simply absent (nothing is required). The diagnosis is not checked here: ingestion
reads it by its own rules (ISIC 2019 codes, one-hot columns, spelled-out names). Ids (patient, lesion)
are any text, and ingestion refuses the ones with surrounding whitespace.

Every invalid value is one report row (`invalid_isic_metadata`: the file's column and the value as
given; `inconsistent_isic_metadata`: two fields that do not go together, the first one's column and
value with the Archive's message). The image is kept: a bad metadata value does not make the image or
its label unusable, the columns the study reads keep ingestion's own rules (they feed the workflow
profile, which must reproduce the reference study), and a grouping read from the schema
(`fitzpatrick_skin_type`) takes only valid values, so an invalid one is 'missing', never a group.
"""

from __future__ import annotations

import re

from isic_metadata.metadata import MetadataRow, convert_errors
from pydantic import ValidationError

# The Archive's fields that ingestion checks: the model's own, less the diagnosis (ingestion's rules) and
# the container of unknown columns; `age_approx` is the Archive's exported name of `age`.
NOT_CHECKED = {"diagnosis", "unstructured", "patient_id", "lesion_id"}
EXPORTED_NAMES = {"age_approx": "age", **{f"anatom_site_{i}": f"anatom_site_{i}" for i in range(1, 6)}}
FITZPATRICK = "fitzpatrick_skin_type"


def checked_fields() -> dict[str, str]:
    """lower-case column name -> the Archive's field it is checked as."""
    fields = {name: name for name in MetadataRow.model_fields if name not in NOT_CHECKED}
    return {**fields, **EXPORTED_NAMES}


def isic_columns(column_names: list[str]) -> dict[str, str]:
    """The file's columns that are Archive fields: column as spelled -> field. One column per field:
    the field's own name before its exported one (`age` beside `age_approx`: `age`, as ingestion
    reads), else the first in the file."""
    fields = checked_fields()
    found: dict[str, str] = {}
    for own_name in (True, False):
        for name in column_names:
            field = fields.get(name.lower())
            if field is not None and (name.lower() == field) == own_name and field not in found.values():
                found[name] = field
    return found


def validate_rows(columns: dict[str, list]) -> tuple[list[tuple[int, str, str, str]], list[str | None]]:
    """Check every row of a metadata file's columns (name -> values, None for missing); the columns
    that are not Archive fields are left alone.

    Returns (problems, fitzpatrick): problems as (row index, column, reason, value) in row order, and
    each row's valid Fitzpatrick type (None when absent or invalid). Rows with the same values are
    checked once.
    """
    fields = isic_columns(list(columns))
    column_of = {field: column for column, field in fields.items()}
    n = len(next(iter(columns.values()))) if columns else 0
    problems: list[tuple[int, str, str, str]] = []
    fitzpatrick: list[str | None] = [None] * n
    checked: dict[tuple, tuple[list, str | None]] = {}
    for i in range(n):
        values = tuple(columns[c][i] for c in fields)
        if values not in checked:
            checked[values] = _check({fields[c]: v for c, v in zip(fields, values) if v is not None}, column_of)
        errors, fitzpatrick[i] = checked[values]
        problems.extend((i, column, reason, value) for column, reason, value in errors)
    return problems, fitzpatrick


def _check(row: dict, column_of: dict[str, str]) -> tuple[list[tuple[str, str, str]], str | None]:
    """(column, reason, value) of each invalid value of one row, and its valid Fitzpatrick type."""
    try:
        return [], _type_name(MetadataRow(**row))
    except ValidationError as err:
        errors = []
        for error in convert_errors(err):
            if error["loc"]:
                field = str(error["loc"][0])
                if field in column_of:
                    errors.append((column_of[field], "invalid_isic_metadata", str(row[field])))
                else:  # anatom_site_1..5, checked joined as the Archive's `anatom_site`
                    parts = ",".join(c for c, f in column_of.items() if re.fullmatch(rf"{field}_[1-5]", f))
                    errors.append((parts, "invalid_isic_metadata", str(error["input"])))
            else:  # a rule between two fields: the first one's column and value, with the Archive's message
                first = (error.get("ctx") or {}).get("field1")  # None where the Archive names no field
                errors.append(
                    (
                        column_of.get(first, first) if first is not None else "",
                        "inconsistent_isic_metadata",
                        f"{row.get(first)} ({error['msg']})",
                    )
                )
        return errors, fitzpatrick_type(row.get(FITZPATRICK))


def fitzpatrick_type(value) -> str | None:
    """The Archive's Fitzpatrick type (I..VI) a value gives, else None (absent or invalid)."""
    if value is None:
        return None
    try:
        return _type_name(MetadataRow(**{FITZPATRICK: value}))
    except ValidationError:
        return None


def _type_name(parsed: MetadataRow) -> str | None:
    value = parsed.fitzpatrick_skin_type
    return None if value is None else value.value
