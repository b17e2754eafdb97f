"""Bring your own proposals: the three ways a row gives its ranking, and every rule a file can break."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from autheval.errors import RecordError
from autheval.proposals import CONTRACT_SCHEMA, read_proposals

IMAGES = pa.array(["i1", "i2", "i3", "i4", "i5"])


def _write(tmp_path, text: str, name: str = "props.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_probabilities_slates_and_heads_become_the_contract(tmp_path):
    path = _write(tmp_path, "\n".join([
        "mechanism,image_id,slate,a_head,p_very_low,p_low,p_moderate,p_high",
        "m,i1,,,0.1,0.4,0.4,0.1",        # tie between a1 and a2: the lower level first
        "m,i2,a2 a1,,,,,",               # an explicit slate of two
        "m,i3,,a1,,,,",                  # nearest level: |level - 1|, then the higher level
        "m,i4,,a3,,,,",
        "m,i5,\"a0, a3, a2, a1\",a0,,,,",
    ]) + "\n")
    table = read_proposals(path, IMAGES)
    assert table.schema == CONTRACT_SCHEMA
    rows = {r["image_id"]: r for r in table.to_pylist()}
    assert rows["i1"]["slate"] == ["a1", "a2", "a0", "a3"] and rows["i1"]["a_head"] == "a1"
    assert rows["i1"]["p_low"] == 0.4
    assert rows["i2"]["slate"] == ["a2", "a1"]
    assert rows["i3"]["slate"] == ["a1", "a2", "a0", "a3"]
    assert rows["i4"]["slate"] == ["a3", "a2", "a1", "a0"]
    assert rows["i5"]["slate"] == ["a0", "a3", "a2", "a1"]
    assert {r["source"] for r in rows.values()} == {"file"}


def test_nearest_level_slates_are_the_spec_ones(tmp_path):
    path = _write(tmp_path, "image_id,a_head\ni1,a0\ni2,a1\ni3,a2\ni4,a3\n", name="clip_probe.csv")
    table = read_proposals(path)
    assert table.column("mechanism").to_pylist() == ["clip_probe"] * 4  # named after the file
    assert table.column("slate").to_pylist() == [
        ["a0", "a1", "a2", "a3"], ["a1", "a2", "a0", "a3"], ["a2", "a3", "a1", "a0"], ["a3", "a2", "a1", "a0"]]


def test_parquet_with_a_list_slate_and_float_probabilities(tmp_path):
    path = tmp_path / "p.parquet"
    pq.write_table(pa.table({
        "mechanism": ["m", "m"], "image_id": ["i1", "i2"],
        "slate": pa.array([None, ["a3", "a0", "a1", "a2"]], pa.list_(pa.string())),
        "p_very_low": [0.7, None], "p_low": [0.1, None], "p_moderate": [0.1, None], "p_high": [0.1, None],
    }), path)
    rows = read_proposals(path, IMAGES).to_pylist()
    assert rows[0]["slate"] == ["a0", "a1", "a2", "a3"] and rows[0]["p_very_low"] == 0.7
    assert rows[1]["slate"] == ["a3", "a0", "a1", "a2"]


@pytest.mark.parametrize("body, column, rule", [
    ("m,i9,,a1,,,,", "image_id", "unknown image id"),
    ("m,i1,,,-0.1,0.5,0.3,0.3", "p_very_low", "must not be negative"),
    ("m,i1,,,0.1,0.5,0.3,0.3", "p_very_low", "sum to 1 within 1e-6"),
    ("m,i1,,,0.25,0.25,0.25,", "p_very_low", "all four probabilities"),
    ("m,i1,,,0.25,x,0.25,0.25", "p_very_low", "finite numbers"),
    ("m,i1,a1 a1 a2 a3,,,,,", "slate", "distinct actions"),
    ("m,i1,a1 a2 a3,,,,,", "slate", "2 or 4"),
    ("m,i1,a1 a4,,,,,", "slate", "among a0 a1 a2 a3"),
    ("m,i1,,a7,,,,", "a_head", "one of a0"),
    ("m,i1,a2 a1,a1,,,,", "a_head", "first action of the slate"),
    ("m,i1,,,,,,", "a_head", "needs the four probabilities, a slate or an a_head"),
    ("m,i1,,a1,,,,\nm,i1,,a2,,,,", "image_id", "one row per (mechanism, image_id)"),
    (",i1,,a1,,,,", "mechanism", "must not be empty"),
])
def test_each_broken_rule_is_one_line_naming_the_column(tmp_path, body, column, rule):
    path = _write(tmp_path, "mechanism,image_id,slate,a_head,p_very_low,p_low,p_moderate,p_high\n" + body + "\n")
    with pytest.raises(RecordError) as err:
        read_proposals(path, IMAGES)
    text = str(err.value)
    assert "\n" not in text and str(path) in text
    assert err.value.column == column and rule in text, text


def test_probabilities_within_tolerance_pass(tmp_path):
    path = _write(tmp_path, "mechanism,image_id,p_very_low,p_low,p_moderate,p_high\nm,i1,0.25,0.25,0.25,0.2500009\n")
    assert read_proposals(path, IMAGES).num_rows == 1


def test_columns_misspelled_missing_or_unused(tmp_path):
    with pytest.raises(RecordError, match="did you mean 'a_head'"):
        read_proposals(_write(tmp_path, "image_id,a_haed\ni1,a1\n"), IMAGES)
    with pytest.raises(RecordError, match="image_id"):
        read_proposals(_write(tmp_path, "image,a_head\ni1,a1\n"), IMAGES)
    with pytest.warns(UserWarning, match="not used by proposals: confidence_note"):
        read_proposals(_write(tmp_path, " image_id ,a_head,confidence_note\ni1,a1,high\n"), IMAGES)


def test_a_proposed_diagnosis_is_kept_and_checked(tmp_path):
    table = read_proposals(_write(tmp_path, "mechanism,image_id,a_head,diagnosis\nm,i1,a3, mel\nm,i2,a0,\n"), IMAGES)
    assert table.column("diagnosis").to_pylist() == ["MEL", None]
    with pytest.raises(RecordError, match="column 'diagnosis': must be an ISIC 2019 diagnosis code"):
        read_proposals(_write(tmp_path, "mechanism,image_id,a_head,diagnosis\nm,i1,a3,melanoma?\n"), IMAGES)
