"""Perceptual hashes of the images, one `image_hashes` table for every declared hash kind.

Kinds (never mixed: each row names its kind, and duplicates are only searched within one kind):

* `autheval`: AuthEval's own pHash (spec 1.6), needed for AuthEval-compatible exact groups and
  cluster ids: Pillow greyscale 'L', resize to 32x32 with Pillow's default filter (bicubic), no EXIF
  rotation, orthonormal DCT-II, top-left 8x8, median of coefficients 1..63 (DC excluded), bit b set iff
  c_b > median, bit 0 = DC = least significant.
* `autheval_draft`: the same recipe on a JPEG decoded in draft mode (DCT-domain downscaling to about
  1/4 size, luma only). Faster (figures: `benchmarks/hashing.py`), but a few bits differ on some images: a
  different hash.
* `imagehash`: `imagehash.phash` (Lanczos resize, median including DC, other bit order), stored as
  the uint64 whose 16-hex text equals `str(imagehash.phash(img))`: bit 63 is the DCT's [0, 0]
  (DC) cell, then row-major down to bit 0 = cell [7, 7].

Hashing runs over processes, shows a progress bar, and is incremental: a rerun given the previous
table hashes only images whose (path, size, mtime) changed.
"""

from __future__ import annotations

import io
import multiprocessing
import os
import re
import sys
import time
import zipfile
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from PIL import Image

from autheval.columns import schema

HASH_KINDS = ("autheval", "autheval_draft", "imagehash")
DRAFT_SIZE = (256, 192)  # draft-mode target: JPEG decodes at the smallest scale (1/8 .. 1) at least this big

# image_hash: 16 lower-case hex digits of phash; format: the format Pillow detected in the file's bytes
# (JPEG, PNG, ...), whatever its name
IMAGE_HASHES_SCHEMA = schema("image_id hash_kind phash image_hash path size mtime_ns format")
FAILURES_SCHEMA = pa.schema([("image_id", pa.string()), ("path", pa.string()), ("error", pa.string())])


def _dct_matrix(n: int = 32) -> np.ndarray:
    """Orthonormal DCT-II matrix C[k, i] = a_k cos(pi (i + 0.5) k / n)."""
    k = np.arange(n)[:, None]
    i = np.arange(n)[None, :]
    matrix = np.cos(np.pi * (i + 0.5) * k / n) * np.sqrt(2.0 / n)
    matrix[0, :] = np.sqrt(1.0 / n)
    return matrix


_DCT32 = _dct_matrix(32)
_BITS = np.uint64(1) << np.arange(64, dtype=np.uint64)


def autheval_hash_of_grey32(grey32: np.ndarray) -> int:
    """The AuthEval pHash of a 32x32 greyscale array (spec 1.6 steps 2-5)."""
    a = np.asarray(grey32, dtype=np.float64)
    d = _DCT32 @ a @ _DCT32.T
    c = d[:8, :8].reshape(64)
    m = np.median(c[1:])
    return int(np.bitwise_or.reduce(np.where(c > m, _BITS, np.uint64(0))))


def autheval_phash(image: Image.Image) -> int:
    """AuthEval pHash of a Pillow image (no EXIF transpose, default resize filter)."""
    return autheval_hash_of_grey32(np.asarray(image.convert("L").resize((32, 32))))


def imagehash_phash(image: Image.Image) -> int:
    """imagehash.phash as a uint64 whose hex text equals str(imagehash.phash(image))."""
    import imagehash

    return int(str(imagehash.phash(image)), 16)


def to_hex(value: int) -> str:
    return format(int(value), "016x")


def hamming(a: int, b: int) -> int:
    return (int(a) ^ int(b)).bit_count()


_ZIPS: dict[str, tuple[tuple[int, int], zipfile.ZipFile]] = {}


def _archive(archive: str) -> tuple[zipfile.ZipFile, int]:
    """The open zip `<archive>.zip` and its mtime_ns; re-opened when the file's size or mtime changed
    (an archive rewritten during the process is read anew, never from a stale central directory)."""
    st = os.stat(archive + ".zip")
    signature = (st.st_size, st.st_mtime_ns)
    cached = _ZIPS.get(archive)
    if cached is None or cached[0] != signature:
        if cached is not None:
            cached[1].close()
        cached = _ZIPS[archive] = (signature, zipfile.ZipFile(archive + ".zip"))
    return cached[1], st.st_mtime_ns


def read_image_bytes(path: str) -> bytes:
    """Bytes of an image path: a file, or `<archive>.zip!<member>` inside a zip."""
    if ".zip!" in path:
        archive, _, member = path.partition(".zip!")
        return _archive(archive)[0].read(member)
    with open(path, "rb") as f:
        return f.read()


def stat_image(path: str) -> tuple[int, int]:
    """(size, mtime_ns) of an image path. For a zip member: its size, and the archive's mtime_ns (a
    member's stored date has 2 s resolution, so a same-size rewrite could keep it; any rewrite of the
    archive re-hashes its members instead)."""
    if ".zip!" in path:
        archive, _, member = path.partition(".zip!")
        handle, mtime_ns = _archive(archive)
        return handle.getinfo(member).file_size, mtime_ns
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns


# The format a file name promises, by extension (compared with the format found in the bytes).
FORMAT_OF_SUFFIX = {
    ".jpg": "JPEG",
    ".jpeg": "JPEG",
    ".jpe": "JPEG",
    ".png": "PNG",
    ".tif": "TIFF",
    ".tiff": "TIFF",
    ".bmp": "BMP",
    ".gif": "GIF",
    ".webp": "WEBP",
}


def named_format(path: str) -> str | None:
    """The format a path's extension names (None for an unknown extension)."""
    return FORMAT_OF_SUFFIX.get(os.path.splitext(path)[1].lower())


def hash_bytes(data: bytes, kinds) -> dict[str, int]:
    """Every requested kind from one file's bytes (one full decode shared by the full-decode kinds)."""
    return decode_hashes(data, kinds)[0]


def decode_hashes(data: bytes, kinds) -> tuple[dict[str, int], str | None]:
    """(hashes of every requested kind, the format Pillow detected) from one file's bytes."""
    out = {}
    detected = None
    full = [k for k in kinds if k != "autheval_draft"]
    if full:
        with Image.open(io.BytesIO(data)) as image:
            detected = image.format
            image.load()
            grey = image.convert("L")
        if "autheval" in full:
            out["autheval"] = autheval_hash_of_grey32(np.asarray(grey.resize((32, 32))))
        if "imagehash" in full:
            out["imagehash"] = imagehash_phash(grey)
    if "autheval_draft" in kinds:
        with Image.open(io.BytesIO(data)) as image:
            detected = detected or image.format
            image.draft("L", DRAFT_SIZE)
            image.load()
            out["autheval_draft"] = autheval_phash(image)
    return out, detected


def hash_file(path: str, kinds=("autheval",)) -> dict[str, int]:
    return hash_bytes(read_image_bytes(path), kinds)


def _error_text(err: Exception) -> str:
    """One line naming the error, without object addresses (the same file gives the same text)."""
    return re.sub(r" <[^<>]* at 0x[0-9a-fA-F]+>", "", f"{type(err).__name__}: {err}".splitlines()[0])


def _hash_batch(batch: list[tuple[int, str, tuple]]) -> list[tuple[int, dict | None, str | None, str | None]]:
    results: list[tuple[int, dict | None, str | None, str | None]] = []
    for index, path, kinds in batch:
        try:
            hashes, detected = decode_hashes(read_image_bytes(path), kinds)
            results.append((index, hashes, detected, None))
        except Exception as err:  # an unreadable image is a reported failure, not a crash
            results.append((index, None, None, _error_text(err)))
    return results


@dataclass(frozen=True)
class HashRun:
    """The hashes, the images that could not be hashed, and how much work the run did."""

    table: pa.Table
    failures: pa.Table
    n_files_hashed: int
    n_rows_reused: int
    seconds: float


def _progress(enabled: bool, total: int):
    if not enabled:
        return None
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    bar = Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    bar.start()
    bar.add_task("hashing images", total=total)
    return bar


def _pool_context():
    """forkserver where available: workers never inherit the parent's threads (DuckDB, rich), unlike
    a plain fork, and fork from a server that has already imported the hashing code, so a pool starts
    in milliseconds after the first (spawn re-imports numpy/Pillow in every worker)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    # takes effect when the server starts (the first pool); later calls change nothing
    context.set_forkserver_preload(["autheval.raw.phash", "imagehash", "scipy.fftpack"])
    return context


def hash_images(
    images: pa.Table,
    kinds=("autheval", "imagehash"),
    *,
    workers: int | None = None,
    previous: pa.Table | None = None,
    progress: bool | None = None,
    batch_size: int | None = None,
) -> HashRun:
    """Hash every image of `images` (columns image_id, path) for each kind.

    `workers`: processes (default: all cores; 1 runs in this process). `previous`: an earlier
    image_hashes table; its rows are reused where path, size and mtime are unchanged. `progress`:
    a progress bar on stderr (default: when stderr is a terminal).
    """
    started = time.perf_counter()
    kinds = tuple(dict.fromkeys(kinds))
    for kind in kinds:
        if kind not in HASH_KINDS:
            raise ValueError(f"unknown hash kind {kind!r}; known: {', '.join(HASH_KINDS)}")
    ids = images.column("image_id").to_pylist()
    paths = images.column("path").to_pylist()
    reuse: dict[tuple[str, str], tuple] = {}
    if previous is not None and previous.num_rows and "format" in previous.column_names:  # older tables: re-hash
        for row in previous.select(
            ["image_id", "hash_kind", "phash", "path", "size", "mtime_ns", "format"]
        ).to_pylist():
            reuse[(row["image_id"], row["hash_kind"])] = (
                row["path"],
                row["size"],
                row["mtime_ns"],
                row["phash"],
                row["format"],
            )

    rows: list[dict] = []
    failures: list[dict] = []
    todo: list[tuple[int, str, tuple]] = []
    stats: dict[int, tuple[int, int]] = {}
    n_reused = 0
    for i, (image_id, path) in enumerate(zip(ids, paths)):
        try:
            stats[i] = stat_image(path)
        except (OSError, KeyError) as err:
            failures.append(dict(image_id=image_id, path=path, error=f"{type(err).__name__}: {err}"))
            continue
        size, mtime = stats[i]
        needed = []
        for kind in kinds:
            hit = reuse.get((image_id, kind))
            if hit is not None and hit[:3] == (path, size, mtime):
                rows.append(
                    dict(
                        image_id=image_id,
                        hash_kind=kind,
                        phash=hit[3],
                        path=path,
                        size=size,
                        mtime_ns=mtime,
                        format=hit[4],
                    )
                )
                n_reused += 1
            else:
                needed.append(kind)
        if needed:
            todo.append((i, path, tuple(needed)))

    workers = max(1, workers or os.cpu_count() or 1)
    if progress is None:
        progress = sys.stderr.isatty()
    bar = _progress(progress and bool(todo), len(todo))

    def collect(results):
        for index, hashes, detected, error in results:
            if error is not None:
                failures.append(dict(image_id=ids[index], path=paths[index], error=error))
                continue
            size, mtime = stats[index]
            for kind, value in hashes.items():
                rows.append(
                    dict(
                        image_id=ids[index],
                        hash_kind=kind,
                        phash=value,
                        path=paths[index],
                        size=size,
                        mtime_ns=mtime,
                        format=detected,
                    )
                )
        if bar is not None:
            bar.advance(bar.task_ids[0], len(results))

    try:
        if workers == 1 or len(todo) < 2 * workers:
            step = batch_size or 16
            for start in range(0, len(todo), step):
                collect(_hash_batch(todo[start : start + step]))
        else:
            step = batch_size or max(1, min(64, len(todo) // (workers * 8)))
            batches = [todo[s : s + step] for s in range(0, len(todo), step)]
            with ProcessPoolExecutor(max_workers=workers, mp_context=_pool_context()) as pool:
                for future in as_completed([pool.submit(_hash_batch, b) for b in batches]):
                    collect(future.result())
    finally:
        if bar is not None:
            bar.stop()

    rows.sort(key=lambda r: (r["hash_kind"], r["image_id"]))
    for r in rows:
        r["image_hash"] = to_hex(r["phash"])
    failures.sort(key=lambda r: r["image_id"] or "")
    return HashRun(
        table=pa.Table.from_pylist(rows, schema=IMAGE_HASHES_SCHEMA),
        failures=pa.Table.from_pylist(failures, schema=FAILURES_SCHEMA),
        n_files_hashed=len(todo),
        n_rows_reused=n_reused,
        seconds=time.perf_counter() - started,
    )


def hashes_of_kind(image_hashes: pa.Table, kind: str = "autheval") -> pa.Table:
    """(image_id, phash) rows of one hash kind."""
    import pyarrow.compute as pc

    table = image_hashes.filter(pc.equal(image_hashes.column("hash_kind"), kind))
    return table.select(["image_id", "phash"])


def image_problem(path: str | os.PathLike) -> str | None:
    """Why the file at `path` is not an image the scorer can read (decoded, JPEGs at a reduced draft
    size), else None: checked when the file is read, not after the stages before the benchmark."""
    try:
        with Image.open(path) as image:
            image.draft("RGB", (64, 64))
            image.load()
            mode = image.mode
    except Exception as err:  # any decoder's error: an empty, truncated or foreign file
        first = str(err).strip().splitlines()[0][:200] if str(err).strip() else type(err).__name__
        return f"not a readable image ({first})"
    if mode in ("I", "F"):
        return f"32-bit pixels (mode {mode}) have no declared range; save the image with 8 or 16 bits per channel"
    return None
