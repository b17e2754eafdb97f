"""Subgroups and fairness: per-group accuracies by hand, the bootstrap within a group equal to the
estimators run on that group alone, small groups reported as not estimable, min/max fairness."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from autheval.estimation.estimators import estimate
from autheval.estimation.subgroups import subgroup_tables
from autheval.records.read import records_from_table


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
            images.append(
                {
                    "image_id": image,
                    "sex": sex,
                    "age": float(20 + c % 60),
                    "anatomic_site": site,
                    "source": "synthetic",
                    "ideal_action_level": level,
                }
            )
            head = level if (rng.random() < (0.8 if sex == "male" else 0.5)) else (level + 1) % 4
            sel = min(head, 2)
            u_head, u_sel = -abs(head - level) * 1.0, -abs(sel - level) * 1.0
            records.append(
                {
                    "analysis": "m x capacity",
                    "case_id": image,
                    "cluster_id": cluster,
                    "proposed_action": f"a{head}",
                    "executed_action": f"a{sel}",
                    "utility_executed_local": u_sel,
                    "utility_proposed_local": u_head,
                    "utility_proposed_global": u_head,
                }
            )
    return pa.Table.from_pylist(records), pa.Table.from_pylist(images), pa.Table.from_pylist(contexts)


def test_accuracies_fairness_and_small_groups():
    records, images, contexts = _study()
    out = subgroup_tables(records, images, contexts, groupings=("sex", "anatomic_site"), reps=200)
    groups = {(g["grouping"], g["group_value"]): g for g in out.groups.to_pylist()}
    assert set(groups) == {
        ("sex", "female"),
        ("sex", "male"),
        ("anatomic_site", "palms/soles"),
        ("anatomic_site", "torso"),
    }
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
    out = subgroup_tables(records, images, contexts, groupings=("sex", "fitzpatrick_skin_type"), reps=100)
    assert set(out.groups.column("grouping").to_pylist()) == {"sex"}


def test_missing_values_are_a_reported_group_but_never_compared():
    records, images, contexts = _study()
    sexes = [None if i % 5 == 0 else s for i, s in enumerate(images.column("sex").to_pylist())]
    images = images.set_column(images.schema.get_field_index("sex"), "sex", pa.array(sexes, pa.string()))
    out = subgroup_tables(records, images, contexts, groupings=("sex",), min_clusters=5, min_images=5, reps=100)
    values = {g["group_value"]: g["estimable"] for g in out.groups.to_pylist()}
    assert values == {"female": True, "male": True, "missing": True}
    assert out.fairness.to_pylist()[0]["n_groups"] == 2


def _groups(layout: dict[str, list[int]], grouping: str = "anatomic_site"):
    """records, images, contexts where group g has one cluster per entry of layout[g], of that many
    images; every proposal right, every selection one level down (so accuracies differ by group)."""
    images, records, contexts = [], [], []
    for value, sizes in layout.items():
        for c, size in enumerate(sizes):
            cluster = f"{value}-c{c}"
            contexts.append({"cluster_id": cluster, "profile": "HAM_like"})
            for k in range(size):
                image = f"{cluster}-i{k}"
                level = (c + k) % 4
                images.append(
                    {
                        "image_id": image,
                        "sex": "female" if k % 2 else "male",
                        "age": 40.0,
                        "anatomic_site": value,
                        "source": "s",
                        "ideal_action_level": level,
                    }
                )
                sel = max(level - 1, 0)
                records.append(
                    {
                        "analysis": "m / mixed",
                        "case_id": image,
                        "cluster_id": cluster,
                        "proposed_action": f"a{level}",
                        "executed_action": f"a{sel}",
                        "utility_executed_local": -float(level - sel),
                        "utility_proposed_local": 0.0,
                        "utility_proposed_global": 0.0,
                    }
                )
    return pa.Table.from_pylist(records), pa.Table.from_pylist(images), pa.Table.from_pylist(contexts)


def test_the_minimums_are_inclusive_and_both_are_needed():
    """A group at exactly the declared minimums is estimable; one that meets only the image minimum
    (many images in few clusters) or only the cluster minimum (with min_images above min_clusters) is not."""
    records, images, contexts = _groups(
        {
            "exact": [2, 1, 1, 2],  # 4 clusters, 6 images: exactly the minimums
            "images only": [3, 2, 2],  # 7 images but 3 clusters
            "clusters only": [1] * 5,  # 5 clusters but 5 images
            "both": [2, 2, 2, 2, 2],
        }
    )
    out = subgroup_tables(
        records, images, contexts, groupings=("anatomic_site",), min_clusters=4, min_images=6, reps=50
    )
    groups = {g["group_value"]: g for g in out.groups.to_pylist()}
    assert {v: (g["n_images"], g["n_clusters"]) for v, g in groups.items()} == {
        "exact": (6, 4),
        "images only": (7, 3),
        "clusters only": (5, 5),
        "both": (10, 5),
    }
    assert {v: g["estimable"] for v, g in groups.items()} == {
        "exact": True,
        "images only": False,
        "clusters only": False,
        "both": True,
    }
    assert groups["images only"]["reason"] == (
        "not estimable: 7 images in 3 clusters (declared minimum 6 images, 4 clusters)"
    )
    with_numbers = {r["group_value"] for r in out.subgroups.to_pylist() if r["estimate"] is not None}
    assert with_numbers == {"exact", "both"}


def test_fairness_of_the_selected_action_and_of_balanced_accuracy():
    records, images, contexts = _study()
    out = subgroup_tables(records, images, contexts, groupings=("sex",), reps=100)
    groups = {g["group_value"]: g for g in out.groups.to_pylist()}
    f = out.fairness.to_pylist()[0]
    for role in ("proposal", "selected"):
        acc = {v: groups[v][f"accuracy_{role}"] for v in ("female", "male")}
        assert f[f"fairness_{role}"] == pytest.approx(min(acc.values()) / max(acc.values()), abs=1e-15)
        assert f[f"worst_group_{role}"] == min(acc, key=acc.get)
        assert f[f"min_accuracy_{role}"] == min(acc.values()) and f[f"max_accuracy_{role}"] == max(acc.values())
        bal = [groups[v][f"balanced_accuracy_{role}"] for v in ("female", "male")]
        assert f[f"balanced_fairness_{role}"] == pytest.approx(min(bal) / max(bal), abs=1e-15)
    assert f["fairness_selected"] != f["fairness_proposal"]  # the two roles are not one number


def test_the_selected_role_has_its_own_worst_group():
    """Proposals worse for one group, selections worse for the other: each role names its own."""
    records, images, contexts = _groups({"a": [2] * 4, "b": [2] * 4})
    rows = records.to_pylist()
    site = {r["image_id"]: r["anatomic_site"] for r in images.to_pylist()}
    level = {r["image_id"]: r["ideal_action_level"] for r in images.to_pylist()}
    for r in rows:  # group a: proposals wrong half the time, selections right; group b: the reverse
        wrong = int(r["case_id"][-1]) % 2 == 0
        good, bad = f"a{level[r['case_id']]}", f"a{(level[r['case_id']] + 1) % 4}"
        if site[r["case_id"]] == "a":
            r["proposed_action"], r["executed_action"] = (bad if wrong else good), good
        else:
            r["proposed_action"], r["executed_action"] = good, (bad if wrong else good)
        r["utility_proposed_local"] = r["utility_executed_local"] = 0.0
        if r["proposed_action"] == r["executed_action"]:
            r["utility_proposed_local"] = r["utility_executed_local"]
    out = subgroup_tables(
        pa.Table.from_pylist(rows),
        images,
        contexts,
        groupings=("anatomic_site",),
        min_clusters=2,
        min_images=2,
        reps=50,
    )
    f = out.fairness.to_pylist()[0]
    assert (f["worst_group_proposal"], f["worst_group_selected"]) == ("a", "b")
    assert f["fairness_proposal"] == f["fairness_selected"] == 0.5
