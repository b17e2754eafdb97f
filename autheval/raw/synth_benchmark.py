"""A small closed-ended benchmark for a synthetic cohort (`benchmark.csv` beside the cohort files), so
that `autheval demo --source synthetic` shows benchmark evidence beside the authority gap (DermoGPT
spec section 7): per image of a sample of lesions, a diagnosis 4-way and 8-way multiple choice, a
risk-level question and three attribute questions whose answers are the features the generator
planted (border irregularity, elongation, hairs drawn on the view).

The sample takes whole lesions (every view and duplicate of a lesion drawn), so items of one lesion
fall in one cluster of the lake and the benchmark's whole-cluster bootstrap has clusters of several
images to keep together. The file is the benchmark format a user brings (autheval/estimation/benchmark.py):
item_id, image_id, question, options (a JSON list), answer (an option's text), axis, task, group
("grouping=value" pairs joined by ";"; here the planted skin tone's ITA category, beside which the
benchmark puts the lake's own groupings of the image: its recorded sex and site, its estimated ITA
category). A pure function of the cohort and the seed: the same seed gives the same bytes.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np

from autheval.raw.ingest import RISK
from warehouse.atomic import atomic_write_text

BENCHMARK_FILE = "benchmark.csv"
BENCHMARK_COLUMNS = ("item_id", "image_id", "question", "options", "answer", "axis", "task", "group")
BENCHMARK_IMAGES = 40  # at least this many images (whole lesions) carry items: about 240 items
DIAGNOSIS_NAMES = {
    "NV": "melanocytic nevus",
    "MEL": "melanoma",
    "BCC": "basal cell carcinoma",
    "BKL": "benign keratosis",
    "AK": "actinic keratosis",
    "SCC": "squamous cell carcinoma",
    "VASC": "vascular lesion",
    "DF": "dermatofibroma",
}
RISK_OPTIONS = {"very_low": "very low", "low": "low", "moderate": "moderate", "high": "high"}
# The planted features' cut points: the harmonic amplitudes sum to 0.185 on average (uniform draws up to
# 0.14 / sqrt(k), k = 2..6), so about half of the lesions are irregular; an aspect ratio below 0.75
# (drawn from 0.55..1) is elongated.
IRREGULAR_BORDER, ELONGATED_RATIO = 0.185, 0.75


def benchmark_image(name: str, records: list[dict], lesions: list, index: int) -> dict:
    """What the benchmark needs of one written image of autheval/raw/synth.py: its lesion, diagnosis,
    the lesion's planted geometry and skin tone (its ITA category, autheval/raw/synth.py), and the
    hairs of the view it shows (a duplicate shows its source's view)."""
    record = records[index]
    view = record["view"] if record["view"] is not None else records[record["source"]]["view"]
    params, _ = lesions[record["lesion"]]
    return {
        "image": name,
        "lesion": record["lesion"],
        "diagnosis": record["meta"]["diagnosis"],
        "border": float(sum(amp for _, amp, _ in params["harmonics"])),
        "ratio": float(params["ratio"]),
        "skin_tone": params.get("skin_tone"),
        "hairs": int(view["hairs"]),
    }


def _sample(images: list[dict], rng: np.random.Generator, at_least: int) -> list[dict]:
    """Whole lesions in a random order until at least `at_least` images (all of them if fewer)."""
    by_lesion: dict[int, list[dict]] = {}
    for image in images:
        by_lesion.setdefault(image["lesion"], []).append(image)
    lesions = sorted(by_lesion)
    chosen: list[dict] = []
    for k in rng.permutation(len(lesions)):
        if len(chosen) >= at_least:
            break
        chosen.extend(by_lesion[lesions[int(k)]])
    return chosen


def benchmark_items(images: list[dict], seed: int, at_least: int = BENCHMARK_IMAGES) -> list[dict]:
    """The benchmark's rows (BENCHMARK_COLUMNS), sorted by item_id."""
    rng = np.random.default_rng([seed, 104729])  # its own stream: the cohort's bytes do not depend on it
    codes = sorted(DIAGNOSIS_NAMES)
    rows = []
    for image in _sample(images, rng, at_least):
        truth = image["diagnosis"]
        group = f"ita_category={image['skin_tone']}" if image["skin_tone"] else ""
        others = [c for c in codes if c != truth]
        four = [truth, *(others[int(k)] for k in rng.choice(len(others), 3, replace=False))]
        questions = [
            (
                "Diagnosis",
                "diagnosis_4way_mcq",
                "Which diagnosis fits this dermoscopy image best?",
                [DIAGNOSIS_NAMES[c] for c in (four[int(k)] for k in rng.permutation(4))],
                DIAGNOSIS_NAMES[truth],
            ),
            (
                "Diagnosis",
                "diagnosis_8way_mcq",
                "Which of these eight diagnoses fits this dermoscopy image best?",
                [DIAGNOSIS_NAMES[codes[int(k)]] for k in rng.permutation(len(codes))],
                DIAGNOSIS_NAMES[truth],
            ),
            (
                "Diagnosis",
                "risk_level_mcq",
                "What is the visual risk level of this lesion?",
                list(RISK_OPTIONS.values()),
                RISK_OPTIONS[RISK[truth]],
            ),
            (
                "Morphology",
                "border_mcq",
                "Is the border of this lesion regular or irregular?",
                ["regular", "irregular"],
                "irregular" if image["border"] > IRREGULAR_BORDER else "regular",
            ),
            (
                "Morphology",
                "shape_mcq",
                "Is this lesion round or elongated?",
                ["round", "elongated"],
                "elongated" if image["ratio"] < ELONGATED_RATIO else "round",
            ),
            (
                "Morphology",
                "hair_mcq",
                "Are hairs visible in this image?",
                ["no", "yes"],
                "yes" if image["hairs"] > 0 else "no",
            ),
        ]
        for axis, task, question, options, answer in questions:
            rows.append(
                {
                    "item_id": f"{image['image']}:{task}",
                    "image_id": image["image"],
                    "question": question,
                    "options": json.dumps(options),
                    "answer": answer,
                    "axis": axis,
                    "task": task,
                    "group": group,
                }
            )
    return sorted(rows, key=lambda r: r["item_id"])


def write_benchmark(root: Path, images: list[dict], seed: int, at_least: int = BENCHMARK_IMAGES) -> Path:
    """Write `<root>/benchmark.csv` (atomic) for the cohort's images (`benchmark_image` rows)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=BENCHMARK_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(benchmark_items(images, seed, at_least))
    return atomic_write_text(Path(root) / BENCHMARK_FILE, buffer.getvalue())
