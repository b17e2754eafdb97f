"""Ingest ISIC 2019 (or any ISIC-Archive-style metadata CSV) into the `images` table.

Follows AuthEval spec sections 1.1-1.5: alias-based column detection, one-hot diagnosis collapse,
diagnosis -> risk stratum, right-closed age bins with the literal string "nan", and the workflow
profile assigned by hashing `age_bin|site`. Every row that cannot be used is listed in a report table
with its reason; nothing is dropped silently. Broken files (a duplicated id in the labels file, a
missing id column, a non-numeric one-hot cell, an image, lesion or patient id that begins or ends with
whitespace) raise RecordError instead: `ISIC_1 ` beside `ISIC_1` would be two images (no label, no
file) and `L1 ` another lesion, so another cluster. The columns named as the ISIC Archive's fields are
checked with the Archive's schema (autheval/raw/isic_metadata.py): an invalid value is a report row
naming the field and the value, the image kept; `fitzpatrick_skin_type` holds the valid types.

Images are read only from inside the input folder (the image folder, else the metadata's folder):
every path is resolved (links followed) and a path that ends outside it, through `..` in an id or
path or a link to a file elsewhere, is never read: the row is excluded and reported
(`outside_input_folder`, with the path and where it leads). Links that stay inside are followed, and
the lake's `path` is the resolved file.
"""

from __future__ import annotations

import hashlib
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from autheval.columns import schema
from autheval.errors import RecordError
from autheval.io import file_sha256
from autheval.raw.isic_metadata import validate_rows
from autheval.vocabulary import DIAGNOSIS_NAMES, DIAGNOSIS_RISK, RISK_LEVELS
from warehouse.sql import connect, load_sql

METADATA_FILE = "ISIC_2019_Training_Metadata.csv"
LABELS_FILE = "ISIC_2019_Training_GroundTruth.csv"
IMAGE_FOLDER = "ISIC_2019_Training_Input"
IMAGE_ZIP = "ISIC_2019_Training_Input.zip"
SYNTH_MANIFEST = "synth_manifest.json"

# Published SHA-256 of the official files (spec 1.1); compared whenever a file carries one of these names.
OFFICIAL_SHA256 = {
    METADATA_FILE: "d93994a8ed201d474de9a7af7e17ec30929cbc4a5220659ecbde17cbe83e9316",
    LABELS_FILE: "aa88e9638fe4df9ef330dc4ba22fa4bd475c44af692fffb870c73091ab25cdcd",
    IMAGE_ZIP: "5075020b720c8f1b9b7f3ff85326c55ce0435e5906c41fbd338994feef886df1",
}
METADATA_COLUMNS = ("image", "age_approx", "anatom_site_general", "lesion_id", "sex")
LABEL_COLUMNS = ("MEL", "NV", "BCC", "AK", "BKL", "DF", "VASC", "SCC", "UNK")

# Canonical field -> aliases in priority order; matched case-insensitively and exactly (spec 1.2).
ALIASES = {
    "image_id": ("image", "image_id", "isic_id", "lesion_image_id"),
    "image_path": ("image_path", "path", "filepath", "file_path", "jpg_path"),
    "patient_id": ("patient_id", "patient", "patient_identifier"),
    "lesion_id": ("lesion_id", "lesion", "lesion_identifier"),
    "diagnosis": ("diagnosis", "dx", "label", "target"),
    "sex": ("sex", "gender"),
    "age": ("age", "age_approx", "age_years"),
    "anatomic_site": ("anatom_site_general", "anatomic_site", "localization", "lesion_location"),
    "source": ("dataset", "source", "attribution", "dataset_name", "center", "site"),
}
# One-hot columns searched for the row maximum, in this order (UNK deliberately absent, spec 1.2.3).
ONE_HOT = ("MEL", "NV", "BCC", "AK", "AKIEC", "BKL", "DF", "VASC", "SCC")

RISK = DIAGNOSIS_RISK  # diagnosis -> risk level; DIAGNOSIS_NAMES: spelled-out names (autheval/vocabulary.py)
PROFILES = ("BCN_like", "HAM_like", "MSK_like", "RURAL_like")

IMAGES_SCHEMA = schema(
    "image_id lesion_id patient_id age sex anatomic_site diagnosis risk_stratum ideal_action_level age_bin",
    "site_profile site_id path source profile_signature sex_norm site_norm row_index",
    # by the ISIC Archive's schema (autheval/raw/isic_metadata.py): the type where the source records a valid one
    "fitzpatrick_skin_type",
)
# row_number: the 1-based data row in that file (header not counted); null: not a row.
# action: excluded | kept | ignored | recorded
REPORT_SCHEMA = schema("source row_number image_id column_name reason", ("value", pa.string()), "action")
INPUT_FILES_SCHEMA = schema("role path bytes sha256 expected_sha256 checksum_ok")


@dataclass(frozen=True)
class Ingested:
    """What ingestion produced: usable images, the report of every problem, and the input files."""

    images: pa.Table
    report: pa.Table
    input_files: pa.Table


def h12(text: str) -> int:
    """AuthEval's H12 primitive (spec 0.3): the first 12 hex digits of SHA-256(text) as an integer."""
    return int(hashlib.sha256(text.encode("utf-8")).hexdigest()[:12], 16)


def profile_for_signature(signature: str) -> str:
    """Workflow profile of a signature `age_bin|site` (spec 1.5); no seed."""
    return PROFILES[h12(signature) % 4]


def age_bin(age: float | None) -> str:
    """Right-closed age band of spec 1.2.4; anything outside (0, 200] or missing is the string 'nan'."""
    if age is None or not np.isfinite(age):
        return "nan"
    for upper, label in ((30, "<30"), (50, "30-50"), (70, "50-70"), (200, "70+")):
        if 0 < age <= upper:
            return label
    return "nan"


def proxy_category(value) -> str:
    """Gate-proxy normalisation of sex / site (spec 1.4): trimmed, lower-cased, '__missing__'."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "__missing__"
    text = str(value).strip().lower()
    return "__missing__" if text in ("", "nan", "none") else text


def proxy_age(ages, is_train) -> tuple[np.ndarray, np.ndarray]:
    """Gate-proxy age (spec 1.4): z-score with the train mean and population SD; missing -> train
    mean (z = 0) plus a missing flag. Returns (z, missing) as float arrays."""
    age = np.asarray([np.nan if a is None else a for a in ages], dtype=float)
    train = np.asarray(is_train, dtype=bool)
    missing = ~np.isfinite(age)
    ref = age[train & ~missing]
    mean = float(ref.mean()) if ref.size else 0.0
    sd = float(ref.std(ddof=0)) if ref.size else 0.0
    filled = np.where(missing, mean, age)
    z = (filled - mean) / sd if sd > 0 else np.zeros_like(filled)
    return z, missing.astype(float)


def _archive_age(value: str | None) -> str | None:
    """The ISIC Archive's `85+` (85 or older; the Archive stores it as 85) as 85; any other text as is."""
    return "85" if value is not None and value.strip() == "85+" else value


def prompt_text(value) -> str:
    """MedGemma-prompt normalisation (spec 1.4): Python str() of the value, 'nan' when missing."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "nan"
    return str(value)


def diagnosis_map() -> pa.Table:
    """alias (lower case) -> code, risk stratum and ideal action level, for the SQL joins."""
    aliases = {code.lower(): code for code in RISK}
    aliases.update(DIAGNOSIS_NAMES)
    names = sorted(aliases)
    codes = [aliases[a] for a in names]
    return pa.table(
        {
            "alias": names,
            "code": codes,
            "risk_stratum": [RISK[c] for c in codes],
            "ideal_action_level": pa.array([RISK_LEVELS.index(RISK[c]) for c in codes], pa.int32()),
        }
    )


def read_csv(path: str | Path, con: duckdb.DuckDBPyConnection) -> pa.Table:
    """A CSV as text columns (pandas' missing markers as NULL); unreadable or empty -> RecordError."""
    path = Path(path)
    if not path.is_file():
        raise RecordError(str(path), None, "file not found")
    if path.stat().st_size == 0:
        raise RecordError(str(path), None, "file is empty")
    try:
        return con.execute(load_sql("ingest/raw_read_csv"), [str(path)]).arrow().read_all()
    except duckdb.Error as err:
        raise RecordError(str(path), None, f"cannot be read: {str(err).strip().splitlines()[0]}") from err


def find_column(table: pa.Table, canonical: str) -> str | None:
    """The first alias present (case-insensitive exact match), as spelled in the file."""
    by_lower: dict[str, str] = {}
    for name in table.column_names:
        by_lower.setdefault(name.lower(), name)
    for alias in ALIASES[canonical]:
        if alias in by_lower:
            return by_lower[alias]
    return None


def _first_duplicate(ids: list) -> tuple[int, str, int] | None:
    seen: dict = {}
    for i, value in enumerate(ids):
        if value is None:
            continue
        seen.setdefault(value, []).append(i)
    dups = [rows for rows in seen.values() if len(rows) > 1]
    if not dups:
        return None
    first = min(dups, key=lambda rows: rows[1])
    return first[1], ids[first[1]], sum(len(r) for r in dups)


def _refuse_spaced_ids(values: list, source: str, column: str, what: str) -> None:
    """An id that begins or ends with whitespace (or is blank) is a broken file: one RecordError line."""
    for i, value in enumerate(values):
        if value is not None and value != value.strip():
            raise RecordError(
                source,
                column,
                f"must not begin or end with whitespace (it would be another {what} than the same id without it)",
                f"data row {i + 1}, value {value!r}",
            )


def _inside(path: str, root: str) -> str | None:
    """The resolved path (links followed) when it lies inside the resolved folder `root`, else None."""
    try:
        real = os.path.realpath(path)
    except (OSError, ValueError):  # a NUL byte, a link loop
        return None
    return real if real != root and os.path.commonpath([real, root]) == root else None


def _one_hot_diagnosis(table: pa.Table, source: str) -> tuple[list, np.ndarray]:
    """Per row, the first one-hot column holding the row maximum (spec 1.2.3).

    A row whose maximum is not positive (all zero, or only UNK set) has no diagnosis: it is reported
    as unknown rather than labelled MEL as the reference code would (that case never occurs in the
    ISIC 2019 training labels). Returns (codes with None for unknown, tie flags).
    """
    by_upper = {name.upper(): name for name in reversed(table.column_names)}
    present = [c for c in ONE_HOT if c in by_upper]
    n = table.num_rows
    values = np.zeros((n, len(present)))
    for j, code in enumerate(present):
        column = by_upper[code]
        texts = table.column(column).to_pylist()
        for i, text in enumerate(texts):
            try:
                values[i, j] = float(text.strip()) if text is not None else np.nan
            except ValueError:
                values[i, j] = np.nan
            if not np.isfinite(values[i, j]):
                raise RecordError(
                    source,
                    column,
                    "one-hot label must be a finite number (0.0 or 1.0)",
                    f"data row {i + 1}, value {text!r}",
                )
    best = values.argmax(axis=1)
    top = values.max(axis=1)
    ties = (values == top[:, None]).sum(axis=1) > 1
    codes = [present[b] if t > 0 else "UNK" for b, t in zip(best, top)]
    return codes, ties & (top > 0)


def _locate_images(
    image_ids: list, image_dir: Path, image_zip: Path | None
) -> tuple[list, set | None, dict[int, list[str]]]:
    """Path string of each image: `<dir>/<id>.jpg`, or `<zip>!<member>` for the official zip.

    Also returns the set of paths known to exist inside the zip (None for a folder: stat each file),
    so the zip's directory is read once, not once per image, and the rows whose image the zip holds
    more than once by base name ({row: members}). In a zip the official member
    `ISIC_2019_Training_Input/<id>.jpg` is the image; without it, the one member named `<id>.jpg` in
    any folder; two such members (and no official one) are ambiguous: never one picked silently.
    """
    if image_zip is not None:
        with zipfile.ZipFile(image_zip) as archive:
            names = [m for m in archive.namelist() if not m.endswith("/")]
        present = set(names)
        by_name: dict[str, list[str]] = {}
        for member in names:
            by_name.setdefault(member.rsplit("/", 1)[-1], []).append(member)
        root = str(image_zip.resolve())
        paths: list[str | None] = []
        ambiguous: dict[int, list[str]] = {}
        for row, i in enumerate(image_ids):
            if i is None:
                paths.append(None)
                continue
            official = f"{IMAGE_FOLDER}/{i}.jpg"
            candidates = by_name.get(f"{i}.jpg", [])
            if official not in present and len(candidates) > 1:
                ambiguous[row] = sorted(candidates)
            member = official if official in present or len(candidates) != 1 else candidates[0]
            paths.append(f"{root}!{member}")
        return paths, {f"{root}!{m}" for m in names}, ambiguous
    folder = image_dir.resolve()
    return [None if i is None else str(folder / f"{i}.jpg") for i in image_ids], None, {}


def ingest(
    metadata: str | Path,
    labels: str | Path | None = None,
    images: str | Path | None = None,
    *,
    source: str | None = None,
    check_files: bool = True,
    checksums: bool = True,
    strict_checksums: bool = False,
) -> Ingested:
    """Ingest one metadata CSV (+ optional one-hot labels CSV) and an image folder or zip.

    `images` is a folder of `<image_id>.jpg` files (default: the metadata's folder) or the official zip;
    when the metadata has an image-path column its paths win (relative ones from the metadata's folder).
    `source` fills the `source` column where the file has none (default: 'isic2019' for the official
    file name, else the file's stem). `strict_checksums` turns a checksum mismatch on an official file
    name into a RecordError instead of a report row.
    """
    metadata = Path(metadata)
    con = connect()
    meta = read_csv(metadata, con)
    msource = str(metadata)
    if meta.num_rows == 0:
        raise RecordError(msource, None, "file has no data rows")
    id_col = find_column(meta, "image_id")
    if id_col is None:
        raise RecordError(
            msource,
            "image",
            "required image id column is missing "
            f"(expected one of {', '.join(ALIASES['image_id'])}); found {', '.join(meta.column_names)}",
        )
    ids = meta.column(id_col).to_pylist()
    n = meta.num_rows
    report_rows: list[dict] = []
    _refuse_spaced_ids(ids, msource, id_col, "image")

    def col(canonical: str, table: pa.Table = meta) -> list:
        name = find_column(table, canonical)
        return table.column(name).to_pylist() if name else [None] * n

    for canonical, what in (("lesion_id", "lesion"), ("patient_id", "patient")):
        spelled = find_column(meta, canonical)
        if spelled:
            _refuse_spaced_ids(col(canonical), msource, spelled, what)

    files = [("metadata", metadata)]
    label_table = None
    has_label = [True] * n
    lsource = None
    if labels is not None:
        labels = Path(labels)
        lsource = str(labels)
        files.append(("labels", labels))
        label_table = read_csv(labels, con)
        lid_col = find_column(label_table, "image_id")
        if lid_col is None:
            raise RecordError(
                lsource,
                "image",
                f"required image id column is missing (expected one of {', '.join(ALIASES['image_id'])})",
            )
        label_ids = label_table.column(lid_col).to_pylist()
        empty = [i for i, v in enumerate(label_ids) if v is None]
        if empty:
            raise RecordError(lsource, lid_col, "image id must not be empty", f"data row {empty[0] + 1}")
        _refuse_spaced_ids(label_ids, lsource, lid_col, "image")
        dup = _first_duplicate(label_ids)
        if dup is not None:
            row, value, count = dup
            raise RecordError(
                lsource,
                lid_col,
                "image ids must be unique in the labels file",
                f"data row {row + 1}, id {value!r}; {count} rows share an id",
            )
        # Bring over only label columns the metadata does not already have (spec 1.2.1).
        meta_names = {c.lower() for c in meta.column_names}
        extra = [c for c in label_table.column_names if c != lid_col and c.lower() not in meta_names]
        position = pc.index_in(pa.array(ids, pa.string()), value_set=pa.array(label_ids, pa.string()))
        has_label = position.is_valid().to_pylist()
        joined = label_table.select(extra).take(position) if extra else pa.table({})
        meta_ids = {v for v in ids if v is not None}
        for i, lid in enumerate(label_ids):
            if lid not in meta_ids:
                report_rows.append(report_row(lsource, i + 1, lid, lid_col, "label_without_metadata", None, "ignored"))
        combined = meta
        for name in joined.column_names:
            combined = combined.append_column(name, joined.column(name))
    else:
        combined = meta

    diag_col = find_column(combined, "diagnosis")
    ties = np.zeros(n, dtype=bool)
    if diag_col is not None:
        diagnosis = combined.column(diag_col).to_pylist()
    elif any(c.upper() in ONE_HOT for c in combined.column_names):
        labelled = [i for i in range(n) if has_label[i]]
        codes, tie = _one_hot_diagnosis(combined.take(labelled), lsource or msource)
        diagnosis = [None] * n
        for k, i in enumerate(labelled):
            diagnosis[i] = codes[k]
            ties[i] = tie[k]
    else:
        raise RecordError(
            lsource or msource,
            "diagnosis",
            "no diagnosis column (one of "
            f"{', '.join(ALIASES['diagnosis'])}) and no one-hot label columns "
            f"({', '.join(ONE_HOT)})",
        )

    # Image locations.
    image_dir = image_zip = None
    if images is not None:
        images = Path(images)
        if images.suffix.lower() == ".zip":
            image_zip = images
            files.append(("images_zip", images))
        else:
            image_dir = images
    path_col = find_column(meta, "image_path")
    in_zip = None
    ambiguous: dict[int, list[str]] = {}
    if path_col is not None:
        base = metadata.resolve().parent
        located = [
            None if p is None else str(Path(p) if Path(p).is_absolute() else base / p)
            for p in meta.column(path_col).to_pylist()
        ]
    else:
        located, in_zip, ambiguous = _locate_images(ids, image_dir or metadata.parent, image_zip)
    # Containment: a file path must resolve inside the input folder (a zip's members are read from it).
    outside: dict[int, str] = {}
    paths = list(located)
    if in_zip is None:
        root = os.path.realpath(image_dir if image_dir is not None else metadata.parent)
        for i, path in enumerate(located):
            if path is None:
                continue
            real = _inside(path, root)
            if real is None:
                outside[i] = path
            else:
                paths[i] = real

    if source is None:
        source = "isic2019" if metadata.name == METADATA_FILE else metadata.stem
    source_values = col("source")
    coverage = sum(v is not None for v in source_values) / n
    staged = pa.table(
        {
            "row_index": pa.array(range(n), pa.int64()),
            "image_id": pa.array(ids, pa.string()),
            "path": pa.array(paths, pa.string()),
            "patient_id": pa.array(col("patient_id"), pa.string()),
            "lesion_id": pa.array(col("lesion_id"), pa.string()),
            "diagnosis_raw": pa.array(diagnosis, pa.string()),
            "sex": pa.array(col("sex"), pa.string()),
            "age_raw": pa.array([_archive_age(v) for v in col("age")], pa.string()),
            "anatomic_site": pa.array(col("anatomic_site"), pa.string()),
            "source_raw": pa.array(source_values, pa.string()),
            "has_label": pa.array(has_label, pa.bool_()),
            "label_tie": pa.array(ties.tolist(), pa.bool_()),
        }
    )
    con.register("staged", staged)
    con.register("diagnosis_map", diagnosis_map())
    checks = con.execute(load_sql("ingest/raw_ingest_checks"), {"has_labels": labels is not None}).arrow().read_all()
    excluded = {r["row_index"] for r in checks.to_pylist() if r["action"] == "excluded"}
    for row in checks.to_pylist():
        column = {
            "image_id": id_col,
            "diagnosis": diag_col or "diagnosis",
            "age": find_column(meta, "age") or "age",
        }.get(row["column_name"], row["column_name"])
        report_rows.append(
            report_row(
                msource, row["row_index"] + 1, row["image_id"], column, row["reason"], row["value"], row["action"]
            )
        )
    for i, path in sorted(outside.items()):
        if i in excluded:
            continue
        excluded.add(i)
        try:
            leads = os.path.realpath(path)
        except (OSError, ValueError) as err:
            leads = f"unusable path ({err})"
        report_rows.append(
            report_row(
                msource, i + 1, ids[i], path_col or id_col, "outside_input_folder", f"{path} -> {leads}", "excluded"
            )
        )
    for i, members in sorted(ambiguous.items()):
        if i not in excluded:
            excluded.add(i)
            report_rows.append(
                report_row(
                    msource,
                    i + 1,
                    ids[i],
                    id_col,
                    "ambiguous_image",
                    f"{len(members)} members of {image_zip} are named {ids[i]}.jpg: {', '.join(members)}",
                    "excluded",
                )
            )
    if check_files:
        referenced = {p for i, p in enumerate(located) if p is not None and i not in ambiguous}
        if in_zip is not None:  # the members of an ambiguous row are reported by it
            root = str(image_zip.resolve()) if image_zip is not None else ""
            referenced |= {f"{root}!{m}" for members in ambiguous.values() for m in members}
        for i in range(n):
            path = paths[i]
            if i in excluded or path is None:
                continue
            if not (path in in_zip if in_zip is not None else os.path.isfile(path)):
                excluded.add(i)
                report_rows.append(report_row(msource, i + 1, ids[i], id_col, "missing_image", paths[i], "excluded"))
        if in_zip is not None:  # a zip's other .jpg members (a decoy beside the official one) are reported too
            for member in sorted(in_zip - referenced):
                name = member.rsplit("!", 1)[-1]
                if name.lower().endswith(".jpg"):
                    stem = name.rsplit("/", 1)[-1][:-4]
                    report_rows.append(
                        report_row(str(image_zip), None, stem, None, "image_without_metadata", member, "ignored")
                    )
        if image_dir is not None and image_dir.is_dir() and path_col is None:
            folder = image_dir.resolve()
            for entry in sorted(image_dir.iterdir()):  # by name, as the metadata locates them (links not followed)
                if entry.suffix.lower() == ".jpg" and str(folder / entry.name) not in referenced:
                    report_rows.append(
                        report_row(
                            str(image_dir), None, entry.stem, None, "image_without_metadata", str(entry), "ignored"
                        )
                    )
    # The ISIC Archive's schema on its own fields: invalid values reported, the image kept (isic_metadata.py);
    # a value already reported by the rules above (e.g. age_not_numeric) is not reported twice.
    problems, fitzpatrick = validate_rows({name: meta.column(name).to_pylist() for name in meta.column_names})
    reported = {(r["row_number"], r["column_name"]) for r in report_rows if r["source"] == msource}
    for i, column, reason, value in problems:
        if i not in excluded and (i + 1, column) not in reported:
            report_rows.append(report_row(msource, i + 1, ids[i], column, reason, value, "kept"))
    con.register("excluded", pa.table({"row_index": pa.array(sorted(excluded), pa.int64())}))
    table = (
        con.execute(
            load_sql("ingest/images_raw"),
            {
                "profiles": list(PROFILES),
                "use_source": coverage > 0.5,
                "default_source": source,
            },
        )
        .arrow()
        .read_all()
    )
    rows = table.column("row_index").to_pylist()
    table = table.append_column("fitzpatrick_skin_type", pa.array([fitzpatrick[i] for i in rows], pa.string()))
    images_table = table.select(IMAGES_SCHEMA.names).cast(IMAGES_SCHEMA)

    file_rows = []
    for role, input_path in files:
        expected = OFFICIAL_SHA256.get(input_path.name)
        digest = file_sha256(input_path) if checksums else None
        ok = None if expected is None or digest is None else digest == expected
        file_rows.append(
            dict(
                role=role,
                path=str(input_path),
                bytes=input_path.stat().st_size,
                sha256=digest,
                expected_sha256=expected,
                checksum_ok=ok,
            )
        )
        if ok is False:
            if strict_checksums:
                raise RecordError(
                    str(input_path),
                    None,
                    "SHA-256 differs from the published checksum",
                    f"expected {expected}, got {digest}",
                )
            report_rows.append(
                report_row(
                    str(input_path),
                    None,
                    None,
                    None,
                    "checksum_mismatch",
                    f"expected {expected}, got {digest}",
                    "recorded",
                )
            )
    return Ingested(
        images=images_table,
        report=pa.Table.from_pylist(report_rows, schema=REPORT_SCHEMA),
        input_files=pa.Table.from_pylist(file_rows, schema=INPUT_FILES_SCHEMA),
    )


def ingest_isic2019(input_dir: str | Path, **options) -> Ingested:
    """Ingest a folder holding the official ISIC 2019 training files (images as folder or zip)."""
    input_dir = Path(input_dir)
    metadata = input_dir / METADATA_FILE
    labels = input_dir / LABELS_FILE
    if not metadata.is_file():
        raise RecordError(str(input_dir), None, f"no {METADATA_FILE} in this folder")
    if not labels.is_file():
        raise RecordError(str(input_dir), None, f"no {LABELS_FILE} in this folder")
    folder, archive = input_dir / IMAGE_FOLDER, input_dir / IMAGE_ZIP
    images = folder if folder.is_dir() else archive if archive.is_file() else folder
    if options.get("source") is None and (input_dir / SYNTH_MANIFEST).is_file():
        options["source"] = "synthetic"
    return ingest(metadata, labels, images, **options)


def report_row(source, row_number, image_id, column_name, reason, value, action) -> dict:
    """One ingest-report row (REPORT_SCHEMA's columns, in its order): every check that reports a file,
    a row or an image builds it here, so a new check cannot leave a column out."""
    return dict(
        source=source,
        row_number=row_number,
        image_id=image_id,
        column_name=column_name,
        reason=reason,
        value=value,
        action=action,
    )


def excluded_images(report: pa.Table) -> dict[str, str]:
    """image id -> why ingest left it out of `images` (the ingest_report's excluded rows: an unreadable
    or 0-byte image, a missing file, ...), so that a later file naming it says so instead of calling
    the id unknown. The first reason per image."""
    found: dict[str, str] = {}
    for row in report.select(["image_id", "reason", "action", "value"]).to_pylist():
        if row["action"] == "excluded" and row["image_id"] is not None:
            detail = f": {row['value']}" if row["value"] else ""
            found.setdefault(row["image_id"], f"{row['reason']}{detail}"[:300])
    return found


def report_table(rows: list[dict]) -> pa.Table:
    """Report rows (dicts with REPORT_SCHEMA keys) as a table."""
    return pa.Table.from_pylist(rows, schema=REPORT_SCHEMA)
