"""Subgroups and fairness: per-group accuracies by hand, the bootstrap within a group equal to the
estimators run on that group alone, small groups reported as not estimable, min/max fairness."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from autheval.estimators import estimate
from autheval.records import records_from_table
from autheval.subgroups import subgroup_tables


def _study(n_clusters: int = 80, seed: int = 2):
    rng = np.random.default_rng(seed)
    images, records, contexts = [], [], []
    for c in range(n_clusters):
        cluster = f"c{c:03d}"
        sex = "female" if c % 2 else "male"
        site = "palms/soles" if c < 5 else "torso"  # a small group
        contexts.append({"cluster_id": cluster, "profile": "HAM_like" if c % 3 else "BCN_like"})
        for k in range(1 + c % 3):
            image = f"img{c:03d}_{k}"
            level = int(rng.integers(0, 4))
            images.append({"image_id": image, "sex": sex, "age": float(20 + c % 60), "anatomic_site": site,
                           "source": "synthetic", "ideal_action_level": level})
            head = level if (rng.random() < (0.8 if sex == "male" else 0.5)) else (level + 1) % 4
            sel = min(head, 2)
            u_head, u_sel = -abs(head - level) * 1.0, -abs(sel - level) * 1.0
            records.append({"analysis": "m x capacity", "case_id": image, "cluster_id": cluster,
                            "proposed_action": f"a{head}", "executed_action": f"a{sel}",
                            "utility_executed_local": u_sel, "utility_proposed_local": u_head,
                            "utility_proposed_global": u_head})
    return pa.Table.from_pylist(records), pa.Table.from_pylist(images), pa.Table.from_pylist(contexts)


def test_accuracies_fairness_and_small_groups():
    records, images, contexts = _study()
    out = subgroup_tables(records, images, contexts, groupings=("sex", "anatomic_site"), reps=200)
    groups = {(g["grouping"], g["group_value"]): g for g in out.groups.to_pylist()}
    assert set(groups) == {("sex", "female"), ("sex", "male"), ("anatomic_site", "palms/soles"),
                           ("anatomic_site", "torso")}
    # by hand: exact match of the action level with the reference level, per group
    level = {r["image_id"]: r["ideal_action_level"] for r in images.to_pylist()}
    sex = {r["image_id"]: r["sex"] for r in images.to_pylist()}
    for value in ("female", "male"):
        rows = [r for r in records.to_pylist() if sex[r["case_id"]] == value]
        hits = [int(r["proposed_action"][1:]) == level[r["case_id"]] for r in rows]
        assert groups[("sex", value)]["accuracy_proposal"] == pytest.approx(np.mean(hits), abs=1e-15)
        recalls = []
        for lv in sorted({level[r["case_id"]] for r in rows}):
            of_level = [r for r in rows if level[r["case_id"]] == lv]
            recalls.append(np.mean([int(r["executed_action"][1:]) == lv for r in of_level]))
        assert groups[("sex", value)]["balanced_accuracy_selected"] == pytest.approx(np.mean(recalls), abs=1e-15)
    small = groups[("anatomic_site", "palms/soles")]
    assert small["estimable"] is False and "not estimable" in small["reason"] and small["n_clusters"] == 5
    fairness = {r["grouping"]: r for r in out.fairness.to_pylist()}
    f = fairness["sex"]
    acc = [groups[("sex", v)]["accuracy_proposal"] for v in ("female", "male")]
    assert f["fairness_proposal"] == pytest.approx(min(acc) / max(acc), abs=1e-15)
    assert f["worst_group_proposal"] == "female" and f["n_groups"] == 2
    assert "anatomic_site" not in fairness  # one estimable site: nothing to compare


def test_the_bootstrap_within_a_group_is_the_estimators_on_that_group_alone():
    records, images, contexts = _study()
    out = subgroup_tables(records, images, contexts, groupings=("sex",), reps=300)
    male_ids = set(pc.filter(images.column("image_id"), pc.equal(images.column("sex"), "male")).to_pylist())
    part = records.filter(pc.is_in(records.column("case_id"), pa.array(sorted(male_ids))))
    part = part.sort_by("case_id").drop_columns(["analysis"])
    alone = estimate([records_from_table(part, "male", "male", "x")], reps=300)
    expected = {(e["unit"], e["metric"]): e for e in alone.estimates}
    rows = [r for r in out.subgroups.to_pylist() if r["group_value"] == "male"]
    assert len(rows) == len(expected)
    for r in rows:
        e = expected[(r["unit"], r["metric"])]
        assert (r["estimate"], r["ci_lower"], r["ci_upper"]) == (e["estimate"], e["ci_lower"], e["ci_upper"])


def test_a_not_estimable_group_carries_no_numbers_and_unknown_groupings_fail():
    records, images, contexts = _study()
    out = subgroup_tables(records, images, contexts, groupings=("anatomic_site",), reps=100)
    small = [r for r in out.subgroups.to_pylist() if r["group_value"] == "palms/soles"]
    assert len(small) == 1 and small[0]["estimate"] is None and small[0]["metric"] is None
    with pytest.raises(ValueError, match="unknown grouping 'skin'"):
        subgroup_tables(records, images, contexts, groupings=("skin",))


def test_a_grouping_the_data_cannot_split_is_left_out():
    records, images, contexts = _study()
    out = subgroup_tables(records, images, contexts, groupings=("sex", "fitzpatrick"), reps=100)
    assert set(out.groups.column("grouping").to_pylist()) == {"sex"}


def test_missing_values_are_a_reported_group_but_never_compared():
    records, images, contexts = _study()
    sexes = [None if i % 5 == 0 else s for i, s in enumerate(images.column("sex").to_pylist())]
    images = images.set_column(images.schema.get_field_index("sex"), "sex", pa.array(sexes, pa.string()))
    out = subgroup_tables(records, images, contexts, groupings=("sex",), min_clusters=5, min_images=5, reps=100)
    values = {g["group_value"]: g["estimable"] for g in out.groups.to_pylist()}
    assert values == {"female": True, "male": True, "missing": True}
    assert out.fairness.to_pylist()[0]["n_groups"] == 2
