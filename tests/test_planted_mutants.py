"""Tests that kill plausible one-line bugs planted in last round's code (issue 27, "Tests that can fail"),
each against an independent computation, never against the code's own formula:

* the same-action score tolerance 1e-12 -> 1e-6 (sql/records/records_validate.sql, rule 10);
* the cluster-equal Delta_utility point estimate computed as Delta_total's (sql/estimates/replicates_point.sql);
* the MAVIC gate centred on the group mean instead of the median (models/mavic.py);
* the benchmark's smallest-group count counting items (sql/proposals/benchmark_fairness.sql);
* the benchmark cache key ignoring the image bytes (models/benchmark.py item_sha256);
* the lake's subgroups ignoring --min-group-clusters (assets/subgroups.py)."""

from __future__ import annotations

import hashlib
import json
import math
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest
from PIL import Image

from autheval.errors import RecordError


def test_a_same_action_score_differing_by_a_billionth_is_refused(tmp_path):
    """Identical actions must carry identical scores to 1e-12: 1e-9 apart is refused, 1e-13 is not."""
    from autheval.records.read import read_records

    header = "case_id,cluster_id,proposed_action,executed_action,utility_executed_local,utility_proposed_local\n"
    good = "c1,k1,a0,a0,0.0,0.0\nc2,k2,a1,a0,-1.0,-2.0\n"
    bad = tmp_path / "bad.csv"
    bad.write_text(header + good + "c3,k2,a2,a2,-0.5,-0.500000001\n")
    with pytest.raises(RecordError, match="utility_proposed_local.*identical actions must have identical scores"):
        read_records(bad)
    fine = tmp_path / "fine.csv"
    fine.write_text(header + good + "c3,k2,a2,a2,-0.5,-0.5000000000001\n")
    assert read_records(fine).n_changed == 1


def _utility_rows() -> list[dict]:
    """Clusters of 1, 2 and 4 cases whose global and local proposal scores differ by cluster, so the
    two units and the two total/utility gaps all differ."""
    rows = []
    layout = {"k1": 1, "k2": 2, "k3": 4}
    for c, (cluster, size) in enumerate(layout.items()):
        for i in range(size):
            changed = i == 0
            u_exec = -1.0 - 0.25 * i
            u_prop = u_exec - (0.5 + c) if changed else u_exec
            rows.append(
                {
                    "case_id": f"{cluster}-{i}",
                    "cluster_id": cluster,
                    "proposed_action": "a1",
                    "executed_action": "a2" if changed else "a1",
                    "utility_executed_local": u_exec,
                    "utility_proposed_local": u_prop,
                    "utility_proposed_global": u_prop + 0.1 * (c + 1) * (i + 1),
                }
            )
    return rows


def test_the_cluster_equal_delta_utility_point_is_the_mean_of_cluster_means_of_global_minus_local():
    from autheval.estimation.estimators import estimate
    from autheval.records.read import records_from_table

    rows = _utility_rows()
    records = records_from_table(pa.Table.from_pylist(rows), "log", "log", "0" * 64)
    with pytest.warns(Warning):  # few replicates and few clusters: the points are what is checked
        result = estimate([records], scheme="reference", reps=50)
    k = np.array([r["cluster_id"] for r in rows])
    glob = np.array([r["utility_proposed_global"] for r in rows])
    local = np.array([r["utility_proposed_local"] for r in rows])
    executed = np.array([r["utility_executed_local"] for r in rows])
    for metric, values in (("Delta_utility", glob - local), ("Delta_total", glob - executed)):
        image_weighted = values.mean()
        cluster_equal = np.mean([values[k == c].mean() for c in dict.fromkeys(k)])
        assert result.estimate("log", "image_weighted", metric)["estimate"] == pytest.approx(image_weighted, abs=1e-12)
        assert result.estimate("log", "cluster_equal", metric)["estimate"] == pytest.approx(cluster_equal, abs=1e-12)
    utility = result.estimate("log", "cluster_equal", "Delta_utility")["estimate"]
    assert utility != pytest.approx(result.estimate("log", "cluster_equal", "Delta_total")["estimate"], abs=1e-6)


def test_the_mavic_gate_is_centred_on_each_groups_median():
    from tests.test_mavic import REF, completion, score

    diagnoses = ["MEL", "NV", "BCC", "MEL", "MEL", "NV", "SCC"]
    groups = [0, 0, 0, 1, 1, 1, 1]
    out = score([completion(REF, d) for d in diagnoses], groups=groups)
    s = out["s_hier"]
    group = np.asarray(groups)
    for g in (0, 1):
        members = s[group == g]
        assert np.median(members) != pytest.approx(members.mean(), abs=1e-3)  # the cases tell them apart
    k = 10.0
    expected = [1.0 / (1.0 + math.exp(-k * (s[i] - np.median(s[group == group[i]])))) for i in range(len(s))]
    np.testing.assert_allclose(out["gate"], expected, atol=1e-12)


def test_the_benchmark_smallest_group_counts_clusters_not_items():
    from autheval.estimation.benchmark import RESULTS_SCHEMA, fairness_table

    # group A: 4 items of one lesion (1 cluster); group B: 2 items of 2 lesions
    items = [("q1", "k1", "A"), ("q2", "k1", "A"), ("q3", "k1", "A"), ("q4", "k1", "A"), ("q5", "k2", "B")]
    items += [("q6", "k3", "B")]
    rows = [
        {
            "mechanism": "m",
            "model": "tiny",
            "item_id": item,
            "cluster_id": cluster,
            "axis": "x",
            "task": "t",
            "group": f"tone={group}",
            "correct": i % 2 == 0,
        }
        for i, (item, cluster, group) in enumerate(items)
    ]
    table = pa.Table.from_pylist(rows, schema=pa.schema([f for f in RESULTS_SCHEMA if f.name in rows[0]]))
    for name in RESULTS_SCHEMA.names:
        if name not in table.column_names:
            table = table.append_column(
                RESULTS_SCHEMA.field(name), pa.nulls(table.num_rows, RESULTS_SCHEMA.field(name).type)
            )
    fairness = fairness_table(table.select(RESULTS_SCHEMA.names)).to_pylist()
    overall = [r for r in fairness if r["task"] is None and r["grouping"] == "tone"]
    assert len(overall) == 1
    clusters = {g: len({c for _, c, gg in items if gg == g}) for g in "AB"}
    counts = {g: sum(gg == g for *_, gg in items) for g in "AB"}
    assert overall[0]["smallest_group_clusters"] == min(clusters.values()) == 1
    assert overall[0]["smallest_group_items"] == min(counts.values()) == 2


def test_the_benchmark_cache_key_is_the_prompt_the_options_and_the_image_bytes(tmp_path):
    from models.benchmark import item_sha256

    path = tmp_path / "image.png"
    Image.new("RGB", (8, 8), (200, 150, 120)).save(path)
    prompt, options = "Which?\nOptions:\nA. melanoma\nB. nevus\nAnswer:", ["melanoma", "nevus"]
    expected = hashlib.sha256(
        prompt.encode() + b"\0" + json.dumps(options, ensure_ascii=False).encode() + b"\0" + path.read_bytes()
    ).hexdigest()
    first = item_sha256(prompt, options, str(path))
    assert first == expected
    Image.new("RGB", (8, 8), (20, 15, 12)).save(path)  # the same path, other bytes: scored again
    assert item_sha256(prompt, options, str(path)) != first


def test_the_lake_subgroups_take_the_declared_minimum_number_of_clusters(monkeypatch):
    """The asset hands `--min-group-clusters` (SourceResource.min_group_clusters) to the statistics as
    both minimums; the statistics' own default (30) must not stand in for it."""
    import assets.subgroups as module

    class Captured(Exception):
        pass

    seen: dict = {}

    def subgroup_tables(records, images, contexts, **options):
        seen.update(options)
        raise Captured

    monkeypatch.setattr(module, "subgroup_tables", subgroup_tables)
    empty = pa.table({"analysis": pa.array([], pa.string())})
    store = SimpleNamespace(read=lambda name: empty, tables=lambda: ["records"])
    compute = module.subgroups.op.compute_fn.decorated_fn
    for minimum in (1, 7, 300):
        seen.clear()
        source = SimpleNamespace(min_group_clusters=minimum, reps=50)
        with pytest.raises(Captured):
            list(compute(SimpleNamespace(log=None), SimpleNamespace(lake=lambda: store), source, None))
        assert seen["min_clusters"] == minimum and seen["min_images"] == minimum, seen
