"""The VLM likelihood scorer on the tiny Gemma3: the batched shared-prefix scores equal a naive forward
pass per continuation, and the Parquet cache survives a crash and is not rescored."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

pytest.importorskip("transformers")

from autheval.vocabulary import RISK_LEVELS as LEVELS
from models import scorer, scorer_batches
from models.prompts import risk_prompt
from models.tiny import ensure_tiny_model


@pytest.fixture(scope="module")
def tiny_gemma3(tmp_path_factory):
    return ensure_tiny_model("tiny-gemma3", tmp_path_factory.getbasetemp() / "tiny-models", seed=0)


@pytest.fixture(scope="module")
def loaded(tiny_gemma3):
    model, processor, _, _ = scorer.load_model(str(tiny_gemma3), device="cpu")
    return model, processor


def lesion_images(n: int, seed: int = 1):
    from PIL import Image

    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, (30 + 7 * i, 41, 3), dtype=np.uint8)) for i in range(n)]


METADATA = [(55.0, "female", "anterior torso"), (None, None, None), (80.0, "male", "palms/soles")]


@pytest.mark.parametrize("method", ["shared_prefix", "padded_rows"])
def test_batched_scores_equal_naive_forward_per_continuation(loaded, method):
    model, processor = loaded
    images = lesion_images(len(METADATA))
    prompts = [risk_prompt(*meta) for meta in METADATA]  # different prompt lengths in one batch
    batched = scorer_batches.score_batch(model, processor, images, prompts, method)
    naive = np.array(
        [scorer_batches.naive_continuation_loglik(model, processor, im, pr) for im, pr in zip(images, prompts)]
    )
    assert batched.shape == (3, 4)
    assert np.abs(batched - naive).max() < 1e-5
    # the continuations are told apart far beyond the tolerance, so an off-by-one position would show
    assert np.ptp(naive, axis=1).min() > 1e-2


def test_probabilities_softmax_in_float64():
    ll = np.array([[-1.0, -2.0, -3.0, -4.0]])
    p = scorer.probabilities(ll)
    expected = np.exp(ll) / np.exp(ll).sum()
    assert np.allclose(p, expected, atol=1e-15) and p.dtype == np.float64


def write_images(folder, n: int) -> pa.Table:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, image in enumerate(lesion_images(n, seed=7)):
        path = folder / f"ISIC_{i:07d}.png"
        image.save(path)
        paths.append(str(path))
    meta = [METADATA[i % len(METADATA)] for i in range(n)]
    return pa.table(
        {
            "image_id": [f"ISIC_{i:07d}" for i in range(n)],
            "image_path": paths,
            "age": [m[0] for m in meta],
            "sex": [m[1] for m in meta],
            "anatomic_site": [m[2] for m in meta],
        }
    )


class Crash(RuntimeError):
    pass


@pytest.mark.parametrize("chunk_images", [2, 100])
def test_crash_then_rerun_loses_nothing_and_skips_finished_rows(tiny_gemma3, tmp_path, monkeypatch, chunk_images):
    images = write_images(tmp_path / "images", 7)
    cache = tmp_path / "cache"
    config = scorer.ScorerConfig(model_dir=str(tiny_gemma3), batch_size=2, chunk_images=chunk_images, device="cpu")

    def crash_after_two_batches(done: int) -> None:
        if done >= 4:
            raise Crash("killed after 4 rows")

    with pytest.raises(Crash):
        scorer.score_images(images, config, cache, progress=False, on_batch=crash_after_two_batches)
    survived = scorer.read_cache(cache)
    assert sorted(survived.column("image_id").to_pylist()) == [f"ISIC_{i:07d}" for i in range(4)]

    scored = []
    real_score_encoded = scorer_batches.score_encoded

    def counting_score_encoded(model, processor, encoded, method, tokens=None):
        scored.append(len(encoded["input_ids"]))
        return real_score_encoded(model, processor, encoded, method, tokens)

    monkeypatch.setattr(scorer_batches, "score_encoded", counting_score_encoded)
    result, meta = scorer.score_images(images, config, cache, progress=False)
    assert scored == [2, 1]  # only the 3 unfinished images were scored
    assert meta["images_scored"] == 3 and meta["images_from_cache"] == 4
    assert result.column("image_id").to_pylist() == images.column("image_id").to_pylist()
    first = {r["image_id"]: r for r in survived.to_pylist()}
    for row in result.to_pylist()[:4]:  # finished rows are kept as they were
        assert row["ll_high"] == first[row["image_id"]]["ll_high"]

    # a third run scores nothing at all
    scored.clear()
    again, meta = scorer.score_images(images, config, cache, progress=False)
    assert scored == [] and meta["images_scored"] == 0 and again.equals(result)

    # and the cached values are the ones an uninterrupted run gives
    fresh, _ = scorer.score_images(images, config, tmp_path / "fresh", progress=False)
    for level in LEVELS:
        assert np.allclose(fresh.column(f"ll_{level}").to_numpy(), result.column(f"ll_{level}").to_numpy(), atol=1e-5)
    p = np.column_stack([result.column(f"p_{level}").to_numpy() for level in LEVELS])
    assert np.allclose(p.sum(axis=1), 1.0, atol=1e-7)


def test_cache_is_keyed_by_model_revision_and_prompt(tiny_gemma3, tmp_path, monkeypatch):
    images = write_images(tmp_path / "images", 2)
    cache = tmp_path / "cache"
    base = scorer.ScorerConfig(model_dir=str(tiny_gemma3), batch_size=2, device="cpu", revision="r1")
    scorer.score_images(images, base, cache, progress=False)
    calls = []
    monkeypatch.setattr(
        scorer_batches,
        "score_encoded",
        lambda m, p, encoded, method, ids: calls.append(1) or np.zeros((len(encoded["input_ids"]), 4)),
    )
    _, meta = scorer.score_images(
        images, scorer.ScorerConfig(**{**base.__dict__, "revision": "r2"}), cache, progress=False
    )
    assert calls == [1] and meta["images_scored"] == 2
    assert scorer.read_cache(cache).num_rows == 4


def test_proposer_sees_only_public_fields(tiny_gemma3, tmp_path):
    from autheval.errors import RecordError

    images = write_images(tmp_path / "images", 1).append_column("diagnosis", pa.array(["MEL"]))
    config = scorer.ScorerConfig(model_dir=str(tiny_gemma3), device="cpu")
    with pytest.raises(RecordError, match="diagnosis"):
        scorer.score_images(images, config, tmp_path / "cache", progress=False)
    lake_images = images.rename_columns(["path" if c == "image_path" else c for c in images.column_names])
    assert scorer.public_inputs(lake_images).column_names == ["image_id", "image_path", "age", "sex", "anatomic_site"]


def test_proposals_contract():
    scores = pa.table(
        {
            "image_id": ["a", "b"],
            "p_very_low": [0.1, 0.25],
            "p_low": [0.2, 0.25],
            "p_moderate": [0.3, 0.25],
            "p_high": [0.4, 0.25],
        }
    )
    proposals = scorer.proposals_from_scores(scores, "tiny-gemma3 argmax")
    assert proposals.column_names == [
        "mechanism",
        "image_id",
        "slate",
        "a_head",
        "p_very_low",
        "p_low",
        "p_moderate",
        "p_high",
        "source",
    ]
    assert proposals.column("slate").to_pylist() == [["a3", "a2", "a1", "a0"], ["a0", "a1", "a2", "a3"]]
    assert proposals.column("a_head").to_pylist() == ["a3", "a0"]
    assert set(proposals.column("source").to_pylist()) == {"model"}


def test_prompt_formats_raw_metadata_like_the_reference():
    text = risk_prompt(55.0, "female", None)
    assert text.endswith("Public metadata: age=55.0, sex=female, anatomic_site=nan. Selected visual-risk category:")
    assert risk_prompt(float("nan"), None, "back").count("=nan") == 2


def test_prompt_and_continuations_match_the_spec_verbatim():
    import re
    from pathlib import Path

    from models.prompts import CONTINUATIONS, PROMPT_TEMPLATE

    spec = Path(__file__).resolve().parents[2] / "shared" / "spec" / "autheval-reference.md"
    if not spec.exists():
        pytest.skip("the AuthEval spec (../shared/spec) is not beside this checkout")
    text = spec.read_text(encoding="utf-8")
    assert re.search(r"`(This is a research.*?category:)`", text).group(1) == PROMPT_TEMPLATE
    for level, continuation in CONTINUATIONS.items():
        assert re.search(rf"\* {level}: `(.*?)`", text).group(1) == continuation


# ---------------------------------------------------------------- issue 21: silent wrong numbers

LONG_SITE = "lower extremity " * 250  # a free-text metadata value: 874 prompt tokens on the tiny Gemma3


@pytest.fixture(scope="module")
def tiny_llava(tmp_path_factory):
    return ensure_tiny_model("tiny-llava", tmp_path_factory.getbasetemp() / "tiny-models", seed=0)


@pytest.mark.parametrize("kind", ["tiny-gemma3", "tiny-llava"])
def test_shared_prefix_is_exact_for_prompts_longer_than_the_sliding_window(request, kind):
    """Gemma3's sliding-window layers (window 512 in the tiny model, 1024 in MedGemma): a short prompt
    batched with one longer than the window must score as it does alone (right-padded, it was off by
    0.87 here). LLaVA has no window; the same batch checks it too."""
    model_dir = request.getfixturevalue(kind.replace("-", "_"))
    model, processor, _, _ = scorer.load_model(str(model_dir), device="cpu")
    images = lesion_images(2, seed=5)
    prompts = [risk_prompt(55.0, "female", "back"), risk_prompt(80.0, "male", LONG_SITE)]
    lengths = scorer_batches.encode_prompts(processor, images, prompts)["attention_mask"].sum(dim=1).tolist()
    window = getattr(model.config.get_text_config(), "sliding_window", None)
    if window:
        assert lengths[1] > window > lengths[0] + 8  # the long prompt passes the window, the others do not
    naive = np.array(
        [scorer_batches.naive_continuation_loglik(model, processor, im, pr) for im, pr in zip(images, prompts)]
    )
    for method in ("shared_prefix", "padded_rows"):
        batched = scorer_batches.score_batch(model, processor, images, prompts, method)
        assert np.abs(batched - naive).max() < 1e-5, (method, np.abs(batched - naive).max(axis=1))


def test_a_model_giving_nan_leaves_nothing_in_the_cache(tiny_gemma3, tmp_path, monkeypatch):
    images = write_images(tmp_path / "images", 3)
    config = scorer.ScorerConfig(model_dir=str(tiny_gemma3), batch_size=2, device="cpu", revision="r")
    monkeypatch.setattr(scorer, "load_model", lambda *a, **k: (None, _FakeProcessor(), "cpu", None))
    monkeypatch.setattr(
        scorer,
        "score_rows",
        lambda m, p, rows, size, method: iter([(rows[:2], np.array([[-1.0, -2.0, -3.0, -4.0], [np.nan] * 4]))]),
    )
    with pytest.raises(ValueError, match=r"non-finite log-likelihoods for image 'ISIC_0000001'") as err:
        scorer.score_images(images, config, tmp_path / "cache", progress=False)
    assert str(tiny_gemma3) in str(err.value) and "\n" not in str(err.value)
    assert scorer.read_cache(tmp_path / "cache").num_rows == 0


class _FakeProcessor:
    class tokenizer:
        @staticmethod
        def __call__(text, add_special_tokens=False):
            return {"input_ids": [1, 2]}

    tokenizer = tokenizer()


_BATCHES = iter(range(1, 10**6))


def _score_with(config, images, cache, monkeypatch) -> tuple[pa.Table, dict, list[int]]:
    """score_images with the model replaced by a counter: the sizes of the batches it scored (each
    batch's ll_high is -4 - its serial number, so a rescored row differs from its cached one)."""
    calls: list[int] = []

    def fake_rows(model, processor, rows, size, method):
        for begin in range(0, len(rows), size):
            batch = rows[begin : begin + size]
            calls.append(len(batch))
            yield batch, np.array([[-1.0, -2.0, -3.0, -4.0 - next(_BATCHES)]] * len(batch))

    with monkeypatch.context() as patch:
        patch.setattr(scorer, "load_model", lambda *a, **k: (None, _FakeProcessor(), "cpu", None))
        patch.setattr(scorer, "score_rows", fake_rows)
        result, meta = scorer.score_images(images, config, cache, progress=False)
    return result, meta, calls


@pytest.mark.parametrize("other", ["revision", "prompt_id"])
def test_a_foreign_part_in_a_key_folder_is_skipped_not_served(tiny_gemma3, tmp_path, monkeypatch, other):
    """A part of another model revision or prompt variant lying in this key's folder is not this key's
    scores: it is reported, skipped, rescored, and left where it is."""
    import shutil

    from models.prompts import variant_prompt_ids

    images = write_images(tmp_path / "images", 3)
    cache = tmp_path / "cache"
    mine = scorer.ScorerConfig(model_dir=str(tiny_gemma3), batch_size=2, device="cpu", revision="r1")
    foreign = scorer.ScorerConfig(
        **{**mine.__dict__, other: {"revision": "r2", "prompt_id": variant_prompt_ids(2)[1]}[other]}
    )
    _score_with(foreign, images, cache, monkeypatch)
    (foreign_part,) = scorer.key_directory(
        cache, foreign.name(), "r2" if other == "revision" else "r1", foreign.prompt_id
    ).glob("part-*.parquet")
    folder = scorer.key_directory(cache, mine.name(), "r1", mine.prompt_id)
    folder.mkdir(parents=True)
    shutil.copy(foreign_part, folder / foreign_part.name)

    with pytest.warns(UserWarning, match="skipped 3 row"):
        result, meta, calls = _score_with(mine, images, cache, monkeypatch)
    assert calls == [2, 1] and meta["images_scored"] == 3 and meta["cache_rows_skipped"] == 3
    assert set(result.column("revision").to_pylist()) == {"r1"}
    assert set(result.column("prompt_id").to_pylist()) == {mine.prompt_id}
    assert (folder / foreign_part.name).exists()  # not ours: neither merged nor deleted
    with pytest.warns(UserWarning, match="skipped 3 row"):
        assert scorer.read_cache(cache, mine.name(), "r1", mine.prompt_id).num_rows == 3
    with pytest.warns(UserWarning):
        assert scorer.read_cache(cache).num_rows == 6  # each key's own rows, once


def test_a_changed_input_is_rescored(tiny_gemma3, tmp_path, monkeypatch):
    """The key holds a hash of the prompt text and the image bytes: a corrected age or a replaced image
    file is scored again; an unchanged image is not."""
    from PIL import Image

    images = write_images(tmp_path / "images", 3)
    cache = tmp_path / "cache"
    config = scorer.ScorerConfig(model_dir=str(tiny_gemma3), batch_size=4, device="cpu", revision="r1")
    first, _, calls = _score_with(config, images, cache, monkeypatch)
    assert calls == [3]
    ages = images.column("age").to_pylist()
    corrected = images.set_column(images.column_names.index("age"), "age", pa.array([ages[0], 61.0, ages[2]]))
    again, meta, calls = _score_with(config, corrected, cache, monkeypatch)
    assert calls == [1] and meta["images_changed"] == 1 and meta["images_from_cache"] == 2
    assert again.column("input_sha256")[1] != first.column("input_sha256")[1]
    assert (
        again.column("ll_high")[0] == first.column("ll_high")[0]
        and again.column("ll_high")[1] != first.column("ll_high")[1]
    )
    Image.new("RGB", (20, 20), (200, 10, 10)).save(images.column("image_path")[2].as_py())  # same path, new file
    _, meta, calls = _score_with(config, corrected, cache, monkeypatch)
    assert calls == [1] and meta["images_changed"] == 1
    _, meta, calls = _score_with(config, corrected, cache, monkeypatch)
    assert calls == [] and meta["images_scored"] == 0


def test_rows_cached_before_inputs_were_hashed_are_rescored(tiny_gemma3, tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    images = write_images(tmp_path / "images", 2)
    cache = tmp_path / "cache"
    config = scorer.ScorerConfig(model_dir=str(tiny_gemma3), batch_size=4, device="cpu", revision="r1")
    scored, _, _ = _score_with(config, images, cache, monkeypatch)
    (part,) = scorer.key_directory(cache, config.name(), "r1", config.prompt_id).glob("part-*.parquet")
    pq.write_table(scored.drop_columns(["input_sha256"]), part)  # the cache's earlier layout
    with pytest.warns(UserWarning, match="without an input hash"):
        _, meta, calls = _score_with(config, images, cache, monkeypatch)
    assert calls == [2] and meta["images_scored"] == 2
    assert len(list(part.parent.glob("part-*.parquet"))) == 1  # merged; the unservable rows dropped
    assert scorer.read_cache(cache).num_rows == 2


def test_a_16_bit_image_is_scaled_not_clipped(tmp_path):
    from PIL import Image

    from autheval.errors import RecordError

    gray = np.full((24, 24), 32767, dtype=np.uint16)
    gray[:, :12] = 65535
    Image.fromarray(gray).save(tmp_path / "gray16.png")
    assert Image.open(tmp_path / "gray16.png").mode == "I;16"
    rgb = np.asarray(scorer_batches.open_rgb(str(tmp_path / "gray16.png")))
    assert rgb.shape == (24, 24, 3) and rgb[:, :12].min() == 255 and rgb[:, 12:].max() == 127  # not 255
    Image.fromarray(np.full((8, 8), 7.5, dtype=np.float32)).save(tmp_path / "float.tiff")
    with pytest.raises(RecordError, match="no declared range"):
        scorer_batches.open_rgb(str(tmp_path / "float.tiff"))
