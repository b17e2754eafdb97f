"""Bring your own proposals: the three ways a row gives its ranking, and every rule a file can break."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from autheval.errors import RecordError
from autheval.proposals.proposals_file import read_proposals
from autheval.vocabulary import PROPOSALS_SCHEMA as CONTRACT_SCHEMA

IMAGES = pa.array(["i1", "i2", "i3", "i4", "i5"])


def _write(tmp_path, text: str, name: str = "props.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_probabilities_slates_and_heads_become_the_contract(tmp_path):
    path = _write(
        tmp_path,
        "\n".join(
            [
                "mechanism,image_id,slate,a_head,p_very_low,p_low,p_moderate,p_high",
                "m,i1,,,0.1,0.4,0.4,0.1",  # tie between a1 and a2: the lower level first
                "m,i2,a2 a1,,,,,",  # an explicit slate of two
                "m,i3,,a1,,,,",  # nearest level: |level - 1|, then the higher level
                "m,i4,,a3,,,,",
                'm,i5,"a0, a3, a2, a1",a0,,,,',
            ]
        )
        + "\n",
    )
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
        ["a0", "a1", "a2", "a3"],
        ["a1", "a2", "a0", "a3"],
        ["a2", "a3", "a1", "a0"],
        ["a3", "a2", "a1", "a0"],
    ]


def test_parquet_with_a_list_slate_and_float_probabilities(tmp_path):
    path = tmp_path / "p.parquet"
    pq.write_table(
        pa.table(
            {
                "mechanism": ["m", "m"],
                "image_id": ["i1", "i2"],
                "slate": pa.array([None, ["a3", "a0", "a1", "a2"]], pa.list_(pa.string())),
                "p_very_low": [0.7, None],
                "p_low": [0.1, None],
                "p_moderate": [0.1, None],
                "p_high": [0.1, None],
            }
        ),
        path,
    )
    rows = read_proposals(path, IMAGES).to_pylist()
    assert rows[0]["slate"] == ["a0", "a1", "a2", "a3"] and rows[0]["p_very_low"] == 0.7
    assert rows[1]["slate"] == ["a3", "a0", "a1", "a2"]


@pytest.mark.parametrize(
    "body, column, rule",
    [
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
        ("m,,,a1,,,,", "image_id", "must not be empty"),
        ("m,i1,,,0.1,0.2,0.2,0.2", "p_very_low", "sum to 1 within 1e-6"),  # 0.7: below 1 too
        ("m,i1,,,0.25,0.25,0.25,0.250005", "p_very_low", "sum to 1 within 1e-6"),  # 1.000005: not within 1e-6
        ("m,i1,,,0.25,0.25,0.25,inf", "p_very_low", "finite numbers"),
        ("m,i1,a1,,,,,", "slate", "2 or 4"),
        ("m ,i1,,a1,,,,", "mechanism", "must not begin or end with whitespace"),
        ("\u00a0m,i1,,a1,,,,", "mechanism", "must not begin or end with whitespace"),
        ("m,i1 ,,a1,,,,", "image_id", "must not begin or end with whitespace"),  # before 'unknown image id'
        ("m,i1,,a1 ,,,,", "a_head", "one of a0"),
        ("m,i1,,a1,,,,\nm ,i1,,a1,,,,", "mechanism", "another mechanism"),  # not two mechanisms
    ],
)
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


def test_a_file_without_rows_or_rankings(tmp_path):
    from autheval.proposals.proposals_file import proposals_from_table

    with pytest.raises(RecordError, match="file has no proposals"):
        read_proposals(_write(tmp_path, "mechanism,image_id,a_head\n"), IMAGES)
    with pytest.raises(RecordError, match="column 'slate': give the four probabilities, a slate or an a_head column"):
        read_proposals(_write(tmp_path, "mechanism,image_id,diagnosis\nm,i1,MEL\n"), IMAGES)
    with pytest.raises(RecordError, match="column 'mechanism': required column is missing"):
        proposals_from_table(pa.table({"image_id": ["i1"], "a_head": ["a1"]}), "t.parquet")


def test_a_mechanism_given_by_two_parts_is_refused():
    from autheval.proposals.proposals_file import combine_proposals

    part = read_proposals_table({"mechanism": ["m"], "image_id": ["i1"], "a_head": ["a1"]})
    assert combine_proposals([part]).num_rows == 1
    with pytest.raises(RecordError, match="column 'mechanism': mechanism 'm' is given twice"):
        combine_proposals([part, part])


def read_proposals_table(columns: dict) -> pa.Table:
    from autheval.proposals.proposals_file import proposals_from_table

    return proposals_from_table(pa.table(columns), "t.parquet", IMAGES)


@pytest.mark.parametrize(
    "column, values, expected",
    [
        (
            "p_low",
            "float16",
            "column 'p_low': must be a number column (float32 or float64, an integer or a decimal) or "
            "text; got halffloat",
        ),
        ("p_high", "struct", "column 'p_high': must be a number column"),
        (
            "image_id",
            "struct",
            "column 'image_id': must be a text column (strings, or integer ids); got struct<x: int64>",
        ),
        ("mechanism", "binary", "column 'mechanism': must be a text column"),
        ("slate", "struct list", "column 'slate': must be text (\"a2 a1 a3 a0\") or a list of text; got list<"),
        ("slate", "ints", "column 'slate': must be text"),
    ],
)
def test_unsupported_parquet_column_types_are_one_line(tmp_path, column, values, expected):
    import numpy as np

    arrays = {
        "float16": pa.array(np.array([0.25, 0.25], dtype=np.float16)),
        "struct": pa.array([{"x": 1}, {"x": 2}]),
        "binary": pa.array([b"m", b"m"]),
        "struct list": pa.array([[{"a": 1}], [{"a": 2}]]),
        "ints": pa.array([1, 2]),
    }
    table = pa.table(
        {
            "mechanism": ["m", "m"],
            "image_id": ["i1", "i2"],
            "p_very_low": [0.25] * 2,
            "p_low": [0.25] * 2,
            "p_moderate": [0.25] * 2,
            "p_high": [0.25] * 2,
        }
    )
    if column in table.column_names:
        table = table.set_column(table.schema.get_field_index(column), column, arrays[values])
    else:
        table = table.append_column(column, arrays[values])
    path = tmp_path / "p.parquet"
    pq.write_table(table, path)
    with pytest.raises(RecordError) as err:
        read_proposals(path, IMAGES)
    assert f"{path}: {expected}" in str(err.value) and "\n" not in str(err.value)


def test_integer_image_ids_and_dictionary_text_are_supported(tmp_path):
    path = tmp_path / "p.parquet"
    pq.write_table(
        pa.table(
            {
                "mechanism": pa.array(["m", "m"]).dictionary_encode(),
                "image_id": pa.array([1, 2]),
                "a_head": ["a1", "a2"],
            }
        ),
        path,
    )
    assert read_proposals(path).column("image_id").to_pylist() == ["1", "2"]


# ------------------------------------------------------------------------------------------------
# Coverage of the evaluated images: decided on the file, before any table is written

EVALUATED = pa.array(["i1", "i2", "i3"])


def _coverage(rows: list[tuple[str, str]]):
    from autheval.proposals.proposals_file import check_coverage

    table = read_proposals_table(
        {"mechanism": [m for m, _ in rows], "image_id": [i for _, i in rows], "a_head": ["a1"] * len(rows)}
    )
    check_coverage(table, EVALUATED, "props.csv", "test")


def test_every_mechanism_covers_every_evaluated_image():
    _coverage([(m, i) for m in ("a", "b") for i in ("i1", "i2", "i3")])
    _coverage([(m, i) for m in ("a", "b") for i in ("i1", "i2", "i3", "i4")])  # others: allowed, unused


def test_a_mechanism_with_no_evaluated_image_is_refused_not_dropped():
    rows = [("a", i) for i in ("i1", "i2", "i3")] + [("train only", "i4"), ("train only", "i5")]
    with pytest.raises(RecordError) as err:
        _coverage(rows)
    assert str(err.value) == (
        "props.csv: column 'mechanism': mechanism 'train only' proposes for none of the 3 "
        "evaluated images (split 'test'); it would vanish from the estimates (its first image "
        "'i4' is not evaluated)"
    )
    with pytest.raises(RecordError, match="mechanism 'train only' proposes for none"):  # the only mechanism
        _coverage(rows[3:])


def test_a_mechanism_covering_some_evaluated_images_is_refused():
    with pytest.raises(RecordError) as err:
        _coverage([("a", i) for i in ("i1", "i2", "i3")] + [("b", "i1"), ("b", "i3"), ("b", "i4")])
    assert str(err.value) == (
        "props.csv: column 'mechanism': mechanism 'b' must propose for every one of the 3 "
        "evaluated images (split 'test'): 1 have no proposal (every mechanism is compared on "
        "the same clusters) (e.g. image 'i2')"
    )


def test_an_empty_evaluated_split_refuses_every_mechanism():
    from autheval.proposals.proposals_file import check_coverage

    table = read_proposals_table({"mechanism": ["a"], "image_id": ["i1"], "a_head": ["a1"]})
    with pytest.raises(RecordError, match="mechanism 'a' proposes for none of the 0 evaluated images"):
        check_coverage(table, pa.array([], pa.string()), "props.csv", "val")


def test_the_evaluated_images_are_the_clustered_images_of_the_split():
    from autheval.proposals.proposals_file import evaluated_image_ids

    clusters = pa.table(
        {
            "image_id": ["i3", "i1", "i2", "i9"],
            "cluster_id": ["k1", "k1", "k2", "k3"],
            "split": ["test", "test", "test", "train"],
        }
    )
    assert evaluated_image_ids(clusters, "test").to_pylist() == ["i1", "i2", "i3"]
    assert evaluated_image_ids(clusters, "all").to_pylist() == ["i1", "i2", "i3", "i9"]


class _Store:
    def __init__(self, **tables):
        self.tables = tables

    def read(self, name):
        return self.tables[name]


def test_the_proposals_asset_decides_coverage_before_it_writes(tmp_path):
    """The asset's own path (assets/proposals.py): the file's mechanisms are checked against the lake's
    evaluated split, so the run stops at `proposals` with one line, before selections or estimates."""
    from assets.proposals import raw_source_proposals
    from assets.resources import SourceResource  # (first: the definitions import the assets)

    store = _Store(
        images=pa.table({"image_id": ["i1", "i2", "i3", "i4"]}),
        clusters=pa.table(
            {
                "image_id": ["i1", "i2", "i3", "i4"],
                "cluster_id": ["k1", "k2", "k2", "k3"],
                "split": ["test", "test", "test", "train"],
            }
        ),
    )
    good = _write(tmp_path, "mechanism,image_id,a_head\n" + "".join(f"m,i{k},a1\n" for k in (1, 2, 3, 4)), "good.csv")
    source = SourceResource(kind="synthetic", input_dir=str(tmp_path), proposals=str(good))
    assert raw_source_proposals(store, source).num_rows == 4
    bad = _write(tmp_path, "mechanism,image_id,a_head\nm,i1,a1\nm,i2,a1\nm,i3,a1\nn,i1,a2\nn,i4,a2\n", "bad.csv")
    with pytest.raises(
        RecordError,
        match=f"{bad}: column 'mechanism': mechanism 'n' must propose for every one of the "
        "3 evaluated images \\(split 'test'\\): 2 have no proposal",
    ):
        raw_source_proposals(store, SourceResource(kind="synthetic", input_dir=str(tmp_path), proposals=str(bad)))
    every = SourceResource(kind="synthetic", input_dir=str(tmp_path), proposals=str(good), evaluate_split="all")
    assert raw_source_proposals(store, every).num_rows == 4


def test_the_cli_precheck_decides_coverage_from_a_frozen_split(tmp_path):
    """Before any lake exists, a frozen split gives the evaluated images: `precheck_proposals` is what
    `autheval demo` can run on its flags (every lake-free rule, plus coverage when --freeze is given)."""
    from autheval.proposals.proposals_file import precheck_proposals

    freeze = _write(
        tmp_path, "image_id,lesion_id,cluster_id,split\ni1,,k1,test\ni2,,k2,test\ni3,,k3,train\n", "split_freeze.csv"
    )
    good = _write(tmp_path, "mechanism,image_id,a_head\nm,i1,a1\nm,i2,a2\n", "good.csv")
    assert precheck_proposals(good, freeze).num_rows == 2
    assert precheck_proposals(good).num_rows == 2  # no freeze: the file's own rules only
    with pytest.raises(RecordError, match="mechanism 'm' must propose for every one of the 3 evaluated images"):
        precheck_proposals(good, freeze, "all")
    spaced = _write(tmp_path, "mechanism,image_id,a_head\nm ,i1,a1\n", "spaced.csv")
    with pytest.raises(RecordError, match="column 'mechanism': must not begin or end with whitespace"):
        precheck_proposals(spaced)
