"""The raw path end to end on a synthetic ISIC-shaped cohort, and the `autheval synth` command."""

from __future__ import annotations

import argparse

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from autheval.raw.duplicates import DuplicateRule
from autheval.raw.pipeline import run_raw_path
from autheval.raw.synth import synth_cohort


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    return synth_cohort(80, tmp_path_factory.mktemp("cohort"), seed=11, size=(320, 240))


@pytest.fixture(scope="module")
def result(cohort):
    return run_raw_path(cohort.root, workers=2, progress=False)


def test_synth_is_deterministic(tmp_path):
    a = synth_cohort(15, tmp_path / "a", seed=5, size=(128, 96))
    b = synth_cohort(15, tmp_path / "b", seed=5, size=(128, 96))
    c = synth_cohort(15, tmp_path / "c", seed=6, size=(128, 96))
    files = sorted(p.name for p in a.images.iterdir())
    assert files == sorted(p.name for p in b.images.iterdir())
    assert all((a.images / f).read_bytes() == (b.images / f).read_bytes() for f in files)
    assert a.metadata.read_bytes() == b.metadata.read_bytes() and a.labels.read_bytes() == b.labels.read_bytes()
    assert a.metadata.read_bytes() != c.metadata.read_bytes()
    with pytest.raises(FileExistsError):
        synth_cohort(15, tmp_path / "a", seed=5, size=(128, 96))


def test_tables_and_counts(result, cohort):
    assert set(result) >= {"images", "image_hashes", "duplicates", "clusters", "ingest_report"}
    assert result["images"].num_rows == 80
    assert result["image_hashes"].num_rows == 160  # autheval + imagehash
    assert result["clusters"].num_rows == 80
    assert set(result["ingest_report"]["reason"].to_pylist()) == {"checksum_mismatch"}
    assert result["hash_failures"].num_rows == 0
    roles = dict(zip(cohort.truth["image"].to_pylist(), cohort.truth["role"].to_pylist()))
    assert sorted(set(roles.values())) == ["exact_duplicate", "lesion_view", "near_duplicate"]


def test_planted_duplicates_are_found_and_clustered(result, cohort):
    clusters = dict(zip(result["clusters"]["image_id"].to_pylist(), result["clusters"]["cluster_id"].to_pylist()))
    splits = dict(zip(result["clusters"]["image_id"].to_pylist(), result["clusters"]["split"].to_pylist()))
    dups = result["duplicates"].to_pylist()
    exact = {r["image_id"]: r["component_id"] for r in dups if r["threshold"] == 0}
    near = {r["image_id"]: r["component_id"] for r in dups if r["threshold"] == 4}
    for row in cohort.truth.to_pylist():
        if row["role"] == "exact_duplicate":
            image, source = row["image"], row["source_image"]
            assert exact[image] == exact[source]
            assert clusters[image] == clusters[source] and splits[image] == splits[source]
        elif row["role"] == "near_duplicate" and 0 < row["autheval_distance"] <= 4:
            assert near[row["image"]] == near[row["source_image"]]
    # multi-image lesions stay together
    lesions = {}
    for image, lesion in zip(result["images"]["image_id"].to_pylist(), result["images"]["lesion_id"].to_pylist()):
        if lesion:
            lesions.setdefault(lesion, set()).add(clusters[image])
    assert all(len(c) == 1 for c in lesions.values())
    exact_rows = [r for r in result["duplicate_report"].to_pylist() if r["threshold"] == 0]
    assert exact_rows and all(r["component_crosses_split"] is False for r in exact_rows)


def test_rerun_reuses_hashes_and_gives_the_same_tables(result, cohort):
    again = run_raw_path(cohort.root, workers=1, previous_hashes=result["image_hashes"], progress=False)
    for name in ("images", "image_hashes", "duplicates", "clusters"):
        assert again[name].equals(result[name]), name


def test_frozen_split_round_trip_and_declared_rules(result, cohort):
    freeze = result["clusters"].select(["image_id", "cluster_id", "split"])
    frozen = run_raw_path(cohort.root, workers=1, freeze=freeze, previous_hashes=result["image_hashes"], progress=False)
    assert frozen["clusters"]["split"].equals(result["clusters"]["split"])
    assert set(frozen["clusters"]["split_source"].to_pylist()) == {"frozen"}

    rules = (DuplicateRule(4, "cluster"), DuplicateRule(2, "drop", "imagehash"))
    ruled = run_raw_path(cohort.root, workers=1, rules=rules, previous_hashes=result["image_hashes"], progress=False)
    removed = set(ruled["duplicate_removals"]["removed_image_id"].to_pylist())
    assert removed and removed.isdisjoint(ruled["clusters"]["image_id"].to_pylist())
    assert ruled["clusters"].num_rows == 80 - len(removed)
    assert ruled["clusters"]["split_key"][0].as_py().endswith("+near_duplicate_component")
    clusters = dict(zip(ruled["clusters"]["image_id"].to_pylist(), ruled["clusters"]["cluster_id"].to_pylist()))
    comps = {}
    for r in ruled["duplicates"].to_pylist():
        if r["threshold"] == 4 and r["image_id"] in clusters:
            comps.setdefault(r["component_id"], set()).add(clusters[r["image_id"]])
    assert comps and all(len(c) == 1 for c in comps.values())  # 'cluster' use: one cluster per component
    assert pc.all(pc.is_in(ruled["duplicates"]["use"], value_set=pa.array(["cluster", "drop"]))).as_py()


def test_synth_command(tmp_path, capsys):
    from autheval.cli.synth import register

    parser = argparse.ArgumentParser(prog="autheval")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["synth", "--n", "12", "--out", str(tmp_path / "c"), "--seed", "3", "--size", "96", "64"])
    assert args.func(args) == 0
    assert "wrote 12 images" in capsys.readouterr().out
    assert len(list((tmp_path / "c" / "ISIC_2019_Training_Input").glob("*.jpg"))) == 12
    assert (tmp_path / "c" / "ISIC_2019_Training_Metadata.csv").is_file()


def test_unreadable_and_misnamed_images_are_reported(tmp_path):
    import io

    from PIL import Image

    cohort = synth_cohort(12, tmp_path / "c", seed=3, size=(96, 64))
    files = sorted(cohort.images.glob("*.jpg"))
    files[0].write_bytes(b"\xff\xd8\xff truncated")
    with Image.open(files[1]) as image:
        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
    files[1].write_bytes(buffer.getvalue())
    result = run_raw_path(cohort.root, workers=1, progress=False, checksums=False)
    report = {(r["image_id"], r["reason"]): r for r in result["ingest_report"].to_pylist()}
    assert set(report) == {(files[0].stem, "unreadable_image"), (files[1].stem, "format_mismatch")}
    assert report[(files[0].stem, "unreadable_image")]["action"] == "excluded"
    assert report[(files[1].stem, "format_mismatch")]["action"] == "kept"
    assert report[(files[1].stem, "format_mismatch")]["value"].startswith("named JPEG, holds PNG")
    assert files[0].stem not in result["images"]["image_id"].to_pylist()
    assert result["images"].num_rows == result["clusters"].num_rows == 11
    formats = dict(zip(result["image_hashes"]["image_id"].to_pylist(), result["image_hashes"]["format"].to_pylist()))
    assert formats[files[1].stem] == "PNG" and formats[files[2].stem] == "JPEG"
    again = run_raw_path(
        cohort.root, workers=1, progress=False, checksums=False, previous_hashes=result["image_hashes"]
    )
    assert again["image_hashes"].equals(result["image_hashes"])  # reused rows keep their format
    assert again["ingest_report"].equals(result["ingest_report"])
