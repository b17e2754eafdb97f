"""A learnable tiny task for the SFT -> GRPO path (issue 32): images of the synthetic cohort
(autheval/raw/synth.py, whose lesion colours encode the diagnosis) with DermoGPT's completion as the
target: the Derm7pt attributes of the diagnosis in `<morph>` JSON, then the diagnosis in
`<final_diagnosis>`. The answer depends on the image only (the instruction's metadata carry no
diagnosis), MAVIC (models/mavic.py) scores it, and a tiny model learns it on CPU in minutes.

The attributes are a declared, synthetic map from the planted diagnosis (`PLANTED_MORPHOLOGY`: each
diagnosis's textbook Derm7pt criteria, not labels of real images), so the image plants them through its
colour as it plants the diagnosis.

A task is a folder: `task.parquet` (one row per image: public metadata, `reference_diagnosis`,
`reference_attributes` as JSON, `modality`, the instruction `prompt`, the target `completion`, its
`lesion_id` and `split`, train or held_out, whole lesions on one side) and the images, paths relative to
the folder. `build_task` makes one from a synthetic cohort (it needs the project's raw path: DuckDB,
scikit-image); `read_task` needs only pyarrow, so a prepared folder trains on a bare GPU machine."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from models.grpo import DERMOSCOPIC, DIAGNOSIS_CODES, grpo_prompt

TASK_FILE = "task.parquet"
IMAGES = "images"
# Declared, synthetic: each diagnosis's textbook Derm7pt criteria (states of autheval/data/mavic/schemas.yaml);
# an attribute left out is absent.
PLANTED_MORPHOLOGY: dict[str, dict[str, str]] = {
    "MEL": {"pigment_network": "atypical", "streaks": "irregular", "blue_whitish_veil": "present"},
    "NV": {"pigment_network": "typical", "dots_and_globules": "regular"},
    "BCC": {"vascular_structures": "arborizing"},
    "BKL": {"pigmentation": "localized_regular", "regression_structures": "blue_areas"},
    "AK": {"pigmentation": "diffuse_irregular", "vascular_structures": "linear_irregular"},
    "SCC": {"vascular_structures": "dotted", "regression_structures": "white_areas"},
    "VASC": {"vascular_structures": "hairpin"},
    "DF": {"pigment_network": "typical", "regression_structures": "white_areas"},
}
TASK_COLUMNS = (
    "image_id",
    "image_path",
    "age",
    "sex",
    "anatomic_site",
    "lesion_id",
    "reference_diagnosis",
    "reference_attributes",
    "modality",
    "prompt",
    "completion",
    "split",
)


def target_completion(diagnosis: str) -> str:
    """The completion a diagnosis's image should get: its planted attributes, then the diagnosis."""
    attributes = json.dumps(PLANTED_MORPHOLOGY[diagnosis])
    return f"<morph>{attributes}</morph>\n<final_diagnosis>{diagnosis}</final_diagnosis>"


def tokenizer_texts() -> list[str]:
    """What the -morph tiny tokenizers learn their merges from (models/tiny.py): the instruction with
    typical metadata and every target completion."""
    prompts = [grpo_prompt(55.0, "female", "anterior torso"), grpo_prompt(None, "male", None)]
    return prompts + [target_completion(d) for d in DIAGNOSIS_CODES]


def planted_rows(examples: pa.Table, source: str = "morphology task") -> pa.Table:
    """A lake's training items (sql/proposals/grpo_examples.sql: public fields, reference_diagnosis,
    modality) as rows of this task: the diagnosis's planted attributes as `reference_attributes`, the
    instruction `prompt` and the target `completion`, so the lake's fine-tune and GRPO assets train on
    what the curves train on. A diagnosis with no planted attributes is one line naming the column."""
    from autheval.errors import RecordError

    diagnoses = examples.column("reference_diagnosis").to_pylist()
    for image_id, diagnosis in zip(examples.column("image_id").to_pylist(), diagnoses):
        if diagnosis not in PLANTED_MORPHOLOGY:
            planted = ", ".join(PLANTED_MORPHOLOGY)
            rule = f"{str(diagnosis)[:40]!r} has no planted attributes (one of {planted})"
            raise RecordError(source, "reference_diagnosis", rule, str(image_id)[:80])
    rows = examples.to_pylist()
    for row in rows:
        row["reference_attributes"] = json.dumps(PLANTED_MORPHOLOGY[row["reference_diagnosis"]])
        row["prompt"] = grpo_prompt(row.get("age"), row.get("sex"), row.get("anatomic_site"))
        row["completion"] = target_completion(row["reference_diagnosis"])
    if not rows:  # the same columns, none of them filled
        return examples.append_column("prompt", pa.array([], pa.string())).append_column(
            "completion", pa.array([], pa.string())
        )
    return pa.Table.from_pylist(rows)


def _cohort_rows(cohort_dir: Path) -> list[dict]:
    """The images of a synthetic cohort folder with their metadata and planted diagnosis."""
    import pyarrow.csv as pacsv

    from autheval.raw.ingest import IMAGE_FOLDER, LABELS_FILE, METADATA_FILE

    metadata = pacsv.read_csv(cohort_dir / METADATA_FILE).to_pylist()
    labels = {r["image"]: r for r in pacsv.read_csv(cohort_dir / LABELS_FILE).to_pylist()}
    rows = []
    for meta in metadata:
        label = labels[meta["image"]]
        rows.append(
            {
                "image_id": meta["image"],
                "source": cohort_dir / IMAGE_FOLDER / f"{meta['image']}.jpg",
                "age": meta["age_approx"],
                "sex": meta["sex"],
                "anatomic_site": meta["anatom_site_general"],
                "lesion_id": meta["lesion_id"] or meta["image"],
                "diagnosis": next(code for code in DIAGNOSIS_CODES if label[code] == 1.0),
            }
        )
    return rows


def build_task(out_dir: str | Path, n: int = 240, seed: int = 3, held_out: float = 0.25) -> Path:
    """A task folder from a synthetic cohort of `n` images (64 x 48 pixels, no duplicates), a
    `held_out` share of its lesions (by a seeded permutation) kept out of training. Same arguments, same
    rows."""
    from autheval.raw.synth import synth_cohort

    out = Path(out_dir)
    if out.exists():
        shutil.rmtree(out)
    cohort = synth_cohort(n, out / "cohort", seed=seed, size=(64, 48), exact_fraction=0.0, near_fraction=0.0)
    (out / IMAGES).mkdir()
    source = _cohort_rows(cohort.root)
    lesions = sorted({r["lesion_id"] for r in source})
    order = np.random.default_rng(seed).permutation(len(lesions))
    kept_out = {lesions[i] for i in order[: max(1, int(round(held_out * len(lesions))))]}
    rows = []
    for r in source:
        image = Path(IMAGES) / f"{r['image_id']}.jpg"
        shutil.copyfile(r["source"], out / image)
        rows.append(
            {
                "image_id": r["image_id"],
                "image_path": str(image),
                "age": r["age"],
                "sex": r["sex"],
                "anatomic_site": r["anatomic_site"],
                "lesion_id": r["lesion_id"],
                "reference_diagnosis": r["diagnosis"],
                "reference_attributes": json.dumps(PLANTED_MORPHOLOGY[r["diagnosis"]]),
                "modality": DERMOSCOPIC,
                "prompt": grpo_prompt(r["age"], r["sex"], r["anatomic_site"]),
                "completion": target_completion(r["diagnosis"]),
                "split": "held_out" if r["lesion_id"] in kept_out else "train",
            }
        )
    shutil.rmtree(cohort.root)
    pq.write_table(pa.Table.from_pylist(rows).select(list(TASK_COLUMNS)), out / TASK_FILE)
    return out


def read_task(task_dir: str | Path) -> tuple[pa.Table, pa.Table]:
    """(train, held_out) rows of a task folder, image paths made absolute."""
    folder = Path(task_dir).resolve()
    table = pq.read_table(folder / TASK_FILE)
    paths = [str(folder / p) for p in table.column("image_path").to_pylist()]
    table = table.set_column(table.schema.get_field_index("image_path"), "image_path", pa.array(paths))
    split = np.array(table.column("split").to_pylist())
    return table.filter(pa.array(split == "train")), table.filter(pa.array(split == "held_out"))
