"""Hostile input on the model and engine paths (issue 27, items 12, 14, 15, 22, 23, 24): images of every
mode and colour for the skin-tone estimate, a zip's decoys and a 0-byte image, the selections' row order,
huge prompts and non-images in a benchmark, broken model folders, the scorer's config and its shared
cache, and --spark-master values. Each is one line naming the flag, file or column, before any work."""

from __future__ import annotations

import csv
import io
import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from PIL import Image

from autheval.errors import RecordError
from tests.conftest import ROOT, reference_file, run_cli

SKIN = (200, 150, 120)  # an intermediate skin tone (ITA about 35 degrees)


def one_error_line(proc: subprocess.CompletedProcess, *words: str, code: int = 2) -> str:
    assert proc.returncode == code, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("autheval: error: "), proc.stderr[-3000:]
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


# ------------------------------------------------------------------ item 12: the skin-tone estimate


def _save(image: Image.Image, path: Path, fmt: str = "PNG") -> Path:
    image.save(path, fmt)
    return path


def _png16_rgb(path: Path, rgb16: tuple[int, int, int], size: int = 16) -> Path:
    """A 16-bit-per-channel RGB PNG written by hand (Pillow writes none)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    row = b"\0" + struct.pack(">HHH", *rgb16) * size
    header = struct.pack(">IIBBBBB", size, size, 16, 2, 0, 0, 0)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(row * size)) + chunk(b"IEND", b"")
    )
    return path


def _tones(paths: dict[str, Path]) -> dict[str, dict]:
    from autheval.raw.skin_tone import skin_tones

    table = skin_tones(pa.table({"image_id": list(paths), "path": [str(p) for p in paths.values()]}), workers=1)
    return {r["image_id"]: r for r in table.to_pylist()}


def test_images_without_colour_have_no_skin_tone(tmp_path):
    """An all-black image was `dark` and a uniform grey `very_light` (arctan2 of a neutral pixel is +-90
    degrees): no colour, no ITA. Also a grayscale image, a 1x1 grey, a 16-bit grey and a transparent one."""
    paths = {
        "black": _save(Image.new("RGB", (40, 30), (0, 0, 0)), tmp_path / "black.png"),
        "grey": _save(Image.new("RGB", (40, 30), (128, 128, 128)), tmp_path / "grey.jpg", "JPEG"),
        "light_grey": _save(Image.new("RGB", (40, 30), (230, 230, 230)), tmp_path / "light.png"),
        "grayscale": _save(Image.new("L", (40, 30), 90), tmp_path / "gray.png"),
        "one_pixel": _save(Image.new("RGB", (1, 1), (60, 60, 60)), tmp_path / "one.png"),
        "grey16": _save(Image.fromarray(np.full((30, 40), 40 * 257, np.uint16)), tmp_path / "grey16.png"),
        "transparent": _save(Image.new("RGBA", (40, 30), (*SKIN, 0)), tmp_path / "transparent.png"),
    }
    for name, row in _tones(paths).items():
        assert row["ita"] is None and row["ita_category"] is None, (name, row)


def test_a_16_bit_grey_is_read_at_its_depth_as_the_same_grey_in_8_bits(tmp_path):
    """A dark grey as a 16-bit PNG came out white (Pillow's convert clips 16-bit values to 255)."""
    from autheval.raw.skin_tone import analysis_pixels

    eight = analysis_pixels(_save(Image.new("L", (20, 20), 40), tmp_path / "g8.png").read_bytes())
    sixteen = analysis_pixels(
        _save(Image.fromarray(np.full((20, 20), 40 * 257, np.uint16)), tmp_path / "g16.png").read_bytes()
    )
    assert eight.max() == 40
    np.testing.assert_array_equal(sixteen, eight)


def test_every_mode_of_one_skin_colour_gives_its_estimate(tmp_path):
    """The same skin as 8-bit RGB, 16-bit RGB, CMYK (TIFF and JPEG), opaque RGBA, a palette, 1x1; and
    with a transparent outer ring over white pixels, which count as no colour, not as white."""
    size = 48
    ring = np.zeros((size, size), bool)
    ring[:8, :] = True  # a transparent band: a quarter of the frame, half of its brighter half
    rgba = np.dstack([np.full((size, size, 3), SKIN, np.uint8), np.full((size, size), 255, np.uint8)])
    rgba[ring] = (255, 255, 255, 0)
    paths = {
        "rgb": _save(Image.new("RGB", (size, size), SKIN), tmp_path / "rgb.png"),
        "rgb16": _png16_rgb(tmp_path / "rgb16.png", tuple(v * 257 for v in SKIN)),
        "cmyk_tiff": _save(Image.new("RGB", (size, size), SKIN).convert("CMYK"), tmp_path / "c.tif", "TIFF"),
        "cmyk_jpeg": _save(Image.new("RGB", (size, size), SKIN).convert("CMYK"), tmp_path / "c.jpg", "JPEG"),
        "rgba": _save(Image.new("RGBA", (size, size), (*SKIN, 255)), tmp_path / "rgba.png"),
        "palette": _save(
            Image.new("RGB", (size, size), SKIN).convert("P", palette=Image.Palette.ADAPTIVE), tmp_path / "p.png"
        ),
        "one_pixel": _save(Image.new("RGB", (1, 1), SKIN), tmp_path / "one.png"),
        "ring": _save(Image.fromarray(rgba, "RGBA"), tmp_path / "ring.png"),
    }
    tones = _tones(paths)
    reference = tones["rgb"]
    assert reference["ita_category"] == "intermediate"
    for name, row in tones.items():
        tolerance = 1.5 if name == "cmyk_jpeg" else 1e-9  # JPEG is lossy
        assert row["ita"] == pytest.approx(reference["ita"], abs=tolerance), (name, row)
        assert row["ita_category"] == reference["ita_category"], (name, row)


# ------------------------------------------------------------------ item 14: zip decoys, 0-byte images


def _zip_cohort(root: Path, members: dict[str, tuple[int, int, int]], ids: list[str]) -> Path:
    from autheval.raw.ingest import IMAGE_ZIP, LABELS_FILE, METADATA_FILE

    root.mkdir(parents=True)
    (root / METADATA_FILE).write_text(
        "image,age_approx,anatom_site_general,lesion_id,sex\n" + "".join(f"{i},55.0,back,,female\n" for i in ids)
    )
    (root / LABELS_FILE).write_text(
        "image,MEL,NV,BCC,AK,BKL,DF,VASC,SCC,UNK\n" + "".join(f"{i},0.0,1.0,0,0,0,0,0,0,0\n" for i in ids)
    )
    with zipfile.ZipFile(root / IMAGE_ZIP, "w") as archive:
        for name, colour in members.items():
            data = io.BytesIO()
            Image.new("RGB", (32, 24), colour).save(data, "JPEG")
            archive.writestr(name, data.getvalue())
    return root


def _report(result) -> dict[tuple, dict]:
    return {(r["image_id"], r["reason"]): r for r in result.report.to_pylist()}


def test_a_decoy_in_another_zip_folder_never_replaces_the_image(tmp_path):
    """`other/ISIC_1.jpg` written after the official member replaced it silently (base names collided)."""
    from autheval.raw.ingest import IMAGE_FOLDER, ingest_isic2019

    root = _zip_cohort(
        tmp_path / "c",
        {f"{IMAGE_FOLDER}/ISIC_1.jpg": SKIN, f"{IMAGE_FOLDER}/ISIC_2.jpg": SKIN, "other/ISIC_1.jpg": (0, 0, 255)},
        ["ISIC_1", "ISIC_2"],
    )
    result = ingest_isic2019(root, checksums=False)
    paths = dict(zip(result.images["image_id"].to_pylist(), result.images["path"].to_pylist()))
    assert paths["ISIC_1"].endswith(f"!{IMAGE_FOLDER}/ISIC_1.jpg"), paths
    decoy = _report(result)[("ISIC_1", "image_without_metadata")]
    assert decoy["value"].endswith("!other/ISIC_1.jpg") and decoy["action"] == "ignored"


def test_two_same_named_members_and_no_official_one_are_ambiguous_not_picked(tmp_path):
    from autheval.raw.ingest import ingest_isic2019

    root = _zip_cohort(
        tmp_path / "c",
        {"a/ISIC_1.jpg": SKIN, "b/ISIC_1.jpg": (0, 0, 255), "b/ISIC_2.jpg": SKIN},
        ["ISIC_1", "ISIC_2"],
    )
    result = ingest_isic2019(root, checksums=False)
    assert result.images["image_id"].to_pylist() == ["ISIC_2"]  # the one member of its name is found anywhere
    row = _report(result)[("ISIC_1", "ambiguous_image")]
    assert row["action"] == "excluded" and "a/ISIC_1.jpg" in row["value"] and "b/ISIC_1.jpg" in row["value"]
    assert ("ISIC_1", "image_without_metadata") not in _report(result)  # reported once, by its row


def test_a_proposals_file_naming_a_0_byte_image_says_it_was_left_out_unreadable(tmp_path):
    """The 0-byte image is `unreadable_image` in ingest_report; a proposals file naming it was told
    'unknown image id', as if the id were a typo."""
    from autheval.proposals.proposals_file import read_proposals
    from autheval.raw.ingest import IMAGE_FOLDER, excluded_images
    from autheval.raw.pipeline import read_cohort
    from tests.test_raw_ingest import gt_line, write_cohort

    ids = ["ISIC_0000001", "ISIC_0000002"]
    root = write_cohort(tmp_path / "c", [f"{i},55.0,back,,female" for i in ids], [gt_line(i, "NV") for i in ids], ids)
    (root / IMAGE_FOLDER / f"{ids[1]}.jpg").write_bytes(b"")
    cohort = read_cohort(root, workers=1, checksums=False)
    assert cohort.images["image_id"].to_pylist() == ids[:1]
    proposals = tmp_path / "proposals.csv"
    proposals.write_text("mechanism,image_id,a_head\nm,ISIC_0000001,a1\nm,ISIC_0000002,a2\n")
    with pytest.raises(RecordError) as caught:
        read_proposals(proposals, cohort.images["image_id"], excluded_images(cohort.ingest_report))
    text = str(caught.value)
    assert "column 'image_id'" in text and "left out" in text and "unreadable_image" in text, text
    assert "row 2" in text and "ISIC_0000002" in text and "unknown image id" not in text, text


# ------------------------------------------------------------------ item 15: the selections' row order


def test_the_selections_are_in_one_order_whatever_the_input_order_and_threads():
    """No ORDER BY: the joins gave an order that changed from run to run. Same inputs, same bytes."""
    from autheval.review import local_review as review
    from tests.test_review import RULES, context_row
    from warehouse.sql import connect

    rng = random.Random(3)
    clusters = [f"k{c:04d}" for c in range(600)]
    contexts = [context_row(c, "HAM_like", rng.choice(["very_low", "low", "moderate", "high"])) for c in clusters]
    images = [(f"img{i:05d}", clusters[i % len(clusters)]) for i in range(3000)]
    proposals = [
        {"mechanism": m, "image_id": i, "slate": ["a2", "a1", "a3", "a0"], "a_head": "a2"}
        for m in ("zeta", "alpha", "mid")
        for i, _ in images
    ]

    def selections(threads: int, order_seed: int) -> pa.Table:
        shuffled = list(proposals)
        random.Random(order_seed).shuffle(shuffled)
        con = connect(threads=threads)
        params = review.register_rules(con, RULES)
        con.register("contexts", pa.Table.from_pylist(contexts))
        con.register("clusters", pa.table({"image_id": [i for i, _ in images], "cluster_id": [c for _, c in images]}))
        con.register("proposals", pa.Table.from_pylist(shuffled))
        review.build_selections(con, params)
        return con.table("selections").arrow().read_all()

    first = selections(4, 1)
    keys = list(zip(first.column("analysis").to_pylist(), first.column("image_id").to_pylist()))
    assert keys == sorted(keys) and len(set(keys)) == len(keys) == 3 * 3 * 3000
    assert selections(1, 2).equals(first) and selections(3, 5).equals(first)


# ------------------------------------------------------------------ item 22: prompts and benchmark images

BENCH_HEADER = ("item_id", "image_id", "image_path", "question", "options", "answer", "axis", "task", "group")
BENCH_ROW = {
    "item_id": "q1",
    "image_id": "ISIC_1",
    "question": "Which?",
    "options": '["melanoma", "nevus"]',
    "answer": "nevus",
    "axis": "Diagnosis",
    "task": "dx",
}


def _benchmark(path: Path, rows: list[dict]) -> Path:
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=BENCH_HEADER, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_a_huge_benchmark_question_is_refused_in_one_line(tmp_path):
    """A question of 320,000 characters made the scorer ask for 16-26 GB after six stages."""
    from autheval.estimation.benchmark import MAX_PROMPT_CHARS, read_benchmark

    path = _benchmark(tmp_path / "b.csv", [BENCH_ROW, {**BENCH_ROW, "item_id": "q2", "question": "x" * 320_000}])
    with pytest.raises(RecordError) as caught:
        read_benchmark(path)
    text = str(caught.value)
    assert text.startswith(f"{path}: column 'question': ") and f"at most {MAX_PROMPT_CHARS}" in text, text
    assert "row 2, item 'q2'" in text and "320" in text, text
    long_options = json.dumps(["a" * 5000, "b" * 5000])  # the options count too
    with pytest.raises(RecordError, match="column 'question'"):
        read_benchmark(_benchmark(tmp_path / "o.csv", [{**BENCH_ROW, "options": long_options, "answer": "A"}]))
    read_benchmark(_benchmark(tmp_path / "ok.csv", [{**BENCH_ROW, "question": "x" * (MAX_PROMPT_CHARS - 100)}]))


def test_the_demo_refuses_a_huge_benchmark_question_before_anything_runs(tmp_path):
    path = _benchmark(tmp_path / "b.csv", [{**BENCH_ROW, "question": "x" * 320_000}])
    proc = run_cli(
        "demo", "--source", "synthetic", "--n", "40", "--benchmark", str(path), "--lake", str(tmp_path / "L")
    )
    one_error_line(proc, str(path), "column 'question'", "at most")
    assert not (tmp_path / "L").exists()


@pytest.mark.parametrize("content", [b"", b"this is a text file, not a JPEG", b"\xff\xd8\xff\xe0 truncated"])
def test_a_benchmark_image_path_that_is_not_an_image_names_file_column_and_row(tmp_path, content):
    """It failed after stage 6, naming no file, column or row."""
    from autheval.estimation.benchmark import read_benchmark

    Image.new("RGB", (20, 20), SKIN).save(tmp_path / "good.jpg", "JPEG")
    (tmp_path / "bad.jpg").write_bytes(content)
    rows = [
        {**BENCH_ROW, "image_id": "", "image_path": "good.jpg"},
        {**BENCH_ROW, "item_id": "q2", "image_id": "", "image_path": "bad.jpg"},
    ]
    path = _benchmark(tmp_path / "b.csv", rows)
    with pytest.raises(RecordError) as caught:
        read_benchmark(path)
    text = str(caught.value)
    assert text.startswith(f"{path}: column 'image_path': not a readable image"), text
    assert "row 2, item 'q2'" in text and "bad.jpg" in text, text


def test_a_huge_metadata_value_never_reaches_the_scorer_prompt():
    from models.prompts import MAX_METADATA_CHARS
    from models.scorer import check_inputs

    table = pa.table(
        {
            "image_id": ["a", "b"],
            "image_path": ["a.jpg", "b.jpg"],
            "age": [55.0, 40.0],
            "sex": ["female", "male"],
            "anatomic_site": ["back", "x" * 300_000],
        }
    )
    with pytest.raises(RecordError) as caught:
        check_inputs(table)
    text = str(caught.value)
    assert "column 'anatomic_site'" in text and f"at most {MAX_METADATA_CHARS}" in text and "row 2" in text, text
    check_inputs(table.slice(0, 1))


# ------------------------------------------------------------------ item 23: model folders, config, cache


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    pytest.importorskip("transformers")
    from models.tiny import ensure_tiny_model

    root = tmp_path_factory.mktemp("tiny")
    return {kind: ensure_tiny_model(kind, root) for kind in ("tiny-gemma3", "tiny-clip-vision")}


def _broken(kind: str, tiny_models, tmp_path: Path) -> Path:
    """A copy of a tiny model folder broken one way: no weights, truncated or padded safetensors, or a
    BERT folder (a text model: neither a VLM nor a vision tower)."""
    folder = tmp_path / kind
    if kind == "bert":
        from safetensors.numpy import save_file

        folder.mkdir()
        (folder / "config.json").write_text(
            json.dumps({"model_type": "bert", "architectures": ["BertModel"], "hidden_size": 8, "vocab_size": 10})
        )
        (folder / "vocab.txt").write_text("[PAD]\n[UNK]\n")
        (folder / "tokenizer_config.json").write_text("{}")
        save_file({"w": np.zeros((2, 2), np.float32)}, str(folder / "model.safetensors"))
        return folder
    return folder


@pytest.mark.parametrize("role, flag", [("scorer", "--scorer-dir"), ("vision", "--vision-dir")])
@pytest.mark.parametrize("damage", ["no weights", "truncated", "padded", "bert", "config not json"])
def test_every_model_folder_is_checked_before_the_run_in_one_line(tiny_models, tmp_path, role, flag, damage):
    """No weights ran three stages and failed (exit 1); a truncated safetensors gave two tracebacks; a
    BERT folder two lines. Now the demo's flag check refuses each, naming the flag."""
    from autheval.cli.demo import _check_demo_flags
    from autheval.cli.main import build_parser

    source = tiny_models["tiny-gemma3" if role == "scorer" else "tiny-clip-vision"]
    folder = tmp_path / "model"
    if damage == "bert":
        folder = _broken("bert", tiny_models, tmp_path)
    else:
        shutil.copytree(source, folder)
        weights = folder / "model.safetensors"
        if damage == "no weights":
            weights.unlink()
        elif damage == "truncated":
            weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
        elif damage == "padded":
            weights.write_bytes(weights.read_bytes() + b"\0" * 16)
        else:
            (folder / "config.json").write_text("{not json")
    args = build_parser("demo").parse_args(
        ["demo", "--source", "synthetic", flag, str(folder), "--lake", str(tmp_path / "L")]
    )
    with pytest.raises(RecordError) as caught:
        _check_demo_flags(args)
    text = str(caught.value)
    assert text.startswith(f"{flag}: {folder}: ") and "\n" not in text, text
    expected = {
        "no weights": "no weights",
        "truncated": "truncated",
        "padded": "bytes after its tensors",
        "bert": "not a vision-language model" if role == "scorer" else "not a vision tower",
        "config not json": "config.json is not valid JSON",
    }[damage]
    assert expected in text, text


def test_the_tiny_models_pass_the_folder_check_and_the_roles_are_not_swapped(tiny_models):
    from models.model_dir import check_model_dir

    check_model_dir(tiny_models["tiny-gemma3"], "--scorer-dir", "scorer")
    check_model_dir(tiny_models["tiny-clip-vision"], "--vision-dir", "vision")
    with pytest.raises(RecordError, match="--scorer-dir: .*not a vision-language model"):
        check_model_dir(tiny_models["tiny-clip-vision"], "--scorer-dir", "scorer")
    with pytest.raises(RecordError, match="--vision-dir: .*not a vision tower"):
        check_model_dir(tiny_models["tiny-gemma3"], "--vision-dir", "vision")


def test_a_model_folder_named_by_the_environment_is_checked_before_it_loads(tiny_models, tmp_path):
    """$AUTHEVAL_SCORER_DIR / $AUTHEVAL_VISION_DIR and library callers reach the loaders without the
    demo's flag check: the loaders check the folder first (one line, not the loader's tracebacks)."""
    from models.probe import load_vision_tower
    from models.scorer import load_model

    for kind, load, what in (
        ("tiny-gemma3", lambda f: load_model(str(f), device="cpu"), "scorer model"),
        ("tiny-clip-vision", load_vision_tower, "vision tower"),
    ):
        folder = tmp_path / kind
        shutil.copytree(tiny_models[kind], folder)
        weights = folder / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:100])
        with pytest.raises(RecordError, match=f"^{what}: {folder}: model.safetensors is truncated"):
            load(folder)


def test_a_bad_model_folder_in_the_command_line_is_one_line_and_no_stage_runs(tiny_models, tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(tiny_models["tiny-gemma3"], folder)
    (folder / "model.safetensors").unlink()
    proc = run_cli(
        "demo", "--source", "synthetic", "--n", "40", "--scorer-dir", str(folder), "--lake", str(tmp_path / "L")
    )
    one_error_line(proc, "--scorer-dir", "no weights")
    assert not (tmp_path / "L").exists()


def test_the_scorer_config_takes_a_path_and_refuses_counts_below_one(tmp_path):
    from dataclasses import asdict

    from models.scorer import ScorerConfig

    config = ScorerConfig(model_dir=tmp_path / "m", adapter_dir=tmp_path / "a")
    assert config.model_dir == str(tmp_path / "m") and config.adapter_dir == str(tmp_path / "a")
    json.dumps(asdict(config))  # the run's metadata: a PosixPath failed here, after scoring
    for name, value in [("batch_size", -1), ("batch_size", 0), ("batch_size", True), ("batch_size", 2.5)]:
        with pytest.raises(ValueError, match=f"ScorerConfig.{name} must be a positive integer"):
            ScorerConfig(model_dir="m", **{name: value})
    with pytest.raises(ValueError, match="ScorerConfig.chunk_images"):
        ScorerConfig(model_dir="m", chunk_images=0)
    with pytest.raises(ValueError, match="ScorerConfig.method"):
        ScorerConfig(model_dir="m", method="fast")


def _cache_rows(n: int, start: int = 0) -> list[dict]:
    from models.prompts import PROMPT_ID

    return [
        {"model": "m", "revision": "r", "prompt_id": PROMPT_ID, "image_id": f"i{k}", "input_sha256": f"h{k}"}
        for k in range(start, start + n)
    ]


def _key_dir(root: Path) -> Path:
    from models import scorer
    from models.prompts import PROMPT_ID

    directory = scorer.key_directory(root, "m", "r", PROMPT_ID)
    for k in range(3):
        scorer.write_part(directory, _cache_rows(2, 2 * k))
    return directory


def test_one_scorer_at_a_time_merges_a_shared_cache(tmp_path):
    """Two scorers compacting one cache: the second deleted parts the first had merged
    (FileNotFoundError after a finished run). Now the second leaves the parts to the first."""
    from models import cache, scorer

    directory = _key_dir(tmp_path)
    with cache.compaction_lock(directory) as mine:
        assert mine
        assert scorer.compact(directory) == 3  # another process merges: this one leaves the parts
        assert len(cache.part_paths(directory)) == 3
    assert scorer.compact(directory) == 1
    assert sorted(scorer.read_cache(tmp_path).column("image_id").to_pylist()) == [f"i{k}" for k in range(6)]


def test_a_link_in_place_of_the_cache_lock_is_never_written_through(tmp_path):
    from models import cache, scorer

    directory = _key_dir(tmp_path / "cache")
    outside = tmp_path / "outside.txt"
    outside.write_text("not the cache's")
    (directory / cache.COMPACT_LOCK).symlink_to(outside)
    assert scorer.compact(directory) == 3  # no lock taken through a link: the parts stay as they are
    assert outside.read_text() == "not the cache's"
    assert len(scorer.read_cache(tmp_path / "cache")) == 6


def test_a_part_merged_away_while_the_cache_is_read_is_read_from_the_merged_part(tmp_path, monkeypatch):
    """Another process merges the key's parts between this one's listing and its reading of them."""
    import pyarrow.parquet as pq

    from models import cache, scorer

    directory = _key_dir(tmp_path)
    original = pq.read_table
    merged = []

    def read_table(path, *args, **kwargs):
        if not merged and Path(path).parent == directory:  # the other process, just before this read
            merged.append(True)
            parts = cache.part_paths(directory)
            cache.write_part(directory, pa.concat_tables([original(p, schema=scorer.CACHE_SCHEMA) for p in parts]))
            for part in parts:
                part.unlink()
        return original(path, *args, **kwargs)

    monkeypatch.setattr(pq, "read_table", read_table)
    rows = scorer.read_cache(tmp_path, "m", "r", _cache_rows(1)[0]["prompt_id"])
    assert merged and sorted(rows.column("image_id").to_pylist()) == [f"i{k}" for k in range(6)]


# ------------------------------------------------------------------ item 24: --spark-master


@pytest.mark.parametrize(
    "master, words",
    [
        ("localhost:notaport", ["is not a Spark master URL"]),
        ("local[0]", ["is not a local master"]),
        ("local[-2]", ["is not a local master"]),
        ("local[two]", ["is not a local master"]),
        ("spark://127.0.0.1:notaport", ["port 'notaport'"]),
        ("spark://127.0.0.1:70000", ["port '70000'"]),
        ("sc://127.0.0.1", ["needs a host and a port"]),
        (" local[2]", ["is not a Spark master URL"]),
    ],
)
def test_a_bad_spark_master_names_the_flag_before_java_or_the_extra(master, words, monkeypatch):
    """Checked as text first: with neither Java nor the Spark extra, the master is what is refused."""
    import importlib.util

    from warehouse import engine

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pyspark" else real(name, *a))
    monkeypatch.setattr(engine, "java_executable", lambda: None)
    with pytest.raises(engine.EngineError) as caught:
        engine.engine_config("spark", master)
    text = str(caught.value)
    assert text.startswith("--spark-master: ") and repr(master) in text, text
    for word in words:
        assert word in text, text


@pytest.mark.parametrize("master", ["local", "local[*]", "local[3]", "local[2, 4]", "yarn", "k8s://https://h:6443"])
def test_the_spark_master_forms_spark_takes_pass_the_text_check(master):
    from warehouse.engine import check_master_syntax

    check_master_syntax(master)


def test_local_zero_on_the_command_line_is_one_line_without_a_jvm(tmp_path):
    """`local[0]` started the JVM and printed 25 lines; here no Java is on the PATH at all."""
    argv = ["evaluate", "--input", str(reference_file("trace_mixed")), "--engine", "spark"]
    argv += ["--spark-master", "local[0]", "--output-dir", str(tmp_path)]
    proc = subprocess.run(
        [sys.executable, "-m", "autheval", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": os.path.dirname(sys.executable), "JAVA_HOME": ""},
        timeout=300,
    )
    one_error_line(proc, "--spark-master", "'local[0]'")


def _spark_missing() -> str | None:
    import importlib.util

    if importlib.util.find_spec("pyspark") is None:
        return "the spark extra is not installed"
    from warehouse.engine import java_executable

    return None if java_executable() else "Java is missing"


def test_a_failed_start_and_a_killed_process_leave_no_spark_scratch(tmp_path, monkeypatch):
    """No Java needed: a session that cannot start removes its folder and gives SIGTERM back; the folder
    of a process killed with -9 (no handler ran) is removed by the next start."""
    import tempfile
    import types

    from warehouse import engine

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    left = tmp_path / f"autheval-spark-{int(dead.stdout)}-abcd1234" / "registered"
    left.mkdir(parents=True)
    (left / "records-1.parquet").write_bytes(b"a copy of the records")
    mine = tmp_path / f"autheval-spark-{os.getpid()}-alive000"  # this process is alive: kept
    mine.mkdir()

    class Builder:
        def __getattr__(self, name):
            raise RuntimeError("the JVM did not start")

    fake = types.ModuleType("pyspark.sql")
    fake.SparkSession = types.SimpleNamespace(builder=Builder())
    monkeypatch.setitem(sys.modules, "pyspark.sql", fake)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(engine.EngineError, match="could not start a Spark session"):
        engine._spark_engine(engine.EngineConfig("spark", spark_cores=1))
    assert sorted(p.name for p in tmp_path.iterdir()) == [mine.name]
    assert signal.getsignal(signal.SIGTERM) is before  # given back


SESSION_SCRIPT = """
import sys, time
import pyarrow as pa
from warehouse.engine import EngineConfig, connect_engine
with connect_engine(EngineConfig("spark", spark_cores=1, shuffle_partitions=1)) as engine:
    engine.register("records", pa.table({"case_id": ["c1", "c2"], "u": [1.0, 2.0]}))
    print(engine.scratch, flush=True)
    time.sleep(300)
"""


@pytest.mark.slow
def test_a_sigtermed_spark_run_leaves_no_copy_of_the_records(tmp_path):
    """SIGTERM ended the process where it stood and left the registered records in the temp folder."""
    if _spark_missing():
        pytest.skip(_spark_missing())
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    process = subprocess.Popen(
        [sys.executable, "-c", SESSION_SCRIPT],
        cwd=ROOT,
        env={**os.environ, "TMPDIR": str(tmp)},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        scratch = Path(process.stdout.readline().strip())
        assert scratch.name.startswith("autheval-spark-"), "the Spark session did not start"
        assert list(scratch.rglob("*.parquet")), "the records are registered in the scratch folder"
        process.send_signal(signal.SIGTERM)
        assert process.wait(120) == 128 + signal.SIGTERM
    finally:
        if process.poll() is None:
            process.kill()
    assert not list(tmp.glob("autheval-spark-*")), list(tmp.iterdir())
