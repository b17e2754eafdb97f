"""Perceptual hashes: AuthEval's vector, the imagehash bit order, declared kinds, incremental reruns."""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from PIL import Image

from autheval.raw.phash import (
    HASH_KINDS,
    autheval_phash,
    hash_bytes,
    hash_images,
    imagehash_phash,
    read_image_bytes,
    to_hex,
)


def a5_image() -> Image.Image:
    """Appendix A.5: RGB 64x48, pixel (row y, col x) = (4x mod 256, 5y mod 256, 2(x+y) mod 256)."""
    y, x = np.mgrid[0:48, 0:64]
    pixels = np.stack([(4 * x) % 256, (5 * y) % 256, (2 * (x + y)) % 256], axis=-1).astype(np.uint8)
    return Image.fromarray(pixels, "RGB")


def test_appendix_a5_vector():
    assert to_hex(autheval_phash(a5_image())) == "46afc86e9aca6255"


def test_a5_through_a_png_file_and_hash_bytes():
    buffer = io.BytesIO()
    a5_image().save(buffer, "PNG")  # lossless, so the file path gives the same hash
    assert to_hex(hash_bytes(buffer.getvalue(), ("autheval",))["autheval"]) == "46afc86e9aca6255"


def test_imagehash_kind_is_imagehash_hex_as_uint64():
    import imagehash

    image = a5_image()
    assert to_hex(imagehash_phash(image)) == str(imagehash.phash(image))
    assert imagehash_phash(image) != autheval_phash(image)  # not the same hash


def _write_jpegs(folder: Path, n: int, seed: int = 3) -> pa.Table:
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    ids, paths = [], []
    for i in range(n):
        base = rng.integers(0, 255, (6, 8, 3), dtype=np.uint8)
        image = Image.fromarray(base).resize((160, 120), Image.Resampling.BICUBIC)
        path = folder / f"IMG_{i:03d}.jpg"
        image.save(path, "JPEG", quality=90)
        ids.append(f"IMG_{i:03d}")
        paths.append(str(path))
    return pa.table({"image_id": ids, "path": paths})


def test_kinds_are_separate_rows_and_parallel_equals_serial(tmp_path):
    images = _write_jpegs(tmp_path / "img", 12)
    serial = hash_images(images, HASH_KINDS, workers=1, progress=False).table
    parallel = hash_images(images, HASH_KINDS, workers=2, progress=False, batch_size=2).table
    assert serial.num_rows == 36
    assert serial.column("hash_kind").unique().to_pylist() == ["autheval", "autheval_draft", "imagehash"]
    assert serial.select(["image_id", "hash_kind", "phash"]).equals(parallel.select(["image_id", "hash_kind", "phash"]))
    assert serial.schema.field("phash").type == pa.uint64()
    for row in serial.to_pylist():
        assert row["image_hash"] == to_hex(row["phash"])


def test_incremental_rerun_hashes_only_new_or_changed_files(tmp_path):
    images = _write_jpegs(tmp_path / "img", 10)
    first = hash_images(images, ("autheval", "imagehash"), workers=1, progress=False)
    assert first.n_files_hashed == 10 and first.n_rows_reused == 0

    again = hash_images(images, ("autheval", "imagehash"), workers=1, previous=first.table, progress=False)
    assert again.n_files_hashed == 0 and again.n_rows_reused == 20
    assert again.table.equals(first.table)

    changed = Path(images.column("path")[3].as_py())
    Image.new("RGB", (160, 120), (200, 30, 30)).save(changed, "JPEG")
    os.utime(changed, ns=(1_000_000_000, 1_000_000_000))  # a different mtime for certain
    new_folder = tmp_path / "img"
    Image.new("RGB", (160, 120), (10, 200, 30)).save(new_folder / "IMG_NEW.jpg", "JPEG")
    grown = pa.concat_tables([images, pa.table({"image_id": ["IMG_NEW"], "path": [str(new_folder / "IMG_NEW.jpg")]})])
    third = hash_images(grown, ("autheval", "imagehash"), workers=1, previous=first.table, progress=False)
    assert third.n_files_hashed == 2  # the changed file and the new one
    assert third.n_rows_reused == 18
    before = {(r["image_id"], r["hash_kind"]): r["phash"] for r in first.table.to_pylist()}
    after = {(r["image_id"], r["hash_kind"]): r["phash"] for r in third.table.to_pylist()}
    assert after[("IMG_003", "autheval")] != before[("IMG_003", "autheval")]
    assert all(after[k] == v for k, v in before.items() if k[0] != "IMG_003")

    # a new kind on an unchanged file is computed, the old kind reused
    fourth = hash_images(grown, ("autheval", "autheval_draft"), workers=1, previous=third.table, progress=False)
    assert fourth.n_files_hashed == 11 and fourth.n_rows_reused == 11


def test_unreadable_and_missing_files_are_failures_not_crashes(tmp_path):
    images = _write_jpegs(tmp_path / "img", 3)
    broken = tmp_path / "img" / "BROKEN.jpg"
    broken.write_bytes(b"\xff\xd8\xff\xe0 this is not a jpeg")
    table = pa.concat_tables(
        [images, pa.table({"image_id": ["BROKEN", "GONE"], "path": [str(broken), str(tmp_path / "gone.jpg")]})]
    )
    run = hash_images(table, ("autheval",), workers=1, progress=False)
    assert run.table.num_rows == 3
    assert sorted(run.failures.column("image_id").to_pylist()) == ["BROKEN", "GONE"]
    assert all(run.failures.column("error").to_pylist())


def test_zip_members_hash_like_files(tmp_path):
    images = _write_jpegs(tmp_path / "img", 4)
    archive = tmp_path / "ISIC_2019_Training_Input.zip"
    with zipfile.ZipFile(archive, "w") as handle:
        for path in images.column("path").to_pylist():
            handle.write(path, f"ISIC_2019_Training_Input/{Path(path).name}")
    zipped = pa.table(
        {
            "image_id": images.column("image_id"),
            "path": [f"{archive}!ISIC_2019_Training_Input/{Path(p).name}" for p in images.column("path").to_pylist()],
        }
    )
    assert read_image_bytes(zipped.column("path")[0].as_py()) == Path(images.column("path")[0].as_py()).read_bytes()
    a = hash_images(images, ("autheval",), workers=1, progress=False).table
    b = hash_images(zipped, ("autheval",), workers=1, progress=False)
    assert a.column("phash").equals(b.table.column("phash"))
    again = hash_images(zipped, ("autheval",), workers=1, previous=b.table, progress=False)
    assert again.n_files_hashed == 0


def test_unknown_kind_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="unknown hash kind"):
        hash_images(pa.table({"image_id": ["a"], "path": ["x"]}), ("dhash",))
