"""The raw path against AuthEval's published ISIC 2019 artefacts: cluster ids, exact groups and
threshold-4 components re-derived from the frozen split, the exact-group file and the stored hashes."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from autheval.errors import RecordError
from autheval.raw.clusters import assign_clusters, cluster_id_from_nodes
from autheval.raw.duplicates import components, exact_groups
from autheval.raw.splits import crossing_clusters, read_freeze, validate_freeze
from tests.conftest import reference_file


def _read(name: str) -> pa.Table:
    path = reference_file(name)
    if path.suffix == ".parquet":
        table = pq.read_table(path)
    else:
        table = read_freeze(path)  # every column as text, pandas' missing markers as NULL
    return table


@pytest.fixture(scope="module")
def freeze() -> pa.Table:
    return _read("split_freeze")


@pytest.fixture(scope="module")
def exact_file() -> pa.Table:
    return _read("phash_exact_duplicate_components")


@pytest.fixture(scope="module")
def report() -> pa.Table:
    return _read("phash_duplicate_report")


def _hashes(table: pa.Table) -> pa.Table:
    values = [int(h, 16) for h in table.column("image_hash").to_pylist()]
    return pa.table({"image_id": table.column("image_id"), "phash": pa.array(values, pa.uint64())})


A1 = [
    (["base:image:ISIC_0000000"], "cluster:d70b2c24611556a45d24"),
    (["base:lesion:HAM_0006116"], "cluster:0000f90f111b32ed89cf"),
    (["base:lesion:BCN_0000072", "base:lesion:HAM_0001264"], "cluster:24d82ee0dd7f8dc4b295"),
    (["base:lesion:BCN_0000286", "base:lesion:BCN_0005675"], "cluster:ab4a012ae4e30b9a6dd6"),
    (["base:image:ISIC_0012127_downsampled", "base:lesion:MSK4_0011472"], "cluster:3529efe3294765a2b491"),
]


@pytest.mark.parametrize("nodes,expected", A1)
def test_appendix_a1_cluster_ids(nodes, expected):
    assert cluster_id_from_nodes(nodes) == expected
    assert cluster_id_from_nodes(list(reversed(nodes))) == expected  # independent of order


def test_all_frozen_cluster_ids_rederive(freeze, exact_file):
    clusters = assign_clusters(
        freeze.select(["image_id", "lesion_id"]), exact_file.select(["image_id", "exact_group_id"])
    )
    frozen = dict(zip(freeze.column("image_id").to_pylist(), freeze.column("cluster_id").to_pylist()))
    got = dict(zip(clusters.column("image_id").to_pylist(), clusters.column("cluster_id").to_pylist()))
    assert len(got) == 25331
    assert sum(got[i] == frozen[i] for i in frozen) == 25331
    assert len(set(got.values())) == 13920
    assert set(clusters.column("split_key").to_pylist()) == {"lesion_id_or_image_id+duplicate_group"}
    assert got["ISIC_0000000"] == "cluster:d70b2c24611556a45d24"  # Appendix A.1, through the SQL path


def test_frozen_split_validates_and_no_cluster_crosses(freeze, exact_file):
    clusters = assign_clusters(
        freeze.select(["image_id", "lesion_id"]), exact_file.select(["image_id", "exact_group_id"])
    )
    splits = validate_freeze(freeze, clusters)
    assert splits.num_rows == 25331
    counts = {s: splits.column("split").to_pylist().count(s) for s in ("train", "val", "test")}
    assert counts == {"train": 17629, "val": 3735, "test": 3967}
    assert crossing_clusters(splits).num_rows == 0


def _tampered(freeze: pa.Table, column: str, row: int, value) -> pa.Table:
    values = freeze.column(column).to_pylist()
    values[row] = value
    return freeze.set_column(freeze.column_names.index(column), column, pa.array(values, pa.string()))


@pytest.mark.parametrize(
    "column,row,value,rule",
    [
        ("cluster_id", 5, "cluster:00000000000000000000", "differs from the cluster id recomputed"),
        ("split", 7, "holdout", "must be one of train, val, test"),
        ("image_id", 9, "ISIC_0000000", "must be unique"),
    ],
)
def test_tampered_freeze_is_rejected(freeze, exact_file, column, row, value, rule):
    clusters = assign_clusters(
        freeze.select(["image_id", "lesion_id"]), exact_file.select(["image_id", "exact_group_id"])
    )
    with pytest.raises(RecordError) as err:
        validate_freeze(_tampered(freeze, column, row, value), clusters, source="split_freeze.csv")
    text = str(err.value)
    assert rule in text and "\n" not in text and text.startswith("split_freeze.csv: column")
    assert err.value.exit_code == 2


def test_freeze_with_missing_images_or_crossing_cluster_is_rejected(freeze, exact_file):
    clusters = assign_clusters(
        freeze.select(["image_id", "lesion_id"]), exact_file.select(["image_id", "exact_group_id"])
    )
    with pytest.raises(RecordError, match="missing from the freeze"):
        validate_freeze(freeze.slice(1), clusters)
    # put one image of a multi-image cluster into another split
    ids = freeze.column("cluster_id").to_pylist()
    row = next(i for i in range(1, len(ids)) if ids[i] == ids[i - 1])
    other = {"train": "val", "val": "test", "test": "train"}[freeze.column("split")[row].as_py()]
    with pytest.raises(RecordError, match="a cluster spans more than one split"):
        validate_freeze(_tampered(freeze, "split", row, other), clusters)


def test_exact_groups_rederive_from_report_hashes(report, exact_file):
    groups = exact_groups(_hashes(report))
    assert groups.num_rows == 191
    assert len(set(groups.column("exact_group_id").to_pylist())) == 95
    got = sorted(zip(groups.column("exact_group_id").to_pylist(), groups.column("image_id").to_pylist()))
    expected = sorted(zip(exact_file.column("exact_group_id").to_pylist(), exact_file.column("image_id").to_pylist()))
    assert got == expected
    sizes = sorted(groups.column("group_size").to_pylist())
    assert sizes.count(3) == 3 and sizes.count(2) == 188  # 94 pairs + 1 triple


def test_threshold4_components_rederive_with_sql_join(report):
    comps = components(_hashes(report), 4, splits=report.select(["image_id", "split"]))
    assert comps.num_rows == 1777
    ids = comps.column("component_id").to_pylist()
    assert len(set(ids)) == 594
    got = sorted(zip(ids, comps.column("image_id").to_pylist()))
    expected = sorted(zip(report.column("component_id").to_pylist(), report.column("image_id").to_pylist()))
    assert got == expected  # memberships and PHASH numbering
    crossing = {c for c, x in zip(ids, comps.column("component_crosses_split").to_pylist()) if x}
    assert len(crossing) == 122
    flags = dict(zip(report.column("image_id").to_pylist(), report.column("exact_hash_duplicate").to_pylist()))
    got_flags = zip(comps.column("image_id").to_pylist(), comps.column("exact_hash_duplicate").to_pylist())
    assert all(str(flags[i]) == str(x) for i, x in got_flags)  # text 'True' in the CSV, bool in Parquet
    sizes = {}
    for c in ids:
        sizes[c] = sizes.get(c, 0) + 1
    assert sorted(sizes.values(), reverse=True)[:5] == [69, 61, 55, 48, 40]
