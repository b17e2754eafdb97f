"""ISIC-Archive-style metadata checked on ingestion with the Archive's own schema (isic-metadata):
invalid values reported with the field and the value (image kept), Fitzpatrick types read where a
source records them, and the fitzpatrick_skin_type grouping in subgroups and fairness."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
from PIL import Image

from autheval.estimation.subgroups import subgroup_tables
from autheval.raw.ingest import ingest
from autheval.raw.isic_metadata import fitzpatrick_type, isic_columns, validate_rows


def _archive_cohort(root: Path, rows: list[dict]) -> Path:
    """An ISIC-Archive-style metadata CSV (isic_id, diagnosis as a column) with one JPEG per row."""
    root.mkdir(parents=True)
    columns = list(rows[0])
    lines = [",".join(columns)] + [",".join(r[c] for c in columns) for r in rows]
    (root / "metadata.csv").write_text("\n".join(lines) + "\n")
    for r in rows:
        Image.new("RGB", (64, 48), (200, 150, 120)).save(root / f"{r['isic_id']}.jpg", "JPEG")
    return root / "metadata.csv"


def _row(i: int, **values) -> dict:
    row = {
        "isic_id": f"ISIC_{i:07d}",
        "diagnosis": "nevus",
        "age_approx": "55",
        "sex": "female",
        "anatom_site_general": "anterior torso",
        "fitzpatrick_skin_type": "II",
        "image_type": "dermoscopic",
        "dermoscopic_type": "contact polarized",
        "anatom_site_special": "",
    }
    row.update(values)
    return row


def test_invalid_values_are_reported_with_field_and_value_and_the_image_is_kept(tmp_path):
    rows = [
        _row(0),  # valid
        _row(1, age_approx="85+"),  # the Archive's 85+: valid, read as 85
        _row(2, sex="unknown"),  # not male/female
        _row(3, fitzpatrick_skin_type="VII"),  # no such type
        _row(4, anatom_site_general="torso"),  # not a general site
        _row(5, age_approx="-5"),  # below 0
        _row(6, image_type="clinical: overview"),  # a dermoscopic type on a clinical image
        _row(7, anatom_site_special="toenail", anatom_site_general="head/neck"),  # site does not fit
    ]
    result = ingest(_archive_cohort(tmp_path / "a", rows))
    report = {(r["image_id"], r["column_name"], r["reason"]): r for r in result.report.to_pylist()}
    assert {(k[0][-1], k[1], k[2], r["value"].split(" (")[0], r["action"]) for k, r in report.items()} == {
        ("2", "sex", "invalid_isic_metadata", "unknown", "kept"),
        ("3", "fitzpatrick_skin_type", "invalid_isic_metadata", "VII", "kept"),
        ("4", "anatom_site_general", "invalid_isic_metadata", "torso", "kept"),
        ("5", "age_approx", "invalid_isic_metadata", "-5", "kept"),
        ("6", "dermoscopic_type", "inconsistent_isic_metadata", "contact polarized", "kept"),
        ("7", "anatom_site_special", "inconsistent_isic_metadata", "toenail", "kept"),
    }
    assert report[("ISIC_0000006", "dermoscopic_type", "inconsistent_isic_metadata")]["row_number"] == 7
    assert "image_type" in report[("ISIC_0000006", "dermoscopic_type", "inconsistent_isic_metadata")]["value"]
    images = {r["image_id"]: r for r in result.images.to_pylist()}
    assert len(images) == len(rows)  # every image kept
    assert images["ISIC_0000001"]["age"] == 85.0 and images["ISIC_0000001"]["age_bin"] == "70+"
    assert images["ISIC_0000003"]["fitzpatrick_skin_type"] is None  # an invalid type is never a group
    assert images["ISIC_0000000"]["fitzpatrick_skin_type"] == "II"
    assert images["ISIC_0000002"]["sex"] == "unknown"  # the study's own columns keep ingestion's rules


def test_fields_the_source_lacks_are_absent_and_non_archive_columns_unchecked():
    assert isic_columns(["image", "age_approx", "Sex", "localization", "lesion_id", "dx"]) == {
        "age_approx": "age",
        "Sex": "sex",
    }
    assert isic_columns(["age_approx", "age"]) == {"age": "age"}  # the field's own name first, as ingestion
    problems, types = validate_rows({"image": ["a", "b"], "localization": ["back", "nowhere"], "age": ["40", "50"]})
    assert problems == [] and types == [None, None]
    assert [fitzpatrick_type(v) for v in ("IV", " VI ", "iv", "7", None)] == ["IV", "VI", None, None, None]


def test_hierarchical_sites_are_checked_joined():
    problems, _ = validate_rows({"anatom_site_1": ["Trunk", "Trunk"], "anatom_site_2": ["Anterior trunk", "Arm"]})
    assert problems == [(1, "anatom_site_1,anatom_site_2", "invalid_isic_metadata", "Trunk:Arm")]


def test_the_official_isic_2019_columns_pass_the_archive_schema():
    problems, types = validate_rows(
        {
            "image": ["ISIC_0000000", "ISIC_0000001"],
            "age_approx": ["55.0", ""],
            "anatom_site_general": ["anterior torso", "palms/soles"],
            "lesion_id": ["", "BCN_1"],
            "sex": ["female", "male"],
        }
    )
    assert problems == [] and types == [None, None]


def _records(n_clusters: int = 120):
    """Records where accuracy differs by Fitzpatrick type (the skin tone estimate alternating)."""
    rng = np.random.default_rng(4)
    types, tones = ("I", "II", "III", "IV"), ("light", "tan", "brown")
    images, records, contexts = [], [], []
    for c in range(n_clusters):
        cluster, image = f"c{c:03d}", f"img{c:03d}"
        level, fitz = int(rng.integers(0, 4)), types[c % 4]
        contexts.append({"cluster_id": cluster, "profile": "HAM_like"})
        images.append(
            {
                "image_id": image,
                "sex": "male",
                "age": 40.0,
                "anatomic_site": "torso",
                "source": "s",
                "fitzpatrick_skin_type": fitz,
                "ita_category": tones[c % 3],
                "ideal_action_level": level,
            }
        )
        right = rng.random() < (0.9 if fitz in ("I", "II") else 0.5)
        head = level if right else (level + 1) % 4
        records.append(
            {
                "analysis": "m x capacity",
                "case_id": image,
                "cluster_id": cluster,
                "proposed_action": f"a{head}",
                "executed_action": f"a{head}",
                "utility_executed_local": -abs(head - level) * 1.0,
                "utility_proposed_local": -abs(head - level) * 1.0,
                "utility_proposed_global": -abs(head - level) * 1.0,
            }
        )
    return pa.Table.from_pylist(records), pa.Table.from_pylist(images), pa.Table.from_pylist(contexts)


def test_fitzpatrick_type_and_ita_category_are_groupings_in_subgroups_and_fairness():
    records, images, contexts = _records()
    out = subgroup_tables(
        records,
        images,
        contexts,
        groupings=("fitzpatrick_skin_type", "ita_category"),
        min_clusters=20,
        min_images=20,
        reps=100,
    )
    groups = {(g["grouping"], g["group_value"]): g for g in out.groups.to_pylist()}
    assert {v for g, v in groups if g == "fitzpatrick_skin_type"} == {"I", "II", "III", "IV"}
    assert {v for g, v in groups if g == "ita_category"} == {"light", "tan", "brown"}
    level = {r["image_id"]: r["ideal_action_level"] for r in images.to_pylist()}
    fitz = {r["image_id"]: r["fitzpatrick_skin_type"] for r in images.to_pylist()}
    accuracy = {}
    for value in ("I", "II", "III", "IV"):
        hits = [
            int(r["proposed_action"][1:]) == level[r["case_id"]]
            for r in records.to_pylist()
            if fitz[r["case_id"]] == value
        ]
        accuracy[value] = np.mean(hits)
        assert groups[("fitzpatrick_skin_type", value)]["accuracy_proposal"] == accuracy[value]
    fairness = {r["grouping"]: r for r in out.fairness.to_pylist()}
    row = fairness["fitzpatrick_skin_type"]
    assert row["n_groups"] == 4
    assert row["fairness_proposal"] == min(accuracy.values()) / max(accuracy.values())
    assert row["worst_group_proposal"] == min(accuracy, key=accuracy.get)
    assert "ita_category" in fairness


def test_a_source_without_fitzpatrick_types_has_no_fitzpatrick_grouping(tmp_path):
    rows = [{k: v for k, v in _row(i).items() if k != "fitzpatrick_skin_type"} for i in range(3)]
    result = ingest(_archive_cohort(tmp_path / "b", rows))
    assert result.images.column("fitzpatrick_skin_type").null_count == 3
    assert not [r for r in result.report.to_pylist() if r["column_name"] == "fitzpatrick_skin_type"]
