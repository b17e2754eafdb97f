"""A synthetic ISIC-shaped cohort: the three official ISIC 2019 training files in their exact formats,
with lesion-like JPEGs, so the raw path (ingest, hashing, duplicates, clusters, splits) runs end to end
on any machine without the real data.

Written into `out_dir`:
* ISIC_2019_Training_Metadata.csv     image,age_approx,anatom_site_general,lesion_id,sex
* ISIC_2019_Training_GroundTruth.csv  image,MEL,NV,BCC,AK,BKL,DF,VASC,SCC,UNK (one-hot, 0.0/1.0)
* ISIC_2019_Training_Input/<image>.jpg
* synth_truth.csv (what was planted: multi-image lesions, exact and near duplicates, each lesion's skin
  tone: its ITA category from the declared SKIN_TONES and its ITA as painted),
  synth_manifest.json (generator, n, seed, size), proposals.csv (three simulated proposal
  mechanisms, autheval/raw/synth_proposals.py) and benchmark.csv (a closed-ended benchmark of a sample
  of lesions, autheval/raw/synth_benchmark.py) -- side files the official release does not have.

Deliberate structure: multi-image lesions (several views of one lesion), exact duplicates (byte
copies under a new id, sometimes with another or no lesion id, as ISIC's cross-dataset re-uploads),
and near duplicates (a small crop or a JPEG-quality change, kept within AuthEval pHash distance 4
when one of the perturbations achieves it). No two lesions' images share an AuthEval pHash (a view or
near duplicate that would is drawn again), so exact-hash groups are the planted ones. Everything is a pure function of
(n, seed, size).
"""

from __future__ import annotations

import io
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
from PIL import Image, ImageDraw
from skimage.color import lab2rgb, rgb2lab

from autheval.columns import schema
from autheval.raw.ingest import (
    IMAGE_FOLDER,
    LABEL_COLUMNS,
    LABELS_FILE,
    METADATA_COLUMNS,
    METADATA_FILE,
    SYNTH_MANIFEST,
)
from autheval.raw.phash import autheval_phash, hamming
from autheval.raw.skin_tone import ita_category, ita_degrees
from autheval.raw.synth_benchmark import benchmark_image, write_benchmark
from autheval.raw.synth_proposals import write_proposals
from warehouse.atomic import atomic_path, atomic_write_bytes, atomic_write_text

SYNTH_SEED = 20260706
TRUTH_FILE = "synth_truth.csv"
DIAGNOSES = {"NV": 0.50, "MEL": 0.18, "BCC": 0.13, "BKL": 0.10, "AK": 0.035, "SCC": 0.025, "VASC": 0.01, "DF": 0.01}
SITES = {
    "anterior torso": 0.25,
    "lower extremity": 0.20,
    "posterior torso": 0.16,
    "head/neck": 0.12,
    "upper extremity": 0.12,
    "palms/soles": 0.03,
    "lateral torso": 0.02,
    "oral/genital": 0.01,
    None: 0.09,
}
# Planted skin tones (autheval/raw/skin_tone.py's ITA categories): a declared distribution over the six, and
# per category the ITA (degrees) and b* ranges drawn from, inside the bin and away from its edges;
# L* = 50 + b* tan(ITA), a* uniform in SKIN_A_STAR. Drawn from a stream of their own (SKIN_STREAM).
SKIN_TONES = {"very_light": 0.22, "light": 0.26, "intermediate": 0.20, "tan": 0.14, "brown": 0.12, "dark": 0.06}
SKIN_ITA = {
    "very_light": ((59, 66), (10, 15)),
    "light": ((45, 51), (12, 18)),
    "intermediate": ((32, 37), (14, 20)),
    "tan": ((15, 23), (16, 24)),
    "brown": ((-22, 3), (16, 24)),
    "dark": ((-50, -37), (12, 20)),
}
SKIN_A_STAR = (6.0, 14.0)
SKIN_STREAM = 2**31 + 17  # tags the skin-tone stream [seed, SKIN_STREAM, lesion] apart from the per-image ones
# (core, rim) colours per diagnosis
COLOURS = {
    "NV": ((96, 58, 36), (150, 100, 70)),
    "MEL": ((40, 24, 22), (110, 70, 60)),
    "BCC": ((190, 120, 120), (215, 160, 150)),
    "BKL": ((130, 90, 60), (175, 130, 95)),
    "AK": ((200, 110, 100), (220, 150, 135)),
    "SCC": ((185, 95, 85), (215, 150, 130)),
    "VASC": ((150, 30, 60), (190, 80, 100)),
    "DF": ((140, 90, 75), (185, 135, 115)),
}
ROLES = ("lesion_view", "exact_duplicate", "near_duplicate")
REDRAWS = 8  # redraws of an image whose pHash another lesion already has (one is enough in practice)


@dataclass(frozen=True)
class SynthCohort:
    root: Path
    metadata: Path
    labels: Path
    images: Path
    truth: pa.Table  # image, role, source_image, lesion_id, perturbation, autheval_distance, skin_tone, skin_ita


def _file_mode() -> int:
    """Atomic writes create private (0600) temporary files; a cohort is for reading: 0644 less umask."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o644 & ~mask


def _draw(rng: np.random.Generator, table: dict):
    keys = list(table)
    p = np.array(list(table.values()), dtype=float)
    return keys[rng.choice(len(keys), p=p / p.sum())]


def planted_skin(rng: np.random.Generator) -> tuple[np.ndarray, float, str]:
    """(skin RGB as float32 0-255, its ITA, its ITA category) drawn from the declared SKIN_TONES; the ITA
    and category are of the colour as painted (before lighting, vignette and noise)."""
    (ita_low, ita_high), (b_low, b_high) = SKIN_ITA[_draw(rng, SKIN_TONES)]
    ita, b_star, a_star = rng.uniform(ita_low, ita_high), rng.uniform(b_low, b_high), rng.uniform(*SKIN_A_STAR)
    lab = np.array([50 + b_star * np.tan(np.radians(ita)), a_star, b_star])
    rgb = np.clip(lab2rgb(lab[None, None, :])[0, 0] * 255, 0, 255).astype(np.float32)
    painted = rgb2lab(rgb[None, None, :].astype(np.float64) / 255)[0, 0]
    painted_ita = float(ita_degrees(painted[0], painted[2]))
    return rgb, painted_ita, str(ita_category([painted_ita])[0])


def _lesion_params(rng: np.random.Generator, diagnosis: str, skin_rng: np.random.Generator) -> dict:
    core, rim = (np.array(c, dtype=np.float32) for c in COLOURS[diagnosis])
    tone = (rng.uniform(0.8, 1.2) * rng.uniform(0.96, 1.04, 3)).astype(np.float32)
    rng.integers(6), rng.uniform(size=3)  # the former skin palette's draws: every later parameter as before
    skin, skin_ita, skin_tone = planted_skin(skin_rng)
    return {
        "skin": skin,
        "skin_ita": skin_ita,
        "skin_tone": skin_tone,
        "core": np.clip(core * tone, 0, 255),
        "rim": np.clip(rim * tone, 0, 255),
        "radius": rng.uniform(0.12, 0.34),
        "ratio": rng.uniform(0.55, 1.0),
        "angle": rng.uniform(0, np.pi),
        "harmonics": [(k, rng.uniform(0, 0.14 / k**0.5), rng.uniform(0, 2 * np.pi)) for k in range(2, 7)],
        "center": rng.uniform(-0.18, 0.18, 2),
        "edge": rng.uniform(0.003, 0.015),
        "gradient": rng.uniform(-0.12, 0.12, 2),
        "vignette": rng.uniform(0.0, 0.9),
        "texture_seed": int(rng.integers(2**31)),
    }


def _view_params(rng: np.random.Generator, first: bool) -> dict:
    if first:
        return {"shift": np.zeros(2), "zoom": 1.0, "turn": 0.0, "light": 1.0, "hairs": int(rng.integers(0, 4))}
    return {
        "shift": rng.uniform(-0.15, 0.15, 2),
        "zoom": rng.uniform(0.75, 1.3),
        "turn": rng.uniform(0, 2 * np.pi),
        "light": rng.uniform(0.88, 1.12),
        "hairs": int(rng.integers(0, 5)),
    }


def render_lesion(lesion: dict, view: dict, size: tuple[int, int], seed: int) -> np.ndarray:
    """One dermoscopy-like RGB image (H x W x 3 uint8): a textured, irregular pigmented blob on a
    skin-tone background with a lighting gradient, a vignette, hairs and sensor noise."""
    width, height = size
    rng = np.random.default_rng(seed)
    w2, h2 = max(32, width // 2), max(32, height // 2)  # geometry at half resolution, noise at full
    scale = float(min(w2, h2))
    ys, xs = np.mgrid[0:h2, 0:w2].astype(np.float32)
    cx = w2 / 2 + (lesion["center"][0] + view["shift"][0]) * scale
    cy = h2 / 2 + (lesion["center"][1] + view["shift"][1]) * scale
    u, v = (xs - cx) / scale, (ys - cy) / scale
    angle = lesion["angle"] + view["turn"]
    ur = u * np.cos(angle) + v * np.sin(angle)
    vr = (-u * np.sin(angle) + v * np.cos(angle)) / lesion["ratio"]
    r = np.sqrt(ur * ur + vr * vr)
    theta = np.arctan2(vr, ur)
    boundary = np.full_like(r, lesion["radius"] * view["zoom"])
    for k, amp, phase in lesion["harmonics"]:
        boundary *= 1 + amp * np.cos(k * theta + phase)
    mask = 1 / (1 + np.exp(-(boundary - r) / lesion["edge"]))
    t = np.clip(r / np.maximum(boundary, 1e-3), 0, 1)[..., None]
    tex_rng = np.random.default_rng(lesion["texture_seed"])
    coarse = (tex_rng.random((12, 16)) * 255).astype(np.uint8)
    texture = np.asarray(Image.fromarray(coarse).resize((w2, h2), Image.Resampling.BICUBIC), np.float32) / 255 - 0.5
    colour = (lesion["core"] * (1 - t) + lesion["rim"] * t) * (1 + 0.45 * texture[..., None])
    xn, yn = xs / w2 - 0.5, ys / h2 - 0.5
    light = view["light"] * (1 + lesion["gradient"][0] * xn + lesion["gradient"][1] * yn)
    vignette = 1 - lesion["vignette"] * np.clip(xn * xn + yn * yn - 0.12, 0, None)
    background = lesion["skin"] * (light * vignette)[..., None]
    image = background * (1 - mask[..., None]) + colour * (light * vignette)[..., None] * mask[..., None]
    picture = Image.fromarray(np.clip(image, 0, 255).astype(np.uint8)).resize((width, height), Image.Resampling.BICUBIC)
    draw = ImageDraw.Draw(picture)
    for _ in range(view["hairs"]):
        x0, y0 = rng.uniform(0, width), rng.uniform(0, height)
        points = [(x0, y0)]
        heading = rng.uniform(0, 2 * np.pi)
        for _ in range(6):
            heading += rng.normal(0, 0.25)
            x0 += np.cos(heading) * width / 8
            y0 += np.sin(heading) * width / 8
            points.append((x0, y0))
        draw.line(points, fill=(40, 28, 22), width=max(1, width // 400))
    noisy = np.asarray(picture, np.int16) + rng.integers(-6, 7, (height, width, 3), dtype=np.int16)
    return np.clip(noisy, 0, 255).astype(np.uint8)


def _jpeg(array: np.ndarray, quality: int) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, "JPEG", quality=quality)
    return buffer.getvalue()


def _near_variant(data: bytes, rng: np.random.Generator) -> tuple[bytes, str, int]:
    """A small perturbation of an image within pHash distance 1..4 when one of them achieves it."""
    with Image.open(io.BytesIO(data)) as image:
        image.load()
        rgb = image.convert("RGB")
    source_hash = autheval_phash(rgb)
    width, height = rgb.size
    candidates = []
    for step in range(6):
        kind = ("crop", "quality", "crop+quality", "brightness", "crop", "quality")[step]
        edit = rgb
        if "crop" in kind:
            f = rng.uniform(0.01, 0.03)
            box = (
                int(width * f),
                int(height * f),
                width - int(width * rng.uniform(0.005, f)),
                height - int(height * f),
            )
            edit = edit.crop(box).resize((width, height), Image.Resampling.BICUBIC)
        if kind == "brightness":
            edit = Image.fromarray(
                np.clip(np.asarray(edit, np.float32) * rng.uniform(1.02, 1.05), 0, 255).astype(np.uint8)
            )
        quality = int(rng.integers(60, 80)) if "quality" in kind else 92
        encoded = _jpeg(np.asarray(edit), quality)
        with Image.open(io.BytesIO(encoded)) as check:
            distance = hamming(source_hash, autheval_phash(check))
        candidates.append((encoded, f"{kind} q{quality}", distance))
        if 1 <= distance <= 4:
            return candidates[-1]
    return min(candidates, key=lambda c: (c[2] == 0, c[2]))


def _phash_of(data: bytes) -> int:
    with Image.open(io.BytesIO(data)) as image:
        return autheval_phash(image)


def _distinct_view(
    lesion: dict, view: dict, lesion_index: int, lesion_of_hash: dict, size, image_seed: int, rng: np.random.Generator
) -> bytes:
    """A view's JPEG whose AuthEval pHash no other lesion's image has: the blobs are simple enough that,
    from a few thousand images on, lesions collide (5 pairs in the demo's 4,000), and exact-hash groups
    always cluster, so a collision would merge two lesions (and mix their risk strata). On a collision
    the view is drawn again (shift, zoom, turn), at most REDRAWS times."""
    for _ in range(REDRAWS + 1):
        data = _jpeg(render_lesion(lesion, view, size, seed=image_seed), 92)
        if lesion_of_hash.setdefault(_phash_of(data), lesion_index) == lesion_index:
            break
        view = _view_params(rng, first=False)
    return data


def synth_cohort(
    n: int,
    out_dir: str | Path,
    seed: int = SYNTH_SEED,
    *,
    size: tuple[int, int] = (1024, 768),
    exact_fraction: float = 0.04,
    near_fraction: float = 0.04,
    overwrite: bool = False,
    progress: Callable[[], None] | None = None,
) -> SynthCohort:
    """Write a synthetic ISIC-2019-shaped cohort of `n` images into `out_dir` (see module doc);
    `progress` is called once per image written."""
    if n < 1:
        raise ValueError("n must be at least 1")
    root = Path(out_dir)
    folder = root / IMAGE_FOLDER
    if folder.exists():
        if not overwrite and any(folder.iterdir()):
            raise FileExistsError(f"{folder} already holds images; choose an empty folder or overwrite=True")
        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    mode = _file_mode()

    def publish(path: Path) -> Path:
        os.chmod(path, mode)
        return path

    rng = np.random.default_rng(seed)
    n_exact = int(round(n * exact_fraction)) if n >= 10 else 0
    n_near = int(round(n * near_fraction)) if n >= 10 else 0
    n_base = n - n_exact - n_near

    # Lesions and their views.
    records: list[dict] = []  # dicts: lesion key, metadata, view, role
    lesions: list[tuple[dict, dict]] = []  # (lesion parameters, metadata)
    while len(records) < n_base:
        diagnosis = _draw(rng, DIAGNOSES)
        views = int(min(n_base - len(records), _draw(rng, {1: 0.6, 2: 0.2, 3: 0.12, 4: 0.05, 6: 0.03})))
        prefix = _draw(rng, {"BCN_": 0.5, "HAM_": 0.4, "MSK4_": 0.1})
        has_id = views > 1 or rng.random() > 0.15
        lesion_id = f"{prefix}{len(lesions) + 1:07d}" if has_id else None
        age = None if rng.random() < 0.03 else float(np.clip(round(rng.normal(52, 17) / 5) * 5, 5, 85))
        sex = None if rng.random() < 0.03 else ("male" if rng.random() < 0.53 else "female")
        meta = {"lesion_id": lesion_id, "age": age, "sex": sex, "site": _draw(rng, SITES), "diagnosis": diagnosis}
        lesions.append((_lesion_params(rng, diagnosis, np.random.default_rng([seed, SKIN_STREAM, len(lesions)])), meta))
        for v in range(views):
            records.append(
                {
                    "lesion": len(lesions) - 1,
                    "view": _view_params(rng, v == 0),
                    "role": "lesion_view",
                    "meta": dict(meta),
                    "source": None,
                }
            )
    for j in range(n_exact + n_near):
        role = "exact_duplicate" if j < n_exact else "near_duplicate"
        src = int(rng.integers(n_base))
        meta = dict(records[src]["meta"])
        policy = j % 3
        if policy == 1:  # re-uploaded under another lesion id (another dataset's)
            other = "BCN_" if str(meta["lesion_id"]).startswith("HAM_") else "HAM_"
            meta["lesion_id"] = f"{other}{9000000 + j:07d}"
        elif policy == 2:
            meta["lesion_id"] = None
        records.append({"lesion": records[src]["lesion"], "view": None, "role": role, "meta": meta, "source": src})

    order = rng.permutation(len(records))
    start = int(rng.integers(0, 60000))
    names = [""] * len(records)  # every one set below (`order` is a permutation)
    for rank, index in enumerate(order):
        suffix = "_downsampled" if rng.random() < 0.04 else ""
        names[index] = f"ISIC_{start + rank:07d}{suffix}"

    blobs: dict[int, bytes] = {}
    lesion_of_hash: dict[int, int] = {}  # AuthEval pHash of a written view -> its lesion
    truth = []
    for index, record in enumerate(records):
        if record["role"] == "lesion_view":
            params, _ = lesions[record["lesion"]]
            image_seed = int(np.random.SeedSequence([seed, index]).generate_state(1)[0])
            data = _distinct_view(
                params,
                record["view"],
                record["lesion"],
                lesion_of_hash,
                size,
                image_seed,
                np.random.default_rng([seed, index, 1]),
            )
            perturbation, distance = None, None
        elif record["role"] == "exact_duplicate":
            data, perturbation, distance = blobs[record["source"]], "byte copy", 0
        else:
            near_rng = np.random.default_rng([seed, index])
            for _ in range(REDRAWS + 1):  # nor may a near duplicate take another lesion's pHash
                data, perturbation, distance = _near_variant(blobs[record["source"]], near_rng)
                if lesion_of_hash.setdefault(_phash_of(data), record["lesion"]) == record["lesion"]:
                    break
        blobs[index] = data
        publish(atomic_write_bytes(folder / f"{names[index]}.jpg", data))
        if progress is not None:
            progress()
        skin = lesions[record["lesion"]][0]
        truth.append(
            {
                "image": names[index],
                "role": record["role"],
                "source_image": None if record["source"] is None else names[record["source"]],
                "lesion_id": record["meta"]["lesion_id"],
                "perturbation": perturbation,
                "autheval_distance": distance,
                "skin_tone": skin["skin_tone"],
                "skin_ita": skin["skin_ita"],
            }
        )

    def fmt_age(age):
        return "" if age is None else repr(float(age))

    meta_lines = [",".join(METADATA_COLUMNS)]
    label_lines = [",".join(("image",) + LABEL_COLUMNS)]
    for index in sorted(range(len(records)), key=lambda i: names[i]):
        m = records[index]["meta"]
        meta_lines.append(
            ",".join([names[index], fmt_age(m["age"]), m["site"] or "", m["lesion_id"] or "", m["sex"] or ""])
        )
        label_lines.append(",".join([names[index]] + ["1.0" if c == m["diagnosis"] else "0.0" for c in LABEL_COLUMNS]))
    publish(atomic_write_text(root / METADATA_FILE, "\n".join(meta_lines) + "\n"))
    publish(atomic_write_text(root / LABELS_FILE, "\n".join(label_lines) + "\n"))
    ordered = sorted(range(len(records)), key=lambda i: names[i])
    publish(
        write_proposals(root, [names[i] for i in ordered], [records[i]["meta"]["diagnosis"] for i in ordered], seed)
    )
    publish(write_benchmark(root, [benchmark_image(names[i], records, lesions, i) for i in ordered], seed))
    truth_table = pa.Table.from_pylist(
        sorted(truth, key=lambda r: r["image"]),
        schema=schema("image role source_image lesion_id perturbation autheval_distance skin_tone skin_ita"),
    )
    with atomic_path(root / TRUTH_FILE) as tmp:
        pacsv.write_csv(truth_table, tmp)
    publish(root / TRUTH_FILE)
    publish(
        atomic_write_text(
            root / SYNTH_MANIFEST,
            json.dumps(
                {
                    "generator": "autheval.raw.synth",
                    "version": 1,
                    "n": n,
                    "seed": seed,
                    "size": list(size),
                    "exact_duplicates": n_exact,
                    "near_duplicates": n_near,
                },
                indent=2,
            )
            + "\n",
        )
    )
    return SynthCohort(
        root=root, metadata=root / METADATA_FILE, labels=root / LABELS_FILE, images=folder, truth=truth_table
    )
