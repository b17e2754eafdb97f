"""Incremental hashing must not be fooled by a rewrite that keeps the file size: a file whose bytes
changed is hashed again, whatever its size."""

from __future__ import annotations

import os
import time
import zipfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

Image = pytest.importorskip("PIL.Image")

from autheval.raw.phash import hash_images


def jpeg_bytes(seed: int) -> bytes:
    """A small JPEG of random smooth content (different seeds: different hashes)."""
    import io

    rng = np.random.default_rng(seed)
    base = rng.integers(0, 255, (6, 8, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(base).resize((160, 120), Image.Resampling.BICUBIC).save(buffer, "JPEG", quality=90)
    return buffer.getvalue()


def same_size_pair() -> tuple[bytes, bytes]:
    """Two different images padded to the same number of bytes (JPEG decoders stop at the end marker)."""
    a, b = jpeg_bytes(1), jpeg_bytes(2)
    size = max(len(a), len(b))
    return a + b"\0" * (size - len(a)), b + b"\0" * (size - len(b))


def test_same_size_rewrite_of_a_file_is_hashed_again(tmp_path):
    first_bytes, second_bytes = same_size_pair()
    assert len(first_bytes) == len(second_bytes) and first_bytes != second_bytes
    folder = tmp_path / "img"
    folder.mkdir()
    paths = {"IMG_A": folder / "IMG_A.jpg", "IMG_B": folder / "IMG_B.jpg"}
    paths["IMG_A"].write_bytes(first_bytes)
    paths["IMG_B"].write_bytes(jpeg_bytes(3))
    images = pa.table({"image_id": list(paths), "path": [str(p) for p in paths.values()]})
    first = hash_images(images, ("autheval",), workers=1, progress=False)
    before = dict(zip(first.table.column("image_id").to_pylist(), first.table.column("phash").to_pylist()))

    old = os.stat(paths["IMG_A"])
    paths["IMG_A"].write_bytes(second_bytes)  # same size, other content, a later modification time
    os.utime(paths["IMG_A"], ns=(old.st_atime_ns, old.st_mtime_ns + 1_000_000))  # even by 1 ms only
    assert os.stat(paths["IMG_A"]).st_size == old.st_size

    again = hash_images(images, ("autheval",), workers=1, previous=first.table, progress=False)
    after = dict(zip(again.table.column("image_id").to_pylist(), again.table.column("phash").to_pylist()))
    fresh = hash_images(images, ("autheval",), workers=1, progress=False)
    assert again.n_files_hashed == 1 and again.n_rows_reused == 1
    assert after["IMG_A"] != before["IMG_A"]
    assert again.table.select(["image_id", "phash"]).equals(fresh.table.select(["image_id", "phash"]))


def test_same_size_rewrite_of_a_zip_member_is_hashed_again(tmp_path):
    first_bytes, second_bytes = same_size_pair()
    archive = tmp_path / "ISIC_2019_Training_Input.zip"
    stamp = time.localtime(time.time())[:6]

    def write_zip(member_bytes: bytes) -> None:
        with zipfile.ZipFile(archive, "w") as handle:
            handle.writestr(zipfile.ZipInfo("ISIC_2019_Training_Input/IMG_A.jpg", date_time=stamp), member_bytes)

    write_zip(first_bytes)
    images = pa.table({"image_id": ["IMG_A"], "path": [f"{archive}!ISIC_2019_Training_Input/IMG_A.jpg"]})
    first = hash_images(images, ("autheval",), workers=1, progress=False)
    write_zip(second_bytes)  # same member size, same stored date, other bytes
    again = hash_images(images, ("autheval",), workers=1, previous=first.table, progress=False)
    assert again.n_files_hashed == 1
    assert again.table.column("phash")[0] != first.table.column("phash")[0]


def test_unchanged_files_are_reused(tmp_path):
    folder = tmp_path / "img"
    folder.mkdir()
    path = folder / "IMG_A.jpg"
    path.write_bytes(jpeg_bytes(4))
    images = pa.table({"image_id": ["IMG_A"], "path": [str(path)]})
    first = hash_images(images, ("autheval",), workers=1, progress=False)
    again = hash_images(images, ("autheval",), workers=1, previous=first.table, progress=False)
    assert again.n_files_hashed == 0 and again.n_rows_reused == 1
    assert Path(path).read_bytes() == jpeg_bytes(4)
