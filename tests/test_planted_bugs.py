"""Cases that plausible one-line bugs get wrong while every other test still passes: each test feeds the
case and goes red when the code is broken that way (each was checked by breaking the code on purpose).

Review engine: a floor equal to the capacity (mixed regime) is a band of one action, not an empty band;
the fallback from a band of {a3} alone; no U_z for an image whose cluster has no context; the global
score's own weights and the declared empty-band default under rules that are not the study's (where
they coincide with the local weights and with `if_band_has`, a mix-up shows nowhere). CCT: a negative
variant index. The rules, proposals and subgroup cases live beside their modules' other tests
(tests/test_rules.py, tests/test_proposals.py, tests/test_subgroups.py).
"""

from __future__ import annotations

import pyarrow as pa
import pytest
import yaml

from autheval.errors import RecordError
from autheval.review import local_review as review
from autheval.review.rules import default_rules_text, load_rules, parse_rules
from warehouse.sql import connect

RULES = load_rules()
FULL = ["a3", "a2", "a1", "a0"]


def rules_with(mutate):
    data = yaml.safe_load(default_rules_text())
    mutate(data)
    return parse_rules(yaml.safe_dump(data, sort_keys=False), source="service.yaml")


def context(cluster_id, profile, risk_bin, rule_file=RULES, burden="low", aversion="neutral"):
    """The context row context/contexts.sql would give (profile, bin, factors), under `rule_file`."""
    rules = rule_file.rules
    p = rules.profiles[profile]
    floor = min(max(rules.floor.base[risk_bin] + rules.floor.shift[p.floor_policy], 0), 3)
    return {
        "cluster_id": cluster_id,
        "profile": profile,
        "risk_bin": risk_bin,
        "burden": burden,
        "aversion": aversion,
        "capacity": int(p.capacity[1]),
        "floor": floor,
        "w_under": p.w_under,
        "w_over": p.w_over,
    }


def select(contexts, proposals, rule_file=RULES):
    con = connect()
    params = review.register_rules(con, rule_file)
    con.register("contexts", pa.Table.from_pylist(contexts))
    con.register("clusters", pa.table({"image_id": [p[0] for p in proposals], "cluster_id": [p[1] for p in proposals]}))
    con.register(
        "proposals",
        pa.Table.from_pylist([{"mechanism": "m", "image_id": i, "slate": s, "a_head": s[0]} for i, _, s in proposals]),
    )
    review.build_selections(con, params)
    return {
        (r["image_id"], r["regime"]): (r["a_sel"], r["change_type"], r["override"], r["band_mask"])
        for r in con.table("selections").arrow().read_all().to_pylist()
    }


def test_mixed_floor_equal_to_capacity_is_a_band_of_one_action():
    """RURAL_like at high risk: capacity a1, floor clip(2 - 1) = a1. The mixed band is {a1}, not the
    empty band (whose default, a2 at high risk, would exceed the capacity)."""
    got = select([context("c", "RURAL_like", "high")], [("i", "c", FULL), ("j", "c", ["a1", "a0", "a2", "a3"])])
    assert got[("i", "mixed")] == ("a1", "down_substitution", None, 0b0010)
    assert got[("j", "mixed")] == ("a1", "none", None, 0b0010)
    assert got[("i", "capacity_ceiling")] == ("a1", "down_substitution", None, 0b0011)
    assert got[("i", "safety_floor")] == ("a3", "none", None, 0b1110)


def test_fallback_from_a_band_of_a3_alone():
    """MSK_like (strict) at high risk: floor a3, so the safety and mixed bands are {a3} (mask 8); a slate
    of a0, a1 has nothing admissible and falls back to the band's highest action, a3."""
    got = select([context("c", "MSK_like", "high")], [("i", "c", ["a0", "a1"])])
    assert got[("i", "safety_floor")] == ("a3", "fallback", None, 0b1000)
    assert got[("i", "mixed")] == ("a3", "fallback", None, 0b1000)
    assert got[("i", "capacity_ceiling")] == ("a0", "none", None, 0b1111)


def score(contexts, images, selections, rule_file=RULES):
    con = connect()
    params = review.register_rules(con, rule_file)
    con.register("contexts", pa.Table.from_pylist(contexts))
    con.register("images", pa.table({"image_id": [i for i, _, _ in images], "risk_stratum": [r for _, r, _ in images]}))
    con.register("clusters", pa.table({"image_id": [i for i, _, _ in images], "cluster_id": [c for _, _, c in images]}))
    con.register(
        "selections",
        pa.Table.from_pylist(
            [
                {
                    "analysis": "m / mixed",
                    "mechanism": "m",
                    "regime": "mixed",
                    "image_id": i,
                    "cluster_id": c,
                    "a_head": h,
                    "a_sel": s,
                }
                for i, c, h, s in selections
            ]
        ),
    )
    review.build_scores(con, params)
    return {r["image_id"]: r for r in con.table("scored_selections").arrow().read_all().to_pylist()}


def test_no_local_score_for_an_image_whose_cluster_has_no_context():
    """U_z needs the cluster's weights: without a context every local score is NULL, also for the
    action at the reference level (gap 0, where a 0.0 needs no weight and is so easily given)."""
    got = score(
        [{"cluster_id": "known", "w_under": 1.5, "w_over": 0.9}],
        [
            ("exact", "high", "nowhere"),
            ("under", "high", "nowhere"),
            ("over", "very_low", "nowhere"),
            ("scored", "high", "known"),
        ],
        [
            ("exact", "nowhere", "a3", "a3"),
            ("under", "nowhere", "a1", "a3"),
            ("over", "nowhere", "a2", "a0"),
            ("scored", "known", "a3", "a2"),
        ],
    )
    for image in ("exact", "under", "over"):
        assert got[image]["u_local_head"] is None and got[image]["u_local_sel"] is None, image
    assert got["exact"]["u_global_head"] == 0.0 and got["over"]["u_global_head"] == -2.4  # U_g needs no context
    assert got["scored"]["u_local_head"] == 0.0 and got["scored"]["u_local_sel"] == -1.5 * 4.0


def test_the_global_score_has_its_own_weights():
    """U_g = U(y, head; global w_under, global w_over): under a service's rules whose global weights
    (2.0 under, 0.5 over) differ from each other and from the local ones, each weight is used where it
    belongs (the study's 1.2 / 1.2 would hide a swap or a local weight)."""
    rules = rules_with(lambda d: d.update(global_utility={"w_under": 2.0, "w_over": 0.5}))
    ctx = {"cluster_id": "c", "w_under": 1.5, "w_over": 3.0}
    got = score(
        [ctx],
        [("under", "moderate", "c"), ("over", "very_low", "c")],
        [("under", "c", "a0", "a2"), ("over", "c", "a3", "a1")],
        rule_file=rules,
    )
    assert got["under"]["u_global_head"] == ((-2.0) * 2.0) * 2.0  # w_under * severity(moderate) * 2 levels
    assert got["under"]["u_local_head"] == ((-1.5) * 2.0) * 2.0
    assert got["over"]["u_global_head"] == (-0.5) * 3.0
    assert got["over"]["u_local_head"] == (-3.0) * 3.0 and got["over"]["u_local_sel"] == (-3.0) * 1.0
    records = connect()
    params = review.register_rules(records, rules)
    assert (params["global_w_under"], params["global_w_over"]) == (2.0, 0.5)


def test_the_empty_band_default_is_its_own_table():
    """The band emptied by the overrides becomes `empty_band_default[bin]`, not the burden override's
    `if_band_has[bin]` (the study's files give both the same actions, so a mix-up shows only here)."""
    rules = rules_with(
        lambda d: d.update(empty_band_default={"very_low": "a1", "low": "a1", "moderate": "a3", "high": "a1"})
    )
    assert rules.rules.overrides.patient_burden.if_band_has["high"] == "a2"
    got = select([context("c", "MSK_like", "high", rules, aversion="averse")], [("i", "c", FULL)], rule_file=rules)
    assert got[("i", "safety_floor")] == ("a1", "down_substitution", "empty_band_default", 0b0010)
    assert got[("i", "mixed")] == ("a1", "down_substitution", "empty_band_default", 0b0010)
    assert got[("i", "capacity_ceiling")] == ("a2", "down_substitution", "patient_refusal", 0b0111)


def test_the_burden_override_reads_if_band_has_not_the_default():
    """The other direction: `if_band_has` decides the burden override, whatever the empty-band default
    says (here they differ in every bin)."""
    rules = rules_with(
        lambda d: d["overrides"]["patient_burden"].update(
            if_band_has={"very_low": "a2", "low": "a2", "moderate": "a0", "high": "a0"}
        )
    )
    slate = ["a1", "a0", "a2", "a3"]
    # RURAL_like, low bin, capacity band {a0, a1}: if_band_has a2 is not in it, so a1 stays
    got = select([context("c", "RURAL_like", "low", rules, burden="high")], [("i", "c", slate)], rule_file=rules)
    assert got[("i", "capacity_ceiling")] == ("a1", "none", None, 0b0011)
    # BCN_like, moderate bin: the safety band {a1, a2, a3} lacks if_band_has a0 (a1 stays); the capacity
    # band {a0 .. a3} holds it (a1 leaves)
    got = select([context("c", "BCN_like", "moderate", rules, burden="high")], [("i", "c", slate)], rule_file=rules)
    assert got[("i", "safety_floor")] == ("a1", "none", None, 0b1110)
    assert got[("i", "capacity_ceiling")] == ("a0", "down_substitution", "patient_burden", 0b1101)


def test_cct_refuses_a_negative_variant_index():
    """Variant -1 is not a prompt variant: one line naming the column, never an index that wraps
    around (numpy would put it in the last variant's slot)."""
    from autheval.proposals.cct import variant_probabilities

    table = pa.table(
        {
            "case_id": ["A"] * 8,
            "variant": [0] * 4 + [-1] * 4,
            "option": ["a0", "a1", "a2", "a3"] * 2,
            "prob": [0.25] * 8,
        }
    )
    with pytest.raises(RecordError) as err:
        variant_probabilities(table, "probs.csv")
    assert err.value.column == "variant" and "must be a non-negative integer" in str(err.value)
    assert "row 5" in str(err.value)
