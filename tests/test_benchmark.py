"""Benchmark evidence beside the authority gap (issue 20 item 3, DermoGPT spec section 7): a benchmark
file is validated rule by rule (one line: file, column, rule, row); every item is answered by option
likelihood through the scorer's shared-prefix pass (equal to one unpadded pass per option) into a
resumable cache; accuracy and its whole-cluster interval equal a plain numpy bootstrap on a hand-made
case; the fairness ratio is min/max group accuracy; the synthetic cohort's benchmark is the same bytes
for the same seed; and a synthetic lake holds `benchmark` and `transfer` with provenance on every row."""

from __future__ import annotations

import csv

import numpy as np
import pyarrow as pa
import pytest

from autheval.errors import RecordError
from autheval.estimation.benchmark import (
    RESULTS_SCHEMA,
    accuracy_table,
    benchmark_items,
    fairness_table,
    read_benchmark,
)
from autheval.estimation.provenance import PROVENANCE
from tests.conftest import run_cli

HEADER = ("item_id", "image_id", "question", "options", "answer", "axis", "task", "group")
GOOD = {
    "item_id": "q1",
    "image_id": "ISIC_1",
    "question": "Which?",
    "options": '["melanoma", "nevus"]',
    "answer": "nevus",
    "axis": "Diagnosis",
    "task": "dx",
    "group": "tone=light",
}


def write_rows(path, rows, header=HEADER):
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=header, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return path


# ---------------------------------------------------------------- the file


def test_a_good_file_reads_with_options_and_answer_index(tmp_path):
    rows = [
        GOOD,
        {**GOOD, "item_id": "q2", "options": "a | b | c", "answer": "C", "group": ""},
        {**GOOD, "item_id": "q3", "options": '["A", "B"]', "answer": "B"},
    ]
    table = read_benchmark(write_rows(tmp_path / "b.csv", rows))
    assert table.column("options").to_pylist() == [["melanoma", "nevus"], ["a", "b", "c"], ["A", "B"]]
    assert table.column("answer_index").to_pylist() == [1, 2, 1]  # text first, then a letter; "B" is option B's text
    assert table.column("group").to_pylist() == ["tone=light", None, "tone=light"]


def test_a_parquet_file_with_a_list_of_options_reads_the_same(tmp_path):
    import pyarrow.parquet as pq

    path = tmp_path / "b.parquet"
    pq.write_table(
        pa.table(
            {
                **{k: [v] for k, v in GOOD.items() if k != "options"},
                "options": pa.array([["melanoma", "nevus"]], pa.list_(pa.string())),
            }
        ),
        path,
    )
    table = read_benchmark(path)
    assert table.column("options").to_pylist() == [["melanoma", "nevus"]]
    assert table.column("answer_index").to_pylist() == [1]


BAD = [
    ({"item_id": ""}, "item_id", "must not be empty"),
    ({"image_id": ""}, "image_id", "needs an image_id"),
    ({"question": " "}, "question", "must not be empty"),
    ({"options": ""}, "options", "must not be empty"),
    ({"options": '["a", 3]'}, "options", "JSON list of strings"),
    ({"options": '["a", "b"'}, "options", "JSON list of strings"),
    ({"options": "only", "answer": "only"}, "options", "at least two options"),
    ({"options": "|".join(f"o{k}" for k in range(27)), "answer": "o1"}, "options", "at most 26"),
    ({"options": "a||b", "answer": "a"}, "options", "must not be empty"),
    ({"options": "a|a", "answer": "a"}, "options", "must be distinct"),
    ({"answer": ""}, "answer", "must not be empty"),
    ({"answer": "melanomas"}, "answer", "one of the item's options"),
    ({"answer": "C"}, "answer", "one of the item's options"),
    ({"axis": ""}, "axis", "must not be empty"),
    ({"task": ""}, "task", "must not be empty"),
    ({"group": "tone="}, "group", "both a grouping and a value"),
    ({"item_id": "q1 "}, "item_id", "whitespace"),
]


@pytest.mark.parametrize("change, column, rule", BAD, ids=[f"{c}-{r[:20]}" for _, c, r in BAD])
def test_each_rule_refuses_a_bad_row_in_one_line(tmp_path, change, column, rule):
    path = write_rows(tmp_path / "b.csv", [{**GOOD, "item_id": "q0"}, {**GOOD, **change}])
    with pytest.raises(RecordError) as err:
        read_benchmark(path)
    text = str(err.value)
    assert "\n" not in text and str(path) in text and f"column '{column}'" in text and rule in text, text
    assert "row 2" in text, text


def test_file_level_rules(tmp_path):
    with pytest.raises(RecordError, match="item_id.*duplicate"):
        read_benchmark(write_rows(tmp_path / "dup.csv", [GOOD, GOOD]))
    with pytest.raises(RecordError, match="column 'answer': required column is missing"):
        read_benchmark(write_rows(tmp_path / "no_answer.csv", [GOOD], [h for h in HEADER if h != "answer"]))
    with pytest.raises(RecordError, match="column 'image_id': required column is missing"):
        read_benchmark(write_rows(tmp_path / "no_image.csv", [GOOD], [h for h in HEADER if h != "image_id"]))
    with pytest.raises(RecordError, match="unknown column; did you mean 'question'"):
        read_benchmark(
            write_rows(
                tmp_path / "typo.csv",
                [{**GOOD, "questoin": "x"}],
                [*[h for h in HEADER if h != "question"], "questoin"],
            )
        )
    with pytest.raises(RecordError, match="no benchmark items"):
        read_benchmark(write_rows(tmp_path / "empty.csv", []))
    rows = [{**GOOD, "image_id": "", "image_path": "missing.jpg"}]
    with pytest.raises(RecordError, match=r"column 'image_path': no such image file \(row 1, item 'q1'"):
        read_benchmark(write_rows(tmp_path / "path.csv", rows, (*HEADER, "image_path")))


def test_an_image_id_the_lake_does_not_know_is_refused(tmp_path):
    items = read_benchmark(write_rows(tmp_path / "b.csv", [GOOD, {**GOOD, "item_id": "q2", "image_id": "ISIC_9"}]))
    images = pa.table({"image_id": ["ISIC_1"], "path": ["/x/ISIC_1.jpg"]})
    clusters = pa.table({"image_id": ["ISIC_1"], "cluster_id": ["cluster:a"]})
    with pytest.raises(RecordError, match=r"column 'image_id': unknown image id .*row 2, item 'q2', value 'ISIC_9'"):
        benchmark_items(items, images, clusters, "b.csv")
    placed = benchmark_items(items.slice(0, 1), images, clusters, "b.csv")
    assert placed.select(["image_path", "cluster_id", "cluster_source", "lake_group"]).to_pylist() == [
        {"image_path": "/x/ISIC_1.jpg", "cluster_id": "cluster:a", "cluster_source": "lake", "lake_group": None}
    ]
    images = images.append_column("sex", pa.array(["female"])).append_column("ita_category", pa.array(["tan"]))
    placed = benchmark_items(items.slice(0, 1), images, clusters, "b.csv")  # the lake's groupings, where recorded
    assert placed.column("lake_group").to_pylist() == ["images.sex=female;images.ita_category=tan"]


def test_demo_refuses_a_bad_benchmark_before_anything_runs(tmp_path):
    path = write_rows(tmp_path / "b.csv", [{**GOOD, "answer": "nope"}])
    result = run_cli(
        "demo", "--source", "synthetic", "--benchmark", str(path), "--lake", str(tmp_path / "lake"), "--no-models"
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "column 'answer'" in lines[0] and "row 1" in lines[0], result.stderr
    assert not (tmp_path / "lake").exists()
    result = run_cli("demo", "--benchmark", str(path), "--lake", str(tmp_path / "lake"))
    assert result.returncode == 2 and "--benchmark" in result.stderr  # the reference source has no images


# ---------------------------------------------------------------- accuracy, intervals, fairness


def hand_results() -> pa.Table:
    """Two mechanisms, 12 clusters of 1-4 items, two axes, three tasks; task 'rare' sits in two clusters of one tone,
    so some replicates draw none of its items (undefined, dropped)."""
    rows, rng = [], np.random.default_rng(3)
    sizes = [1, 2, 3, 4, 2, 1, 3, 2, 4, 1, 2, 3]
    for mechanism in ("m1", "m2"):
        item = 0
        for c, size in enumerate(sizes):
            for _ in range(size):
                task = "rare" if c in (4, 8) else ("t1" if item % 2 else "t2")
                rows.append(
                    {
                        "mechanism": mechanism,
                        "model": f"model-{mechanism}",
                        "model_revision": "r",
                        "item_id": f"i{item}",
                        "cluster_id": f"cluster:{c:02d}",
                        "axis": "A" if task == "t1" else "B",
                        "task": task,
                        "group": f"tone={'xy'[c % 2]}",
                        "lake_group": f"images.sex={'fm'[item % 2]}",
                        "input_sha256": "h",
                        "options": ["a", "b"],
                        "loglik": [0.0, 0.0],
                        "prob": [0.5, 0.5],
                        "choice": 0,
                        "answer_index": 0,
                        "correct": bool(rng.random() < (0.7 if mechanism == "m1" else 0.4)),
                    }
                )
                item += 1
    return pa.Table.from_pylist(rows, schema=RESULTS_SCHEMA)


def numpy_bootstrap(results: pa.Table, mechanism: str, keep, seed: int, reps: int):
    """The whole-cluster bootstrap written plainly: clusters in ascending id order, one
    default_rng(seed).integers(0, G, size=G) per replicate over every cluster of the benchmark, accuracy
    = correct / items of the drawn clusters, nanquantile (linear) at 2.5% and 97.5%."""
    rows = results.to_pylist()
    clusters = sorted({r["cluster_id"] for r in rows})
    n, k = np.zeros(len(clusters)), np.zeros(len(clusters))
    for r in rows:
        if r["mechanism"] == mechanism and keep(r):
            i = clusters.index(r["cluster_id"])
            n[i] += 1
            k[i] += r["correct"]
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(reps):
        draw = rng.integers(0, len(clusters), size=len(clusters))
        total = n[draw].sum()
        values.append(k[draw].sum() / total if total else np.nan)
    values = np.asarray(values)
    return k.sum() / n.sum(), *np.nanquantile(values, [0.025, 0.975]), int(np.isnan(values).sum())


def test_accuracy_and_interval_equal_a_plain_numpy_bootstrap():
    results = hand_results()
    seed, reps = 20260711, 400
    table = accuracy_table(results, reps, seed).to_pylist()
    scopes = {(r["mechanism"], r["scope"], r["axis"], r["task"]): r for r in table}
    assert len(scopes) == 2 * (1 + 2 + 3)
    cases = [
        ("all", None, None, lambda r: True),
        ("axis", "B", None, lambda r: r["axis"] == "B"),
        ("task", "B", "rare", lambda r: r["task"] == "rare"),
        ("task", "A", "t1", lambda r: r["task"] == "t1"),
    ]
    undefined = 0
    for mechanism in ("m1", "m2"):
        for scope, axis, task, keep in cases:
            row = scopes[(mechanism, scope, axis, task)]
            accuracy, lower, upper, n_undefined = numpy_bootstrap(results, mechanism, keep, seed, reps)
            assert row["accuracy"] == pytest.approx(accuracy, abs=1e-12)
            assert row["ci_lower"] == pytest.approx(lower, abs=1e-12) and row["ci_upper"] == pytest.approx(
                upper, abs=1e-12
            )
            assert row["reps_undefined"] == n_undefined and row["reps"] == reps
            undefined += n_undefined
    assert undefined > 0  # the rare task's undefined replicates were met and dropped
    everything = scopes[("m1", "all", None, None)]
    assert everything["n_items"] == 28 and everything["n_clusters"] == 12
    assert everything["n_correct"] == sum(r["correct"] for r in results.to_pylist() if r["mechanism"] == "m1")


def test_fairness_ratio_is_min_over_max_group_accuracy():
    results = hand_results()
    rows = results.to_pylist()
    fairness = {(r["mechanism"], r["task"], r["grouping"]): r for r in fairness_table(results).to_pylist()}
    for mechanism in ("m1", "m2"):
        for grouping, value_of in (("tone", lambda r: r["group"][5:]), ("images.sex", lambda r: r["lake_group"][11:])):
            groups = {}
            for r in rows:
                if r["mechanism"] == mechanism:
                    groups.setdefault(value_of(r), []).append(r["correct"])
            accuracy = {g: sum(v) / len(v) for g, v in groups.items()}
            row = fairness[(mechanism, None, grouping)]
            assert row["n_groups"] == 2
            assert row["min_accuracy"] == pytest.approx(min(accuracy.values()))
            assert row["fairness_ratio"] == pytest.approx(min(accuracy.values()) / max(accuracy.values()))
            assert row["worst_group"] == min(accuracy, key=lambda g: (accuracy[g], g))
    assert (("m1", "t1", "tone") in fairness) and (("m1", "rare", "tone") not in fairness)  # 'rare': one tone only


# ---------------------------------------------------------------- the synthetic benchmark


def test_synthetic_benchmark_same_bytes_for_the_same_seed(tmp_path):
    from autheval.raw.synth import synth_cohort

    first = synth_cohort(120, tmp_path / "a", seed=5, size=(48, 36))
    second = synth_cohort(120, tmp_path / "b", seed=5, size=(48, 36))
    other = synth_cohort(120, tmp_path / "c", seed=6, size=(48, 36))
    data = (first.root / "benchmark.csv").read_bytes()
    assert data == (second.root / "benchmark.csv").read_bytes()
    assert data != (other.root / "benchmark.csv").read_bytes()
    items = read_benchmark(first.root / "benchmark.csv")  # the user's format: it passes every rule
    assert set(items.column("task").to_pylist()) == {
        "diagnosis_4way_mcq",
        "diagnosis_8way_mcq",
        "risk_level_mcq",
        "border_mcq",
        "shape_mcq",
        "hair_mcq",
    }
    sizes = {
        t: {len(o) for o, tt in zip(items.column("options").to_pylist(), items.column("task").to_pylist()) if tt == t}
        for t in ("diagnosis_4way_mcq", "diagnosis_8way_mcq", "risk_level_mcq")
    }
    assert sizes == {"diagnosis_4way_mcq": {4}, "diagnosis_8way_mcq": {8}, "risk_level_mcq": {4}}
    labels = {r["image"]: r for r in csv.DictReader(open(first.labels))}
    for row in items.to_pylist():  # the diagnosis items' answers are the planted diagnoses
        if row["task"].startswith("diagnosis"):
            from autheval.raw.synth_benchmark import DIAGNOSIS_NAMES

            truth = next(code for code, name in DIAGNOSIS_NAMES.items() if labels[row["image_id"]][code] == "1.0")
            assert row["answer"] == DIAGNOSIS_NAMES[truth]


def test_synthetic_benchmark_takes_whole_lesions_and_planted_attributes():
    from autheval.raw.synth_benchmark import benchmark_items as synth_items

    images = [
        {
            "image": f"I{k}",
            "lesion": k // 3,
            "diagnosis": "MEL",
            "border": 0.3 if k % 2 else 0.1,
            "ratio": 0.6,
            "skin_tone": "tan",
            "hairs": k % 2,
        }
        for k in range(30)
    ]
    rows = synth_items(images, seed=1, at_least=7)
    chosen = {r["image_id"] for r in rows}
    lesions = {int(i[1:]) // 3 for i in chosen}
    assert len(chosen) == 9 and chosen == {f"I{k}" for k in range(30) if k // 3 in lesions}  # 3 whole lesions
    by_item = {r["item_id"]: r for r in rows}
    for image in chosen:
        k = int(image[1:])
        assert by_item[f"{image}:border_mcq"]["answer"] == ("irregular" if k % 2 else "regular")
        assert by_item[f"{image}:hair_mcq"]["answer"] == ("yes" if k % 2 else "no")
        assert by_item[f"{image}:shape_mcq"]["answer"] == "elongated"
        assert by_item[f"{image}:risk_level_mcq"]["answer"] == "high"
        assert by_item[f"{image}:border_mcq"]["group"] == "ita_category=tan"


# ---------------------------------------------------------------- the scorer path


@pytest.fixture(scope="module")
def tiny_items(tmp_path_factory):
    pytest.importorskip("transformers")
    from PIL import Image

    from models.tiny import ensure_tiny_model

    root = tmp_path_factory.mktemp("bench-model")
    model_dir = ensure_tiny_model("tiny-gemma3", root / "models")
    rng = np.random.default_rng(0)
    paths = []
    for k in range(3):
        path = root / f"img{k}.png"
        Image.fromarray(rng.integers(0, 255, (40, 40, 3), dtype=np.uint8)).save(path)
        paths.append(str(path))
    items = pa.table(
        {
            "item_id": ["a", "b", "c", "d", "e"],
            "image_path": [paths[0], paths[1], paths[2], paths[0], paths[1]],
            "question": [
                "Which diagnosis fits best?",
                "Is the border regular or irregular?",
                "What is the risk level?",
                "Is the lesion round or elongated? Answer with one word only, please.",
                "Are hairs visible?",
            ],
            "options": [
                ["melanoma", "nevus", "basal cell carcinoma", "benign keratosis"],
                ["regular", "irregular"],
                ["very low", "low", "moderate", "high"],
                ["round", "elongated"],
                ["no", "yes"],
            ],
        }
    )
    return model_dir, items, root


def naive_option_loglik(model, processor, image_path, prompt, options):
    """One unpadded forward pass per option over prompt + option: the oracle."""
    import torch

    from models.benchmark import option_continuation
    from models.scorer_batches import encode_prompts, open_rgb
    from models.scorer_passes import model_inputs

    encoded = model_inputs(model, encode_prompts(processor, [open_rgb(image_path)], [prompt]))
    length = encoded["input_ids"].shape[1]
    out = []
    for option in options:
        ids = processor.tokenizer(option_continuation(option), add_special_tokens=False)["input_ids"]
        cont = torch.tensor([ids])
        forward = {"input_ids": torch.cat([encoded["input_ids"], cont], dim=1)}
        forward["attention_mask"] = torch.ones_like(forward["input_ids"])
        if "token_type_ids" in encoded:
            forward["token_type_ids"] = torch.cat([encoded["token_type_ids"], torch.zeros_like(cont)], dim=1)
        forward["pixel_values"] = encoded["pixel_values"]
        with torch.inference_mode():
            logits = model(**forward, use_cache=False).logits[0, length - 1 : length - 1 + len(ids)].double()
        out.append(float(torch.log_softmax(logits, dim=-1)[torch.arange(len(ids)), cont[0]].mean()))
    return out


def test_option_likelihoods_equal_one_pass_per_option_and_the_cache_resumes(tiny_items):
    from models.benchmark import benchmark_prompt, read_scores, score_benchmark
    from models.scorer import ScorerConfig, load_model

    model_dir, items, root = tiny_items
    config = ScorerConfig(model_dir=str(model_dir), batch_size=2, chunk_images=1, device="cpu")
    calls = []

    def stop_after_first(n):
        calls.append(n)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        score_benchmark(items, config, root / "cache", on_batch=stop_after_first)
    scores, meta = score_benchmark(items, config, root / "cache")
    assert meta["items_from_cache"] == calls[0] == 2 and meta["items_scored"] == 3  # the first batch was kept
    model, processor, _, _ = load_model(str(model_dir), device="cpu")
    for row, item in zip(scores.to_pylist(), items.to_pylist()):
        expected = naive_option_loglik(
            model, processor, item["image_path"], benchmark_prompt(item["question"], item["options"]), item["options"]
        )
        assert row["item_id"] == item["item_id"] and row["options"] == item["options"]
        assert np.allclose(row["loglik"], expected, atol=1e-5), (row["loglik"], expected)
        assert row["choice"] == int(np.argmax(row["loglik"])) and abs(sum(row["prob"]) - 1) < 1e-12
    again, meta = score_benchmark(items, config, root / "cache")
    assert meta["items_scored"] == 0 and again.equals(scores)
    edited = items.set_column(2, "question", pa.array(["Which one?", *items.column("question").to_pylist()[1:]]))
    _, meta = score_benchmark(edited, config, root / "cache")
    assert meta["items_scored"] == 1  # an edited question is scored again, nothing else
    directory = meta["cache_dir"]
    assert read_scores(directory).num_rows == 6


# ---------------------------------------------------------------- the lake


@pytest.fixture(scope="module")
def benchmark_lake(tmp_path_factory):
    pytest.importorskip("transformers")
    from assets.resources import ModelsResource, SourceResource
    from autheval.raw.synth import synth_cohort
    from dagster_project.demo import COHORT_STAGES, run_stages
    from warehouse.lake import Lake

    root = tmp_path_factory.mktemp("benchmark-lake")
    cohort = synth_cohort(90, root / "cohort", seed=11, size=(64, 48))
    source = SourceResource(kind="synthetic", input_dir=str(cohort.root), workers=1, reps=200, min_group_clusters=8)
    models = ModelsResource(enabled=True, batch_size=16, device="cpu")
    checks = run_stages(root / "lake", COHORT_STAGES, out=lambda line: None, source=source, models=models)
    return Lake(root / "lake"), cohort, checks


def test_benchmark_and_transfer_tables_on_the_synthetic_cohort(benchmark_lake):
    from warehouse.catalog import query

    lake, cohort, checks = benchmark_lake
    assert all(checks.values()), checks
    n_items = sum(1 for _ in open(cohort.root / "benchmark.csv")) - 1
    rows = {(r["mechanism"], r["scope"], r["axis"], r["task"]): r for r in lake.read("benchmark").to_pylist()}
    for mechanism in ("VLM readout", "CCT single", "CCT cc"):  # the scorer's VLM answers for all three
        row = rows[(mechanism, "all", None, None)]
        assert row["available"] and row["n_items"] == n_items and row["model"] == "tiny-gemma3"
        assert row["ci_lower"] <= row["accuracy"] <= row["ci_upper"]
        assert (mechanism, "task", "Diagnosis", "diagnosis_8way_mcq") in rows
    assert rows[("VLM readout", "all", None, None)]["accuracy"] == rows[("CCT cc", "all", None, None)]["accuracy"]
    for mechanism, why in (("CLIP probe", "vision tower"), ("sharp_calibrated", "given as a file")):
        row = rows[(mechanism, "all", None, None)]
        assert not row["available"] and row["accuracy"] is None and why in row["reason"]
    # items of one lesion are one cluster: the lake's clusters, fewer than the images
    scores = lake.read("benchmark_scores")
    assert scores.num_rows == 3 * n_items
    clusters = dict(zip(*(lake.read("clusters").column(c).to_pylist() for c in ("image_id", "cluster_id"))))
    items = {r["item_id"]: r["image_id"] for r in csv.DictReader(open(cohort.root / "benchmark.csv"))}
    assert all(clusters[items[r["item_id"]]] == r["cluster_id"] for r in scores.to_pylist())
    groupings = {r["grouping"] for r in lake.read("benchmark_fairness").to_pylist()}
    assert {"ita_category", "images.ita_category", "images.sex"} <= groupings  # planted beside estimated
    # transfer: one query answers it, per mechanism and regime
    transfer = query(
        lake,
        'select analysis, mechanism, benchmark_accuracy, "J", "J_auth", intervention_rate, '
        '"Delta_authority", gap_excludes_zero from transfer',
    ).to_pylist()
    estimates = {
        (r["analysis"], r["metric"]): r["estimate"]
        for r in query(
            lake, "select analysis, metric, estimate from estimates where unit = 'image_weighted'"
        ).to_pylist()
    }
    assert len(transfer) == len({a for a, _ in estimates}) == 7 * 3
    for row in transfer:
        assert row["J"] == estimates[(row["analysis"], "J")] and row["J_auth"] == estimates[(row["analysis"], "J_auth")]
        assert row["Delta_authority"] == estimates[(row["analysis"], "Delta_authority")]
        assert row["intervention_rate"] == estimates[(row["analysis"], "intervention_rate")]
        expected = rows[(row["mechanism"], "all", None, None)]["accuracy"]
        assert row["benchmark_accuracy"] == expected
    for name in ("benchmark_scores", "benchmark", "benchmark_fairness", "transfer"):
        table = lake.read(name)
        assert table.num_rows and set(PROVENANCE) <= set(table.column_names), name
        assert all(v is not None for v in table.column("data_sha256").to_pylist()), name
        assert set(table.column("software_version").to_pylist()) == {f"autheval {__import__('autheval').__version__}"}


def test_a_benchmark_naming_an_image_the_lake_lacks_fails_its_asset_in_one_line(benchmark_lake, tmp_path):
    from dagster import AssetSelection, materialize

    from assets.resources import ModelsResource, SourceResource
    from dagster_project.definitions import build_definitions, project_instance, study_assets
    from dagster_project.demo import QUIET
    from warehouse.lake import Lake

    lake, cohort, _ = benchmark_lake
    bad = write_rows(tmp_path / "bad.csv", [{**GOOD, "image_id": "ISIC_nowhere"}])
    before = lake.read("benchmark")
    source = SourceResource(kind="synthetic", input_dir=str(cohort.root), workers=1, reps=200, benchmark=str(bad))
    defs = build_definitions(str(lake.root), source, ModelsResource(enabled=True, batch_size=16, device="cpu"))
    result = materialize(
        study_assets(),
        selection=AssetSelection.assets("benchmark_scores", "benchmark", "benchmark_fairness"),
        resources=defs.resources,
        instance=project_instance(),
        raise_on_error=False,
        run_config=QUIET,
    )
    assert not result.success
    errors = [e.event_specific_data.error.to_string() for e in result.all_events if e.is_step_failure]
    assert any(f"{bad}: column 'image_id': unknown image id" in text and "'ISIC_nowhere'" in text for text in errors)
    assert Lake(lake.root).read("benchmark").equals(before)  # the failed run committed nothing


def test_each_model_mechanism_is_answered_by_the_model_it_proposes_with(tmp_path):
    """The readout and CCT arms by the scorer's VLM, a table naming an adapter_dir (fine-tune, GRPO) by the
    scorer with that adapter; a probe and an empty table by none."""
    from assets.benchmark import mechanism_models
    from assets.resources import ModelsResource

    def table(mechanisms, metadata=None):
        return pa.table({"mechanism": mechanisms}).replace_schema_metadata(metadata)

    tables = {
        "readout": table(["VLM readout"]),
        "probe": table(["CLIP probe"]),
        "cct_arms": table(["CCT single", "CCT cc"]),
        "finetune": table([]),
        "grpo": table(["VLM GRPO (MAVIC)"], {"adapter_dir": str(tmp_path / "sft-grpo")}),
    }

    class Store:
        root = tmp_path

        def has_table(self, name):
            return name in tables

        def read(self, name):
            return tables[name]

    found = mechanism_models(Store(), ModelsResource(enabled=True, scorer_dir=str(tmp_path / "vlm"), batch_size=4))
    assert set(found) == {"VLM readout", "CCT single", "CCT cc", "VLM GRPO (MAVIC)"}
    assert {(c.model_dir, c.adapter_dir) for m, c in found.items() if m != "VLM GRPO (MAVIC)"} == {
        (str(tmp_path / "vlm"), None)
    }
    assert (found["VLM GRPO (MAVIC)"].model_dir, found["VLM GRPO (MAVIC)"].adapter_dir) == (
        str(tmp_path / "vlm"),
        str(tmp_path / "sft-grpo"),
    )
