"""Skin-tone (ITA) benchmark: the vectorised estimate against one image at a time, on the demo's cohort.

Writes a synthetic cohort (default the demo's: 4,000 images at 128 x 96; or reads --dir), then times
(1) the whole `skin_tones` step (decoding in threads, one rgb2lab call and array medians per chunk of
images), (2) the decoding alone and (3) the estimate on the decoded pixels, vectorised against the same
rule applied one image at a time (`ita_of_images` on a batch of one), with the ratio; and prints the
agreement of the estimated categories with the planted ones (synth_truth.csv). Each time is the best of
--repeat runs (wall and this process's CPU seconds); files are read once first so the page cache is
warm.

Usage: python benchmarks/skin_tone.py [--n 4000] [--size 128 96] [--repeat 3] [--workers N] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from autheval.raw.ingest import IMAGE_FOLDER
from autheval.raw.phash import read_image_bytes
from autheval.raw.skin_tone import CHUNK, analysis_pixels, ita_category, ita_of_images, skin_tones
from autheval.raw.synth import TRUTH_FILE, synth_cohort
from benchmarks.peer import machine_line


def best_of(repeat: int, fn):
    """(best wall seconds, best CPU seconds of this process, the result)."""
    walls, cpus, out = [], [], None
    for _ in range(repeat):
        started, cpu = time.perf_counter(), time.process_time()
        out = fn()
        walls.append(time.perf_counter() - started)
        cpus.append(time.process_time() - cpu)
    return min(walls), min(cpus), out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=4000, help="images (default 4000, the demo's cohort)")
    parser.add_argument("--size", type=int, nargs=2, default=(128, 96), metavar=("W", "H"))
    parser.add_argument("--repeat", type=int, default=3, help="timings per measurement; the best is kept")
    parser.add_argument("--workers", type=int, default=os.cpu_count(), help="decoding threads")
    parser.add_argument("--dir", type=Path, default=None, help="an existing synthetic cohort (else one is written)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as scratch:
        root = args.dir
        if root is None:
            started = time.perf_counter()
            root = synth_cohort(args.n, Path(scratch) / "cohort", size=tuple(args.size)).root
            print(f"wrote {args.n} images of {args.size[0]} x {args.size[1]} in {time.perf_counter() - started:.1f} s")
        truth = pacsv.read_csv(root / TRUTH_FILE).to_pylist()
        ids = [r["image"] for r in truth]
        paths = [str(root / IMAGE_FOLDER / f"{i}.jpg") for i in ids]
        for path in paths:  # warm the page cache
            read_image_bytes(path)
        table = pa.table({"image_id": ids, "path": paths})
        print(machine_line())
        whole, whole_cpu, tones = best_of(args.repeat, lambda: skin_tones(table, workers=args.workers))
        decode, decode_cpu, pixels = best_of(
            args.repeat, lambda: np.stack([analysis_pixels(read_image_bytes(p)) for p in paths])
        )
        vectorised, vectorised_cpu, _ = best_of(
            args.repeat,
            lambda: np.concatenate([ita_of_images(pixels[s : s + CHUNK]) for s in range(0, len(pixels), CHUNK)]),
        )
        looped, looped_cpu, angles = best_of(args.repeat, lambda: np.array([ita_of_images(p[None])[0] for p in pixels]))
        estimated = tones.column("ita_category").to_pylist()
        assert ita_category(angles).tolist() == estimated, "the two paths must give the same categories"
        planted = [r["skin_tone"] for r in truth]
        agreement = np.mean([e == p for e, p in zip(estimated, planted)])
        error = np.median(np.abs(np.array(tones.column("ita").to_pylist()) - [r["skin_ita"] for r in truth]))
        n = len(ids)
        print(
            f"{n} images, skin_tones: {whole:.2f} s wall, {whole_cpu:.2f} s CPU ({n / whole:.0f} images/s, "
            f"{args.workers} decoding threads)"
        )
        print(f"  decoding alone (one thread): {decode:.2f} s wall, {decode_cpu:.2f} s CPU")
        print(
            f"  estimate on decoded pixels: vectorised {vectorised:.2f} s ({vectorised_cpu:.2f} s CPU), one image "
            f"at a time {looped:.2f} s ({looped_cpu:.2f} s CPU): ratio {looped / vectorised:.1f}x wall, "
            f"{looped_cpu / max(vectorised_cpu, 1e-9):.1f}x CPU"
        )
        print(f"planted category recovered for {agreement:.1%} of images; median |ITA error| {error:.2f} degrees")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
