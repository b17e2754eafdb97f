"""The linear probe over a frozen vision tower (AuthEval spec 5.4): resumable Parquet feature cache, seeded
torch training, epoch chosen on validation by the spec's order, tau fitted on validation."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import torch

from autheval.records.warnings import AuthEvalWarning
from models import probe
from models.probe import ProbeConfig, cached_features, extract_features, feature_matrix, train_probe

CONFIG = ProbeConfig(epochs=6, lr=0.05, weight_decay=0.001, batch_size=32, seed=20260710, device="cpu")


def synthetic_features(n_per_level=40, d=8, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 3, size=(4, d))
    y = np.repeat(np.arange(4), n_per_level)
    x = centres[y] + rng.normal(0, 1.0, size=(y.size, d))
    order = rng.permutation(y.size)
    return x[order].astype(np.float32), y[order]


def test_probe_trains_and_locks_on_validation():
    train_x, train_y = synthetic_features(seed=0)
    val_x, val_y = synthetic_features(n_per_level=15, seed=0)
    fit = train_probe(train_x, train_y, val_x, val_y, CONFIG)
    assert [r["epoch"] for r in fit.epoch_table] == list(range(1, 7))
    expected = min(fit.epoch_table, key=lambda r: (r["mae"], -r["balanced_accuracy"], -r["macro_f1"], r["epoch"]))
    assert fit.chosen_epoch == expected["epoch"]
    assert fit.validation_metrics["balanced_accuracy"] > 0.9
    # tau on validation: the thresholded head is at least as good as the best constant level
    assert fit.validation_head_mae <= np.abs(val_y - 1).mean() and list(fit.tau) == sorted(fit.tau)
    assert np.mean(np.abs(fit.heads(val_x) - val_y)) == pytest.approx(fit.validation_head_mae)
    meta = fit.metadata()
    assert meta["config"]["epochs"] == 6 and len(meta["data_sha256"]) == 64 and len(meta["tau"]) == 3
    rows = fit.proposals(["t1", "t2"], val_x[:2]).to_pylist()
    assert rows[0]["mechanism"] == "CLIP probe" and rows[0]["a_head"] == rows[0]["slate"][0]
    # seeded: the same run gives the same probe
    again = train_probe(train_x, train_y, val_x, val_y, CONFIG)
    assert np.array_equal(again.weight, fit.weight) and again.chosen_epoch == fit.chosen_epoch


# scripted validation metrics per epoch: (mae, balanced accuracy, macro-F1)
SCRIPTS = {
    "lowest mae": ([(0.5, 0.9, 0.9), (0.3, 0.1, 0.1), (0.4, 0.95, 0.95), (0.6, 1.0, 1.0)], 2),
    "mae tie -> bacc": ([(0.5, 0.9, 0.9), (0.3, 0.5, 0.9), (0.3, 0.6, 0.1), (0.6, 1.0, 1.0)], 3),
    "bacc tie -> f1": ([(0.3, 0.6, 0.2), (0.3, 0.6, 0.3), (0.3, 0.6, 0.25), (0.6, 1.0, 1.0)], 2),
    "all tie -> earlier": ([(0.5, 0.5, 0.5), (0.3, 0.6, 0.3), (0.3, 0.6, 0.3), (0.3, 0.6, 0.3)], 2),
}


@pytest.mark.parametrize("case", sorted(SCRIPTS))
def test_epoch_is_chosen_by_the_spec_order(monkeypatch, case):
    script, chosen = SCRIPTS[case]
    calls = iter(script)

    def scripted(predicted, truth):
        mae, bacc, f1 = next(calls)
        return {"mae": mae, "balanced_accuracy": bacc, "macro_f1": f1, "accuracy": 0.0}

    train_x, train_y = synthetic_features(n_per_level=10, seed=1)
    config = CONFIG.model_copy(update={"epochs": 4})
    monkeypatch.setattr(probe, "level_metrics", scripted)
    fit = train_probe(train_x, train_y, train_x, train_y, config)
    assert fit.chosen_epoch == chosen
    monkeypatch.undo()
    # the locked weights are that epoch's: a run stopped after it ends with the same layer
    stopped = train_probe(train_x, train_y, train_x, train_y, CONFIG.model_copy(update={"epochs": chosen}))
    assert np.array_equal(fit.weight, stopped.weight) and np.array_equal(fit.bias, stopped.bias)


class FakeTower(torch.nn.Module):
    """A frozen 'vision tower': mean pixel per channel as the pooled output."""

    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(1))

    def forward(self, pixel_values):
        from types import SimpleNamespace

        return SimpleNamespace(pooler_output=pixel_values.mean(dim=(2, 3)) * self.scale)


def fake_processor(images, return_tensors):
    return {"pixel_values": torch.tensor(np.stack([np.full((3, 4, 4), v, dtype=np.float32) for v in images]))}


def same_bytes(ids) -> dict:
    """Stand-in image hashes for the fake loader (one fixed 'file' per id)."""
    return {i: f"sha-{i}" for i in ids}


def test_feature_cache_is_resumable(tmp_path):
    ids = [f"img{k}" for k in range(7)]
    loaded, crashed = [], []

    def load(image_id):
        if image_id == "img5" and not crashed:
            crashed.append(image_id)
            raise RuntimeError("interrupted")
        loaded.append(image_id)
        return float(image_id[3:])

    cache = tmp_path / "features"
    with pytest.raises(RuntimeError):
        extract_features(
            FakeTower(), fake_processor, ids, load, cache, "fake-tower", batch_size=2, hashes=same_bytes(ids)
        )
    assert cached_features(cache, "fake-tower").column("image_id").to_pylist() == ids[:4]  # two batches kept
    loaded.clear()
    table = extract_features(
        FakeTower(), fake_processor, ids, load, cache, "fake-tower", batch_size=2, hashes=same_bytes(ids)
    )
    assert loaded == ["img4", "img5", "img6"]  # finished images are not extracted again
    assert table.column("image_id").to_pylist() == ids
    assert feature_matrix(table)[:, 0].tolist() == [float(k) for k in range(7)]
    assert cached_features(cache, "another-model").num_rows == 0  # keyed by model


def test_features_from_the_tiny_clip_tower(tmp_path):
    tiny = pytest.importorskip("models.tiny")
    from PIL import Image
    from transformers import CLIPImageProcessor, CLIPVisionModel

    path = tiny.build_tiny_clip_vision(tmp_path / "clip")
    tower = CLIPVisionModel.from_pretrained(path)
    processor = CLIPImageProcessor.from_pretrained(path)
    images = {f"i{k}": Image.new("RGB", (40, 40), (50 * k, 20, 100)) for k in range(3)}
    table = extract_features(
        tower,
        processor,
        list(images),
        images.__getitem__,
        tmp_path / "cache",
        "tiny-clip",
        batch_size=2,
        hashes=same_bytes(images),
    )
    assert feature_matrix(table).shape == (3, 32) and isinstance(table, pa.Table)


# ---------------------------------------------------------------- issue 21


def test_a_removed_part_is_extracted_again_and_no_part_is_replaced(tmp_path):
    """Parts were named by the count of parts: after one was deleted the next run overwrote the last
    one (losing a finished batch) and then failed on the lost ids."""
    ids = [f"img{k}" for k in range(6)]
    loaded = []

    def load(image_id):
        loaded.append(image_id)
        return float(image_id[3:])

    cache = tmp_path / "features"
    extract_features(FakeTower(), fake_processor, ids, load, cache, "fake-tower", batch_size=2, hashes=same_bytes(ids))
    parts = sorted(cache.glob("part-*.parquet"))
    assert len(parts) == 3
    parts[1].unlink()  # say a corrupt part the user deleted
    kept = {p.name: p.read_bytes() for p in (parts[0], parts[2])}
    loaded.clear()
    table = extract_features(
        FakeTower(), fake_processor, ids, load, cache, "fake-tower", batch_size=2, hashes=same_bytes(ids)
    )
    assert loaded == ["img2", "img3"]  # only the removed batch again
    assert table.column("image_id").to_pylist() == ids
    assert feature_matrix(table)[:, 0].tolist() == [float(k) for k in range(6)]
    assert all((cache / name).read_bytes() == data for name, data in kept.items())  # nothing replaced
    assert len(list(cache.glob("part-*.parquet"))) == 3


class NanTower(FakeTower):
    def forward(self, pixel_values):
        out = super().forward(pixel_values)
        out.pooler_output = out.pooler_output * float("nan")
        return out


def test_a_tower_giving_nan_is_refused_before_anything_is_cached(tmp_path):
    cache = tmp_path / "features"
    with pytest.raises(ValueError, match=r"vision tower nan-tower gave non-finite features for image 'img0'") as err:
        extract_features(
            NanTower(),
            fake_processor,
            ["img0", "img1"],
            lambda i: 1.0,
            cache,
            "nan-tower",
            hashes=same_bytes(["img0", "img1"]),
        )
    assert "\n" not in str(err.value)
    assert not list(cache.glob("part-*.parquet"))


def test_a_nan_tower_through_the_lake_call_is_refused(tmp_path):
    """tower_features (the probe_features asset's one call) with a real tiny CLIP tower whose weights are
    NaN: refused in one line naming the tower, so no `CLIP probe` proposals (all heads a0) are made."""
    tiny = pytest.importorskip("models.tiny")
    from PIL import Image
    from transformers import CLIPVisionModel

    path = tiny.build_tiny_clip_vision(tmp_path / "clip-nan")
    tower = CLIPVisionModel.from_pretrained(path)
    with torch.no_grad():
        tower.post_layernorm.weight.fill_(float("nan"))
    tower.save_pretrained(path)
    Image.new("RGB", (40, 40), (120, 20, 60)).save(tmp_path / "a.png")
    images = pa.table({"image_id": ["a"], "image_path": [str(tmp_path / "a.png")]})
    with pytest.raises(ValueError, match="clip-nan@.*non-finite features for image 'a'"):
        probe.tower_features(images, path, tmp_path / "cache", device="cpu")


def test_nan_probe_proposals_are_refused_naming_mechanism_and_model():
    train_x, train_y = synthetic_features(n_per_level=5, seed=2)
    fit = train_probe(train_x, train_y, train_x, train_y, CONFIG.model_copy(update={"epochs": 2}))
    fit.weight = np.full_like(fit.weight, np.nan)
    with pytest.raises(ValueError) as err:
        fit.proposals(["t1", "t2"], train_x[:2], model="/models/broken-tower")
    message = str(err.value)
    assert "'CLIP probe'" in message and "/models/broken-tower" in message and "finite" in message
    assert "\n" not in message


@pytest.mark.parametrize("bad", [4, -1, 1.5, None])
def test_probe_labels_outside_the_four_levels_are_refused(bad):
    from autheval.errors import RecordError

    train_x, train_y = synthetic_features(n_per_level=5, seed=2)
    labels = train_y.astype(object)
    labels[3] = bad
    with pytest.raises(RecordError, match="levels must be integers 0..3"):
        train_probe(train_x, labels, train_x, train_y, CONFIG.model_copy(update={"epochs": 1}))


# ---------------------------------------------------------------- issue 21 follow-up: the cache keyed by image bytes


def test_an_image_whose_bytes_changed_is_extracted_again(tmp_path):
    """The key was (model, image_id): a replaced image file was served its old features."""
    ids = ["img0", "img1", "img2"]
    value = {"img0": 0.0, "img1": 1.0, "img2": 2.0}
    loaded = []

    def load(image_id):
        loaded.append(image_id)
        return value[image_id]

    cache = tmp_path / "features"
    hashes = same_bytes(ids)
    extract_features(FakeTower(), fake_processor, ids, load, cache, "fake-tower", hashes=hashes)
    value["img1"], loaded[:] = 7.0, []
    changed = {**hashes, "img1": "sha-img1-replaced"}
    with pytest.warns(AuthEvalWarning, match=r"1 image\(s\) changed since their features were cached"):
        table = extract_features(FakeTower(), fake_processor, ids, load, cache, "fake-tower", hashes=changed)
    assert loaded == ["img1"]  # only the replaced image runs again
    assert feature_matrix(table)[:, 0].tolist() == [0.0, 7.0, 2.0]
    assert table.column("input_sha256").to_pylist() == [changed[i] for i in ids]
    old = cached_features(cache, "fake-tower", hashes)  # the old row stays in place, unserved
    assert feature_matrix(old)[:, 0].tolist() == [0.0, 1.0, 2.0]


def test_rows_cached_without_an_image_hash_are_never_served(tmp_path):
    import pyarrow.parquet as pq

    cache = tmp_path / "features"
    cache.mkdir()
    pq.write_table(
        pa.table(
            {
                "model": ["fake-tower"],
                "image_id": ["img0"],
                "feature": pa.array([[9.0, 9.0, 9.0]], pa.list_(pa.float32())),
            }
        ),
        cache / "part-00000000000000000000-old.parquet",
    )  # a part from before the key had the bytes
    assert cached_features(cache, "fake-tower").num_rows == 0
    loaded = []
    table = extract_features(
        FakeTower(),
        fake_processor,
        ["img0"],
        lambda i: loaded.append(i) or 3.0,
        cache,
        "fake-tower",
        hashes=same_bytes(["img0"]),
    )
    assert loaded == ["img0"] and feature_matrix(table)[:, 0].tolist() == [3.0]


def test_a_replaced_image_file_is_extracted_again_through_the_lake_call(tmp_path):
    """tower_features (the probe_features asset's call) with the tiny CLIP tower and real files."""
    tiny = pytest.importorskip("models.tiny")
    from PIL import Image

    path = tiny.build_tiny_clip_vision(tmp_path / "clip")
    for k in range(3):
        Image.new("RGB", (40, 40), (60 * k, 20, 100)).save(tmp_path / f"i{k}.png")
    images = pa.table({"image_id": ["i0", "i1", "i2"], "image_path": [str(tmp_path / f"i{k}.png") for k in range(3)]})
    first, meta = probe.tower_features(images, path, tmp_path / "cache", device="cpu")
    assert meta["images_extracted"] == 3
    again, meta = probe.tower_features(images, path, tmp_path / "cache", device="cpu")
    assert meta["images_extracted"] == 0 and again.equals(first)
    Image.new("RGB", (40, 40), (250, 250, 0)).save(tmp_path / "i1.png")  # same path, new bytes
    with pytest.warns(AuthEvalWarning, match="changed since their features were cached"):
        replaced, meta = probe.tower_features(images, path, tmp_path / "cache", device="cpu")
    assert meta["images_extracted"] == 1 and meta["images_from_cache"] == 2
    before, after = feature_matrix(first), feature_matrix(replaced)
    assert np.array_equal(after[[0, 2]], before[[0, 2]]) and not np.allclose(after[1], before[1])
    assert replaced.column("input_sha256")[1].as_py() == probe.image_sha256(str(tmp_path / "i1.png"))
    assert meta["data_sha256"] != probe.tower_features(images.slice(0, 2), path, tmp_path / "cache")[1]["data_sha256"]


# ---------------------------------------------------------------- issue 16 item 3: the run in model_runs


def test_the_training_run_names_the_epochs_tau_data_and_config():
    import json

    from models.training_runs import SCHEMA

    train_x, train_y = synthetic_features(n_per_level=10, seed=4)
    fit = train_probe(train_x, train_y, train_x, train_y, CONFIG)
    table = fit.training_run().table("CLIP probe", "tiny-clip-vision", "abc")
    assert table.schema == SCHEMA
    rows = table.to_pylist()
    epochs = [r for r in rows if r["step_kind"] == "epoch"]
    assert {r["step"] for r in epochs} == set(range(1, 7))
    assert {r["metric"] for r in epochs} == {"train_loss", "mae", "balanced_accuracy", "macro_f1", "accuracy"}
    assert {r["step"] for r in epochs if r["chosen"]} == {fit.chosen_epoch}
    loss = {r["step"]: r["value"] for r in epochs if r["metric"] == "train_loss"}
    assert loss == {e["epoch"]: e["train_loss"] for e in fit.epoch_table}
    lock = {r["metric"]: r["value"] for r in rows if r["step_kind"] == "lock"}
    assert [lock["tau_1"], lock["tau_2"], lock["tau_3"]] == fit.tau.tolist()
    assert lock["validation_head_mae"] == fit.validation_head_mae
    assert {(r["step"], r["chosen"]) for r in rows if r["step_kind"] == "lock"} == {(fit.chosen_epoch, True)}
    assert {r["data_sha256"] for r in rows} == {fit.data_sha256} and {r["seed"] for r in rows} == {CONFIG.seed}
    assert {r["config"] for r in rows} == {json.dumps(CONFIG.model_dump(), sort_keys=True)}
