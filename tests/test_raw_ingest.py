"""Ingestion of the official ISIC 2019 files and ISIC-Archive-style CSVs into `images`."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from PIL import Image

from autheval.errors import RecordError
from autheval.raw.ingest import (
    IMAGE_FOLDER,
    IMAGES_SCHEMA,
    LABELS_FILE,
    METADATA_FILE,
    OFFICIAL_SHA256,
    age_bin,
    ingest,
    ingest_isic2019,
    profile_for_signature,
    prompt_text,
    proxy_age,
    proxy_category,
)

META_HEADER = "image,age_approx,anatom_site_general,lesion_id,sex"
GT_HEADER = "image,MEL,NV,BCC,AK,BKL,DF,VASC,SCC,UNK"
ONE_HOT = {c: i for i, c in enumerate(["MEL", "NV", "BCC", "AK", "BKL", "DF", "VASC", "SCC", "UNK"])}


def gt_line(image: str, code: str | None) -> str:
    cells = ["0.0"] * 9
    if code:
        cells[ONE_HOT[code]] = "1.0"
    return ",".join([image] + cells)


def write_cohort(root: Path, meta_rows: list[str], gt_rows: list[str], images: list[str]) -> Path:
    """A folder in the official layout, rows written exactly as in the official files."""
    (root / IMAGE_FOLDER).mkdir(parents=True, exist_ok=True)
    (root / METADATA_FILE).write_text("\n".join([META_HEADER, *meta_rows]) + "\n")
    (root / LABELS_FILE).write_text("\n".join([GT_HEADER, *gt_rows]) + "\n")
    for i, name in enumerate(images):
        Image.new("RGB", (64, 48), (120 + i, 80, 60)).save(root / IMAGE_FOLDER / f"{name}.jpg", "JPEG")
    return root


REAL_ROWS = [
    "ISIC_0000000,55.0,anterior torso,,female",
    "ISIC_0000001,30.0,anterior torso,,female",
    "ISIC_0000002,60.0,upper extremity,,female",
    "ISIC_0012127_downsampled,,,MSK4_0011472,",
    "ISIC_0024306,45.0,posterior torso,HAM_0000550,male",
    "ISIC_0053812,70.0,lower extremity,BCN_0000019,male",
]
REAL_GT = [
    gt_line("ISIC_0000000", "NV"),
    gt_line("ISIC_0000001", "NV"),
    gt_line("ISIC_0000002", "MEL"),
    gt_line("ISIC_0012127_downsampled", "BCC"),
    gt_line("ISIC_0024306", "BKL"),
    gt_line("ISIC_0053812", "SCC"),
]
REAL_IDS = [r.split(",")[0] for r in REAL_ROWS]


@pytest.fixture(scope="module")
def synthetic_small(tmp_path_factory) -> Path:
    from autheval.raw.synth import synth_cohort

    return synth_cohort(60, tmp_path_factory.mktemp("synth"), seed=7, size=(256, 192)).root


@pytest.fixture
def real_format(tmp_path) -> Path:
    return write_cohort(tmp_path / "isic", REAL_ROWS, REAL_GT, REAL_IDS)


def test_official_layout_ingests_per_spec(real_format):
    result = ingest_isic2019(real_format)
    images = {r["image_id"]: r for r in result.images.to_pylist()}
    assert result.images.schema.equals(IMAGES_SCHEMA)
    assert list(images) == REAL_IDS  # raw metadata order
    assert result.report.num_rows == 2 and set(result.report["reason"].to_pylist()) == {"checksum_mismatch"}
    a, b, m = images["ISIC_0000000"], images["ISIC_0000001"], images["ISIC_0012127_downsampled"]
    assert (a["age"], a["age_bin"], a["site_profile"], a["site_id"]) == (55.0, "50-70", "RURAL_like", "SYN_RURAL_like")
    assert (b["age_bin"], b["site_profile"]) == ("<30", "BCN_like")  # right-closed: 30 -> "<30"
    assert (m["age"], m["age_bin"], m["profile_signature"], m["site_profile"]) == (
        None,
        "nan",
        "nan|__missing_site__",
        "BCN_like",
    )
    assert m["lesion_id"] == "MSK4_0011472" and m["sex"] is None and m["sex_norm"] == "__missing__"
    assert [images[i]["risk_stratum"] for i in REAL_IDS] == ["very_low", "very_low", "high", "moderate", "low", "high"]
    assert [images[i]["ideal_action_level"] for i in REAL_IDS] == [0, 0, 3, 2, 1, 3]
    assert {r["source"] for r in images.values()} == {"isic2019"}
    assert a["path"].endswith(f"{IMAGE_FOLDER}/ISIC_0000000.jpg") and Path(a["path"]).is_file()
    files = {r["role"]: r for r in result.input_files.to_pylist()}
    assert files["metadata"]["expected_sha256"] == OFFICIAL_SHA256[METADATA_FILE]
    assert files["metadata"]["checksum_ok"] is False and len(files["labels"]["sha256"]) == 64


def test_strict_checksums_make_a_mismatch_an_error(real_format):
    with pytest.raises(RecordError, match="published checksum"):
        ingest_isic2019(real_format, strict_checksums=True)


APPENDIX_A3 = {
    "<30": "BCN MSK RURAL BCN MSK MSK MSK HAM RURAL",
    "30-50": "RURAL MSK MSK BCN HAM RURAL HAM MSK RURAL",
    "50-70": "RURAL RURAL HAM HAM MSK RURAL MSK BCN RURAL",
    "70+": "RURAL RURAL RURAL MSK RURAL BCN HAM MSK RURAL",
    "nan": "HAM RURAL RURAL HAM HAM HAM RURAL BCN BCN",
}
A3_SITES = [
    "anterior torso",
    "head/neck",
    "lateral torso",
    "lower extremity",
    "oral/genital",
    "palms/soles",
    "posterior torso",
    "upper extremity",
    "__missing_site__",
]


def test_appendix_a3_profiles():
    for band, row in APPENDIX_A3.items():
        for site, short in zip(A3_SITES, row.split()):
            assert profile_for_signature(f"{band}|{site}") == f"{short}_like", (band, site)
    assert profile_for_signature("__missing_age__|__missing_site__") == "HAM_like"
    assert profile_for_signature("image|ISIC_0014818_downsampled") == "RURAL_like"


def test_appendix_a3_through_the_sql_path(tmp_path):
    ages = {"<30": "25.0", "30-50": "50.0", "50-70": "70.0", "70+": "85.0", "nan": ""}
    rows, gt, ids = [], [], []
    for band, row in APPENDIX_A3.items():
        for site, short in zip(A3_SITES, row.split()):
            image = f"ISIC_{len(ids):07d}"
            rows.append(f"{image},{ages[band]},{'' if site == '__missing_site__' else site},,male")
            gt.append(gt_line(image, "NV"))
            ids.append((image, f"{short}_like"))
    result = ingest_isic2019(write_cohort(tmp_path / "a3", rows, gt, [i for i, _ in ids]))
    got = dict(zip(result.images["image_id"].to_pylist(), result.images["site_profile"].to_pylist()))
    assert got == dict(ids)


def test_age_bins_and_the_three_normalisations():
    assert [age_bin(a) for a in (None, 0, 0.5, 30, 30.5, 50, 70, 70.1, 200, 201, float("nan"))] == [
        "nan",
        "nan",
        "<30",
        "<30",
        "30-50",
        "30-50",
        "50-70",
        "70+",
        "70+",
        "nan",
        "nan",
    ]
    assert [proxy_category(v) for v in (" Anterior Torso ", None, "", "NaN", "none", "male")] == [
        "anterior torso",
        "__missing__",
        "__missing__",
        "__missing__",
        "__missing__",
        "male",
    ]
    assert [prompt_text(v) for v in (55.0, None, float("nan"), "female")] == ["55.0", "nan", "nan", "female"]
    z, missing = proxy_age([40.0, 60.0, None, 80.0], [True, True, True, False])
    assert list(missing) == [0.0, 0.0, 1.0, 0.0]
    assert list(z) == [-1.0, 1.0, 0.0, 3.0]  # train mean 50, population SD 10


def test_problem_rows_are_reported_never_dropped_silently(tmp_path):
    rows = REAL_ROWS[:3] + [
        "ISIC_0000001,40.0,head/neck,,male",  # duplicated id in the metadata
        "ISIC_9000000,fifty,head/neck,,male",  # age not numeric: kept, age missing
        "ISIC_9000001,50.0,head/neck,,male",  # no label row
        "ISIC_9000002,50.0,head/neck,,male",  # only UNK set: unknown diagnosis
        "ISIC_9000003,50.0,head/neck,,male",  # image file missing
        "ISIC_9000004,50.0,head/neck,,male",  # two labels set: first wins, reported
    ]
    gt = REAL_GT[:3] + [
        gt_line("ISIC_9000000", "NV"),
        gt_line("ISIC_9000002", "UNK"),
        gt_line("ISIC_9000003", "NV"),
        "ISIC_9000004,1.0,1.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0",
        gt_line("ISIC_7777777", "NV"),
    ]
    files = REAL_IDS[:3] + ["ISIC_9000000", "ISIC_9000001", "ISIC_9000002", "ISIC_9000004", "ISIC_5555555"]
    result = ingest_isic2019(write_cohort(tmp_path / "bad", rows, gt, files), checksums=False)
    report = {(r["image_id"], r["reason"]): r for r in result.report.to_pylist()}
    assert set(report) == {
        ("ISIC_0000001", "duplicate_image_id"),
        ("ISIC_9000000", "age_not_numeric"),
        ("ISIC_9000001", "missing_label"),
        ("ISIC_9000002", "unknown_diagnosis"),
        ("ISIC_9000003", "missing_image"),
        ("ISIC_9000004", "ambiguous_label"),
        ("ISIC_7777777", "label_without_metadata"),
        ("ISIC_5555555", "image_without_metadata"),
    }
    assert report[("ISIC_0000001", "duplicate_image_id")]["row_number"] == 4
    assert report[("ISIC_0000001", "duplicate_image_id")]["value"] == "first seen at data row 2"
    assert report[("ISIC_9000000", "age_not_numeric")]["action"] == "kept"
    assert report[("ISIC_9000003", "missing_image")]["action"] == "excluded"
    images = {r["image_id"]: r for r in result.images.to_pylist()}
    assert sorted(images) == ["ISIC_0000000", "ISIC_0000001", "ISIC_0000002", "ISIC_9000000", "ISIC_9000004"]
    assert images["ISIC_0000001"]["age"] == 30.0  # the first occurrence is kept
    assert images["ISIC_9000000"]["age"] is None and images["ISIC_9000000"]["age_bin"] == "nan"
    assert images["ISIC_9000004"]["diagnosis"] == "MEL"
    excluded = {r["image_id"] for r in result.report.to_pylist() if r["action"] == "excluded"}
    assert excluded.isdisjoint({i for i in images if i != "ISIC_0000001"})


@pytest.mark.parametrize(
    "gt_rows,column,rule",
    [
        ([gt_line("ISIC_0000000", "NV"), gt_line("ISIC_0000000", "MEL")], "image", "must be unique in the labels file"),
        (["ISIC_0000000,0.0,yes,0.0,0.0,0.0,0.0,0.0,0.0,0.0"], "NV", "must be a finite number"),
    ],
)
def test_broken_labels_file_is_one_clear_error(tmp_path, gt_rows, column, rule):
    root = write_cohort(tmp_path / "x", REAL_ROWS[:1], gt_rows, REAL_IDS[:1])
    with pytest.raises(RecordError) as err:
        ingest_isic2019(root)
    text = str(err.value)
    assert f"column '{column}'" in text and rule in text and "\n" not in text and LABELS_FILE in text
    assert err.value.exit_code == 2


def test_broken_metadata_is_one_clear_error(tmp_path):
    root = write_cohort(tmp_path / "x", REAL_ROWS[:1], REAL_GT[:1], REAL_IDS[:1])
    (root / METADATA_FILE).write_text("picture,age_approx\nISIC_0000000,55.0\n")
    with pytest.raises(RecordError, match="required image id column is missing"):
        ingest_isic2019(root)
    (root / METADATA_FILE).write_text("")
    with pytest.raises(RecordError, match="file is empty"):
        ingest_isic2019(root)
    (root / LABELS_FILE).unlink()
    with pytest.raises(RecordError, match=f"no {LABELS_FILE}"):
        ingest_isic2019(root)


def test_metadata_without_any_diagnosis_is_an_error(tmp_path):
    csv = tmp_path / "meta.csv"
    csv.write_text("isic_id,age\nISIC_1,40\n")
    with pytest.raises(RecordError, match="no diagnosis column"):
        ingest(csv, images=tmp_path)


def test_official_zip_is_read_in_place(real_format, tmp_path):
    archive = real_format / "ISIC_2019_Training_Input.zip"
    with zipfile.ZipFile(archive, "w") as handle:
        for name in REAL_IDS:
            handle.write(real_format / IMAGE_FOLDER / f"{name}.jpg", f"{IMAGE_FOLDER}/{name}.jpg")
    for f in (real_format / IMAGE_FOLDER).iterdir():
        f.unlink()
    (real_format / IMAGE_FOLDER).rmdir()
    result = ingest_isic2019(real_format, checksums=False)
    assert result.images.num_rows == len(REAL_IDS)
    assert result.images["path"][0].as_py() == f"{archive.resolve()}!{IMAGE_FOLDER}/ISIC_0000000.jpg"
    assert [r["role"] for r in result.input_files.to_pylist()] == ["metadata", "labels", "images_zip"]


def test_archive_style_csv_with_names_patients_and_sources(tmp_path):
    (tmp_path / "img").mkdir()
    csv = tmp_path / "archive.csv"
    csv.write_text(
        "isic_id,Patient_ID,lesion_id,Diagnosis,age_approx,sex,anatom_site_general,attribution\n"
        "ISIC_A,IP_1,IL_1,melanoma,55,male,head/neck,Hospital Clinic de Barcelona\n"
        "ISIC_B,IP_1,IL_2,nevus,55,male,head/neck,ViDIR Group Vienna\n"
        "ISIC_C,,IL_3,Seborrheic keratosis,40,female,,Memorial Sloan Kettering\n"
        "ISIC_D,IP_2,,angioma,40,female,,somewhere else\n"
    )
    for name in "ABCD":
        Image.new("RGB", (32, 32)).save(tmp_path / "img" / f"ISIC_{name}.jpg", "JPEG")
    result = ingest(csv, images=tmp_path / "img")
    rows = {r["image_id"]: r for r in result.images.to_pylist()}
    assert [rows[i]["diagnosis"] for i in ("ISIC_A", "ISIC_B", "ISIC_C")] == ["MEL", "NV", "BKL"]
    assert [rows[i]["site_profile"] for i in ("ISIC_A", "ISIC_B", "ISIC_C")] == ["BCN_like", "HAM_like", "MSK_like"]
    assert rows["ISIC_A"]["site_id"] == "SRC_BCN_like" and rows["ISIC_A"]["patient_id"] == "IP_1"
    assert rows["ISIC_A"]["source"] == "Hospital Clinic de Barcelona"
    assert [(r["image_id"], r["reason"], r["value"]) for r in result.report.to_pylist()] == [
        ("ISIC_D", "unknown_diagnosis", "angioma")
    ]


def test_synthetic_cohort_has_the_official_formats_and_schema(synthetic_small, real_format):
    meta = (synthetic_small / METADATA_FILE).read_text().splitlines()
    gt = (synthetic_small / LABELS_FILE).read_text().splitlines()
    assert meta[0] == META_HEADER and gt[0] == GT_HEADER
    assert len(meta) == len(gt) == 61
    for line in gt[1:]:
        cells = line.split(",")[1:]
        assert sorted(cells) == ["0.0"] * 8 + ["1.0"] and cells[-1] == "0.0"
    for line in meta[1:]:
        image, age, site, lesion, sex = line.split(",")
        assert age == "" or age.endswith(".0")
        assert sex in ("", "male", "female")
        assert (synthetic_small / IMAGE_FOLDER / f"{image}.jpg").is_file()
    synthetic = ingest_isic2019(synthetic_small)
    real = ingest_isic2019(real_format)
    assert synthetic.images.schema.equals(real.images.schema)
    assert synthetic.report.schema.equals(real.report.schema)
    assert synthetic.images.num_rows == 60
    assert set(synthetic.images["source"].to_pylist()) == {"synthetic"}
    assert set(synthetic.report["reason"].to_pylist()) == {"checksum_mismatch"}


# ------------------------------------------------------------------------------------------------
# Ids with surrounding whitespace: refused, never counted apart


@pytest.mark.parametrize(
    "meta_row, gt_row, file, column",
    [
        ("ISIC_0000000 ,55.0,anterior torso,,female", None, METADATA_FILE, "image"),
        ("ISIC_0000000,55.0,anterior torso,HAM_0000550 ,female", None, METADATA_FILE, "lesion_id"),
        (None, gt_line("\tISIC_0000000", "NV"), LABELS_FILE, "image"),
        ("ISIC_0000000\u00a0,55.0,anterior torso,,female", None, METADATA_FILE, "image"),
    ],
    ids=["metadata image id", "lesion id", "labels image id", "no-break space"],
)
def test_ids_with_surrounding_whitespace_are_refused(tmp_path, meta_row, gt_row, file, column):
    rows = [meta_row or REAL_ROWS[0], *REAL_ROWS[1:3]]
    gt = [gt_row or REAL_GT[0], *REAL_GT[1:3]]
    root = write_cohort(tmp_path / "ws", rows, gt, REAL_IDS[:3])
    with pytest.raises(RecordError) as err:
        ingest_isic2019(root, checksums=False)
    text = str(err.value)
    assert file in text and f"column '{column}'" in text and "must not begin or end with whitespace" in text
    assert "data row 1" in text and "\n" not in text


def test_patient_ids_with_surrounding_whitespace_are_refused(tmp_path):
    (tmp_path / "img").mkdir()
    csv = tmp_path / "archive.csv"
    csv.write_text("isic_id,patient_id,diagnosis\nISIC_A,IP_1,melanoma\nISIC_B, IP_1,nevus\n")
    with pytest.raises(
        RecordError,
        match=r"column 'patient_id': must not begin or end with whitespace \(it would be "
        r"another patient.*data row 2, value ' IP_1'",
    ):
        ingest(csv, images=tmp_path / "img", checksums=False)


# ------------------------------------------------------------------------------------------------
# Images only from inside the input folder


def _report(result) -> dict:
    return {(r["image_id"], r["reason"]): r for r in result.report.to_pylist()}


def test_links_leaving_the_folder_and_dot_dot_ids_are_never_read(tmp_path):
    """A link to /etc/shadow, a link to a JPEG outside the folder and an id `../outside` are excluded
    and reported (outside_input_folder, with where they lead), never hashed or shown to a model; a link
    inside the folder is followed and `path` is the file read."""
    import os

    rows = REAL_ROWS[:3] + [
        "ISIC_LINK_ETC,50.0,head/neck,,male",
        "ISIC_LINK_JPEG,50.0,head/neck,,male",
        "../outside,50.0,head/neck,,male",
        "ISIC_LINK_IN,50.0,head/neck,,male",
    ]
    gt = REAL_GT[:3] + [gt_line(i, "NV") for i in ("ISIC_LINK_ETC", "ISIC_LINK_JPEG", "../outside", "ISIC_LINK_IN")]
    root = write_cohort(tmp_path / "cohort", rows, gt, REAL_IDS[:3])
    folder = root / IMAGE_FOLDER
    Image.new("RGB", (64, 48), (1, 2, 3)).save(root / "outside.jpg", "JPEG")  # beside the folder, not in it
    elsewhere = tmp_path / "elsewhere.jpg"
    Image.new("RGB", (64, 48), (9, 9, 9)).save(elsewhere, "JPEG")
    os.symlink("/etc/shadow", folder / "ISIC_LINK_ETC.jpg")
    os.symlink(elsewhere, folder / "ISIC_LINK_JPEG.jpg")
    os.symlink(folder / "ISIC_0000000.jpg", folder / "ISIC_LINK_IN.jpg")
    result = ingest_isic2019(root, checksums=False)
    images = {r["image_id"]: r for r in result.images.to_pylist()}
    assert sorted(images) == sorted([*REAL_IDS[:3], "ISIC_LINK_IN"])
    assert images["ISIC_LINK_IN"]["path"] == str((folder / "ISIC_0000000.jpg").resolve())
    report = _report(result)
    for image_id, leads in (
        ("ISIC_LINK_ETC", "/etc/shadow"),
        ("ISIC_LINK_JPEG", str(elsewhere.resolve())),
        ("../outside", str((root / "outside.jpg").resolve())),
    ):
        row = report[(image_id, "outside_input_folder")]
        assert row["action"] == "excluded" and row["value"].endswith(f" -> {leads}") and row["column_name"] == "image"
    assert not any(reason == "image_without_metadata" for _, reason in report)  # every link is accounted for


def test_an_unreferenced_link_is_reported_as_ignored_and_is_not_read(tmp_path):
    import os

    root = write_cohort(tmp_path / "cohort", REAL_ROWS[:2], REAL_GT[:2], REAL_IDS[:2])
    os.symlink("/etc/shadow", root / IMAGE_FOLDER / "ISIC_9999999.jpg")
    result = ingest_isic2019(root, checksums=False)
    assert result.images.num_rows == 2
    row = _report(result)[("ISIC_9999999", "image_without_metadata")]
    assert row["action"] == "ignored" and row["value"].endswith("ISIC_9999999.jpg")


def test_the_image_folder_may_itself_be_a_link(tmp_path):
    import os

    root = write_cohort(tmp_path / "cohort", REAL_ROWS[:2], REAL_GT[:2], REAL_IDS[:2])
    real = tmp_path / "real_images"
    (root / IMAGE_FOLDER).rename(real)
    os.symlink(real, root / IMAGE_FOLDER)
    result = ingest_isic2019(root, checksums=False)
    assert result.images.num_rows == 2 and result.report.num_rows == 0
    assert result.images["path"][0].as_py() == str(real.resolve() / "ISIC_0000000.jpg")


def test_metadata_paths_must_stay_inside_the_input_folder(tmp_path):
    (tmp_path / "cohort" / "img").mkdir(parents=True)
    for name in ("a", "b"):
        Image.new("RGB", (32, 32)).save(tmp_path / "cohort" / "img" / f"{name}.jpg", "JPEG")
    Image.new("RGB", (32, 32)).save(tmp_path / "secret.jpg", "JPEG")
    csv = tmp_path / "cohort" / "meta.csv"
    csv.write_text(
        "isic_id,image_path,diagnosis\nISIC_A,img/a.jpg,melanoma\nISIC_B,../secret.jpg,nevus\n"
        f"ISIC_C,{tmp_path / 'secret.jpg'},nevus\nISIC_D,{tmp_path / 'cohort' / 'img' / 'b.jpg'},nevus\n"
    )
    result = ingest(csv, checksums=False)
    assert result.images["image_id"].to_pylist() == ["ISIC_A", "ISIC_D"]
    report = _report(result)
    assert set(report) == {("ISIC_B", "outside_input_folder"), ("ISIC_C", "outside_input_folder")}
    assert report[("ISIC_B", "outside_input_folder")]["column_name"] == "image_path"
