"""`autheval demo --source synthetic`: results alone on stdout, and a default cohort whose evaluated
split is large enough for the intervals, subgroups and fairness rows it prints (issue 16, items 8-9)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import ROOT


def test_a_synthetic_demo_with_models_writes_only_results_to_stdout(tmp_path):
    """accelerate imports deepspeed in every save_pretrained; left to guess its accelerator, deepspeed
    logs a warning to stdout. The demo names the accelerator first, so stdout starts with the results."""
    env = {k: v for k, v in os.environ.items() if k != "DS_ACCELERATOR"}  # as a user's shell has it
    env["HF_HUB_OFFLINE"] = "1"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "autheval",
            "demo",
            "--source",
            "synthetic",
            "--n",
            "40",
            "--reps",
            "200",
            "--lake",
            str(tmp_path / "lake"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Model mechanisms on" in result.stderr  # the model path ran (and imported deepspeed)
    lines = result.stdout.splitlines()
    assert lines[0].startswith("asset checks: "), lines[:3]
    assert not any("WARNING" in line or "DeepSpeed" in line or "accelerator" in line for line in lines), [
        line for line in lines if "WARNING" in line
    ]


def test_the_fine_tune_names_the_accelerator_and_moves_deepspeed_logs_to_stderr():
    """The fine-tune's own path: the accelerator named before deepspeed is imported (a value already set
    is kept), and DeepSpeed's logger, which writes to stdout, moved to stderr after the import."""
    code = (
        "import logging, os\n"
        "from models.finetune import name_deepspeed_accelerator, deepspeed_logs_to_stderr\n"
        "os.environ['DS_ACCELERATOR'] = 'cpu'; name_deepspeed_accelerator('cuda')\n"
        "assert os.environ['DS_ACCELERATOR'] == 'cpu'\n"
        "del os.environ['DS_ACCELERATOR']; name_deepspeed_accelerator('cpu')\n"
        "import deepspeed\n"
        "deepspeed_logs_to_stderr()\n"
        "logging.getLogger('DeepSpeed').warning('a deepspeed warning')\n"
        "print(os.environ['DS_ACCELERATOR'])\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "DS_ACCELERATOR"}
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout == "cpu\n"
    assert "a deepspeed warning" in result.stderr


def test_the_default_synthetic_cohort_gives_the_evaluated_split_enough_clusters(tmp_path):
    """The demo evaluates the test split only (the gate proxy, readout and probe are fit on train and
    val): its default cohort must put at least 300 clusters there, with both sexes above the subgroups'
    default minimum (so fairness has rows), and no exact-hash group may join two planted lesions (the
    synthetic lesions are simple enough that, unguarded, a few thousand of them collide)."""
    import collections

    from autheval.cli.main import build_parser
    from autheval.raw.pipeline import run_raw_path
    from autheval.raw.synth import synth_cohort

    args = build_parser("demo").parse_args(["demo", "--source", "synthetic"])
    cohort = synth_cohort(args.n, tmp_path / "cohort", size=tuple(args.size))
    tables = run_raw_path(cohort.root, workers=1, progress=False)
    clusters = tables["clusters"].to_pylist()
    test = {r["cluster_id"] for r in clusters if r["split"] == "test"}
    assert len(test) >= 300, len(test)
    sex = {r["image_id"]: r["sex"] for r in tables["images"].to_pylist()}
    by_sex = collections.Counter(
        s
        for s, _ in {
            (sex[r["image_id"]], r["cluster_id"]) for r in clusters if r["split"] == "test" and sex[r["image_id"]]
        }
    )
    assert min(by_sex.values()) >= args.min_group_clusters and len(by_sex) == 2, by_sex

    truth = {r["image"]: r for r in cohort.truth.to_pylist()}

    def lesion(image):  # the planted lesion an image shows
        row = truth[image]
        return lesion(row["source_image"]) if row["source_image"] else row["lesion_id"] or image

    groups = collections.defaultdict(set)
    for r in clusters:
        if r["duplicate_group"]:
            groups[r["duplicate_group"]].add(lesion(r["image_id"]))
    assert groups and all(len(lesions) == 1 for lesions in groups.values()), [
        sorted(v) for v in groups.values() if len(v) > 1
    ]


def test_the_demo_checks_its_image_size_before_anything_is_written(tmp_path):
    from tests.conftest import run_cli

    result = run_cli("demo", "--source", "synthetic", "--size", "16", "16", "--lake", str(tmp_path / "lake"))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("autheval: error: --size: each side must be from 32")
    assert not (tmp_path / "lake").exists()
