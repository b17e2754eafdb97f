"""The review engine on hand-built cases: profiles (A.3), private factors (A.2), the cluster context,
every band and override path, the fallback, the scores' multiplication order, records."""

from __future__ import annotations

import math

import pyarrow as pa
import pytest
import yaml

from autheval.review import local_review as review
from autheval.review.rules import default_rules_text, load_rules, parse_rules
from warehouse.sql import connect, one, to_table

RULES = load_rules()

SITES = [
    "anterior torso",
    "head/neck",
    "lateral torso",
    "lower extremity",
    "oral/genital",
    "palms/soles",
    "posterior torso",
    "upper extremity",
    None,
]
AGES = {"<30": 25.0, "30-50": 40.0, "50-70": 60.0, "70+": 80.0, "nan": None}
# Spec Appendix A.3: profile (prefix) for every reachable signature age_bin|site.
A3 = {
    "<30": "BCN MSK RURAL BCN MSK MSK MSK HAM RURAL",
    "30-50": "RURAL MSK MSK BCN HAM RURAL HAM MSK RURAL",
    "50-70": "RURAL RURAL HAM HAM MSK RURAL MSK BCN RURAL",
    "70+": "RURAL RURAL RURAL MSK RURAL BCN HAM MSK RURAL",
    "nan": "HAM RURAL RURAL HAM HAM HAM RURAL BCN BCN",
}


def engine(rule_file=RULES, **tables):
    con = connect()
    params = review.register_rules(con, rule_file)
    for name, table in tables.items():
        con.register(name, table)
    return con, params


def rows(con, table: str, order: str = "") -> list[dict]:
    rel = con.table(table)
    return (rel.order(order) if order else rel).arrow().read_all().to_pylist()


def image_profiles(images: pa.Table, option: str) -> dict[str, str]:
    con, params = engine(images=images)
    to_table(con, "image_profiles", "ingest/image_profiles", {**params, "missing_rule": option})
    return {r["image_id"]: r["profile"] for r in rows(con, "image_profiles")}


def test_a3_profile_for_every_reachable_signature():
    cases = [(f"{b}|{s}", age, s) for b, age in AGES.items() for s in SITES]
    images = pa.table(
        {
            "image_id": [c[0] for c in cases],
            "age": pa.array([c[1] for c in cases], pa.float64()),
            "anatomic_site": [c[2] for c in cases],
        }
    )
    # nan|__missing_site__ -> BCN is the released code's signature (option nan_age_bin)
    got = image_profiles(images, "nan_age_bin")
    for age_bin, expected in A3.items():
        for site, prefix in zip(SITES, expected.split()):
            assert got[f"{age_bin}|{site}"] == f"{prefix}_like", (age_bin, site)


def test_missing_age_and_site_is_the_declared_option():
    images = pa.table(
        {
            "image_id": ["ISIC_0014818_downsampled", "ISIC_0000000"],
            "age": pa.array([None, 55.0], pa.float64()),
            "anatomic_site": [None, "anterior torso"],
        }
    )
    assert image_profiles(images, "missing_tokens")["ISIC_0014818_downsampled"] == "HAM_like"
    assert image_profiles(images, "nan_age_bin")["ISIC_0014818_downsampled"] == "BCN_like"
    assert image_profiles(images, "image_id")["ISIC_0014818_downsampled"] == "RURAL_like"
    for option in ("missing_tokens", "nan_age_bin", "image_id"):  # metadata present: the option is not used
        assert image_profiles(images, option)["ISIC_0000000"] == "RURAL_like"


def test_age_bins_are_right_closed():
    images = pa.table(
        {
            "image_id": ["a30", "a0", "a70", "a71"],
            "age": [30.0, 0.0, 70.0, 70.5],
            "anatomic_site": ["anterior torso"] * 4,
        }
    )
    got = image_profiles(images, "missing_tokens")
    assert got["a30"] == "BCN_like"  # <30|anterior torso
    assert got["a0"] == "HAM_like"  # nan|anterior torso
    assert got["a70"] == "RURAL_like" and got["a71"] == "RURAL_like"  # 50-70 and 70+ both RURAL here


def contexts_of(clusters: pa.Table, s_gate: pa.Table, profiles: pa.Table, rule_file=RULES) -> dict[str, dict]:
    con, params = engine(rule_file, clusters=clusters, s_gate=s_gate, image_profiles=profiles)
    to_table(con, "contexts", "context/contexts", params)
    return {r["cluster_id"]: r for r in rows(con, "contexts")}


def test_a2_private_factors():
    ids = ["cluster:d70b2c24611556a45d24", "cluster:ec1971795663ddaf67d3"]
    got = contexts_of(
        pa.table({"image_id": ["i1", "i2"], "cluster_id": ids}),
        pa.table({"image_id": ["i1", "i2"], "s_gate": [0.1, 0.1]}),
        pa.table({"image_id": ["i1", "i2"], "profile": ["RURAL_like", "BCN_like"]}),
    )
    assert [got[ids[0]][k] for k in ("sens", "burden", "aversion")] == ["spec_seeking", "low", "neutral"]
    assert [got[ids[1]][k] for k in ("sens", "burden", "aversion")] == ["neutral", "low", "averse"]
    # A.2's note: ISIC_0000000's cluster is RURAL_like, over-escalation by 2 costs -5.0 = -2.0 * 1.25 * 2
    assert got[ids[0]]["w_over"] == 2.0 * 1.25 and got[ids[0]]["w_under"] == 1.3 * 0.95


def test_a2_depends_on_the_context_seed():
    data = yaml.safe_load(default_rules_text())
    data["context_seed"] = 20260707
    other = parse_rules(yaml.safe_dump(data, sort_keys=False))
    ids = ["cluster:d70b2c24611556a45d24", "cluster:ec1971795663ddaf67d3"]
    tables = (
        pa.table({"image_id": ["i1", "i2"], "cluster_id": ids}),
        pa.table({"image_id": ["i1", "i2"], "s_gate": [0.1, 0.1]}),
        pa.table({"image_id": ["i1", "i2"], "profile": ["RURAL_like"] * 2}),
    )

    def levels(got):
        return [tuple(got[i][k] for k in ("sens", "burden", "aversion")) for i in ids]

    assert levels(contexts_of(*tables, rule_file=other)) != levels(contexts_of(*tables))


def test_cluster_context_mode_mean_bin_floor_capacity():
    clusters = pa.table(
        {
            "image_id": ["a", "b", "c", "d", "e", "f", "g", "h", "i", "unscored"],
            "cluster_id": ["tie", "tie", "mode", "mode", "mode", "edge", "high", "partial", "partial", "unscored"],
        }
    )
    s_gate = pa.table(
        {"image_id": ["a", "b", "c", "d", "e", "f", "g", "i"], "s_gate": [0.2, 0.4, 0.5, 0.5, 0.5, 0.25, 0.9, 0.9]}
    )  # h has no score
    profiles = pa.table(
        {
            "image_id": ["a", "b", "c", "d", "e", "f", "g", "h", "i", "unscored"],
            "profile": [
                "RURAL_like",
                "HAM_like",
                "MSK_like",
                "BCN_like",
                "MSK_like",
                "MSK_like",
                "MSK_like",
                "BCN_like",
                "BCN_like",
                "BCN_like",
            ],
        }
    )
    got = contexts_of(clusters, s_gate, profiles)
    assert got["tie"]["profile"] == "HAM_like"  # one each: the smallest name
    assert got["tie"]["s_gate"] == 0.30000000000000004 and got["tie"]["risk_bin"] == "low"  # (0.2+0.4)/2
    assert got["mode"]["profile"] == "MSK_like"
    assert got["mode"]["risk_bin"] == "low"  # 0.5 is not > 0.5
    assert got["edge"]["risk_bin"] == "very_low"  # 0.25 is not > 0.25
    assert (got["mode"]["capacity"], got["mode"]["floor_policy"], got["mode"]["floor"]) == (3, "strict", 1)
    assert got["high"]["risk_bin"] == "high" and got["high"]["floor"] == 3  # clip(2 + 1) = 3
    assert got["tie"]["floor"] == 0 and got["tie"]["capacity"] == 2
    assert got["partial"]["s_gate"] is None and got["partial"]["risk_bin"] is None  # a member lacks a score
    assert got["partial"]["floor"] is None and got["partial"]["capacity"] == 3
    assert "unscored" not in got  # no member scored: not in the evaluated set
    assert all(r["rule_version"] == RULES.version and r["rule_sha256"] == RULES.sha256 for r in got.values())


def test_contexts_complete_check_counts_missing_values():
    con, params = engine(
        clusters=pa.table({"image_id": ["a", "b"], "cluster_id": ["c1", "c2"]}),
        s_gate=pa.table({"image_id": ["a", "b"], "s_gate": pa.array([0.5, None], pa.float64())}),
        image_profiles=pa.table({"image_id": ["a", "b"], "profile": ["BCN_like", "BCN_like"]}),
    )
    to_table(con, "contexts", "context/contexts", params)
    result = one(con, "context/check_contexts_complete")
    assert (result["violations"], result["example"]) == (1, "c2")


# ------------------------------------------------------------------------------------------------
# Bands, overrides, selection


def context_row(cluster_id, profile, risk_bin, burden="low", aversion="neutral"):
    p = RULES.rules.profiles[profile]
    level = {"very_low": 0, "low": 0, "moderate": 1, "high": 2}[risk_bin]
    floor = min(max(level + RULES.rules.floor.shift[p.floor_policy], 0), 3)
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


def select(contexts: list[dict], proposals: list[dict], regimes=review.REGIMES) -> dict[tuple, dict]:
    con, params = engine(
        contexts=pa.Table.from_pylist(contexts),
        clusters=pa.table(
            {"image_id": [p["image_id"] for p in proposals], "cluster_id": [p["cluster_id"] for p in proposals]}
        ),
        proposals=pa.Table.from_pylist(
            [
                {"mechanism": "m", "image_id": p["image_id"], "slate": p["slate"], "a_head": p["slate"][0]}
                for p in proposals
            ]
        ),
    )
    review.build_selections(con, params, regimes)
    selected = {(r["image_id"], r["regime"]): r for r in rows(con, "selections")}
    selected["check"] = one(con, "review/check_selections_band")
    return selected


FULL = ["a3", "a2", "a1", "a0"]


def outcome(selected, image_id, regime):
    r = selected[(image_id, regime)]
    return r["a_sel"], r["change_type"], r["override"]


def test_bands_by_regime_without_overrides():
    got = select(
        [context_row("c", "HAM_like", "moderate")],  # capacity a2, floor a1
        [
            {"image_id": "up", "cluster_id": "c", "slate": FULL},
            {"image_id": "down", "cluster_id": "c", "slate": ["a0", "a1", "a2", "a3"]},
        ],
    )
    assert outcome(got, "up", "capacity_ceiling") == ("a2", "down_substitution", None)
    assert outcome(got, "up", "safety_floor") == ("a3", "none", None)
    assert outcome(got, "up", "mixed") == ("a2", "down_substitution", None)
    assert outcome(got, "down", "capacity_ceiling") == ("a0", "none", None)
    assert outcome(got, "down", "safety_floor") == ("a1", "up_substitution", None)
    assert outcome(got, "down", "mixed") == ("a1", "up_substitution", None)
    assert got[("up", "mixed")]["band_mask"] == 0b0110
    assert got[("up", "mixed")]["analysis"] == "m / mixed"
    assert got["check"]["violations"] == 0


def test_patient_refusal_removes_a3():
    got = select(
        [context_row("c", "BCN_like", "low", aversion="averse")], [{"image_id": "i", "cluster_id": "c", "slate": FULL}]
    )
    assert outcome(got, "i", "capacity_ceiling") == ("a2", "down_substitution", "patient_refusal")
    assert outcome(got, "i", "safety_floor") == ("a2", "down_substitution", "patient_refusal")


def test_patient_burden_low_bin_needs_a0():
    got = select(
        [context_row("c", "RURAL_like", "low", burden="high")],
        [{"image_id": "i", "cluster_id": "c", "slate": ["a1", "a2", "a0", "a3"]}],
    )
    assert outcome(got, "i", "capacity_ceiling") == ("a0", "down_substitution", "patient_burden")


def test_patient_burden_high_bin_needs_a2():
    got = select(
        [
            context_row("c", "HAM_like", "high", burden="high"),
            context_row("r", "RURAL_like", "moderate", burden="high"),
        ],
        [
            {"image_id": "i", "cluster_id": "c", "slate": ["a1", "a2", "a0", "a3"]},
            {"image_id": "j", "cluster_id": "r", "slate": ["a1", "a2", "a0", "a3"]},
        ],
    )
    assert outcome(got, "i", "capacity_ceiling") == ("a2", "up_substitution", "patient_burden")
    # RURAL: a2 is beyond capacity, so a1 stays (no override)
    assert outcome(got, "j", "capacity_ceiling") == ("a1", "none", None)


def test_both_overrides_name_the_last():
    got = select(
        [context_row("c", "BCN_like", "low", burden="high", aversion="averse")],
        [{"image_id": "i", "cluster_id": "c", "slate": ["a3", "a1", "a0", "a2"]}],
    )
    assert outcome(got, "i", "capacity_ceiling") == ("a0", "down_substitution", "patient_burden")
    assert got[("i", "capacity_ceiling")]["band_mask"] == 0b0101


def test_empty_band_default():
    # MSK strict at high risk: floor a3; safety/mixed band {a3}; averse removes a3 -> default a2
    got = select(
        [context_row("c", "MSK_like", "high", aversion="averse")], [{"image_id": "i", "cluster_id": "c", "slate": FULL}]
    )
    assert outcome(got, "i", "safety_floor") == ("a2", "down_substitution", "empty_band_default")
    assert outcome(got, "i", "mixed") == ("a2", "down_substitution", "empty_band_default")
    assert outcome(got, "i", "capacity_ceiling") == ("a2", "down_substitution", "patient_refusal")


def test_fallback_is_the_highest_band_action():
    got = select(
        [context_row("c", "RURAL_like", "very_low")],
        [
            {"image_id": "i", "cluster_id": "c", "slate": ["a3", "a2"]},
            {"image_id": "j", "cluster_id": "c", "slate": ["a3", "a1"]},
        ],
    )
    assert outcome(got, "i", "capacity_ceiling") == ("a1", "fallback", None)
    assert outcome(got, "j", "capacity_ceiling") == ("a1", "down_substitution", None)
    assert outcome(got, "i", "safety_floor") == ("a3", "none", None)
    got = select(
        [context_row("c", "MSK_like", "moderate")],  # safety band {a2, a3}
        [{"image_id": "k", "cluster_id": "c", "slate": ["a0", "a1"]}],
    )
    assert outcome(got, "k", "safety_floor") == ("a3", "fallback", None)
    assert outcome(got, "k", "mixed") == ("a3", "fallback", None)


def test_unknown_band_is_counted_not_guessed():
    no_bin = dict(context_row("c", "HAM_like", "low", burden="high"), risk_bin=None, floor=None)
    got = select(
        [no_bin],
        [
            {"image_id": "i", "cluster_id": "c", "slate": FULL},
            {"image_id": "lost", "cluster_id": "nowhere", "slate": FULL},
        ],
    )
    assert outcome(got, "i", "capacity_ceiling") == (None, None, None)  # burden needs the bin
    assert outcome(got, "lost", "capacity_ceiling") == (None, None, None)  # no context
    assert got["check"]["violations"] == 6 and got["check"]["rows_checked"] == 6


def test_unknown_regime_is_refused():
    con, params = engine(contexts=pa.Table.from_pylist([context_row("c", "HAM_like", "low")]))
    with pytest.raises(ValueError, match="unknown review regime 'strict_floor'"):
        review.build_selections(con, params, regimes=("strict_floor",))


# ------------------------------------------------------------------------------------------------
# Scores and records


def score(context: dict, risk: str, a_head: str, a_sel: str, cluster_id: str = "c", rule_file=RULES) -> dict:
    con, params = engine(
        rule_file,
        contexts=pa.Table.from_pylist([context]),
        images=pa.table({"image_id": ["i"], "risk_stratum": [risk]}),
        clusters=pa.table({"image_id": ["i"], "cluster_id": [cluster_id]}),
        selections=pa.table(
            {
                "analysis": ["m / mixed"],
                "mechanism": ["m"],
                "regime": ["mixed"],
                "image_id": ["i"],
                "cluster_id": [cluster_id],
                "a_head": [a_head],
                "a_sel": [a_sel],
            }
        ),
    )
    review.build_scores(con, params)
    return rows(con, "scored_selections")[0]


def test_scores_multiply_in_the_studys_order():
    # HAM_like, sens_seeking (w_o x 0.95), burden high (x 1.15), averse (x 1.2), over by 2 (spec 4)
    w_over = ((1.2 * 0.95) * 1.15) * 1.2
    got = score({"cluster_id": "c", "w_under": 1.2 * 1.25, "w_over": w_over}, "very_low", "a2", "a0")
    assert got["u_local_head"] == -3.1463999999999994
    assert got["u_local_head"] != -(1.2 * (0.95 * (1.15 * 1.2))) * 2  # another order, another last bit
    assert got["u_local_sel"] == 0.0 and got["u_global_head"] == -2.4


def test_under_escalation_is_weight_times_severity_times_gap():
    got = score({"cluster_id": "c", "w_under": 1.8 * 1.25, "w_over": 0.9}, "high", "a1", "a3")
    assert got["u_local_head"] == ((-2.25) * 4.0) * 2.0 == -18.0
    assert got["u_local_sel"] == 0.0
    assert got["u_global_head"] == ((-1.2) * 4.0) * 2.0
    got = score({"cluster_id": "c", "w_under": 1.2 * 1.25, "w_over": 0.75}, "high", "a2", "a2")
    assert math.isclose(got["u_local_head"], -6.0) and got["u_global_head"] == -4.8


def test_under_escalation_multiplies_weight_and_severity_first():
    data = yaml.safe_load(default_rules_text())
    data["severity"]["high"] = 3.3  # not a power of two: the association shows in the last bit
    rules = parse_rules(yaml.safe_dump(data, sort_keys=False))
    w_under = 1.3 * 0.95
    got = score({"cluster_id": "c", "w_under": w_under, "w_over": 2.0}, "high", "a0", "a0", rule_file=rules)
    assert got["u_local_head"] == ((-w_under) * 3.3) * 3 == -12.226499999999998
    assert got["u_local_head"] != (-w_under) * (3.3 * 3)


def test_unknown_risk_or_context_scores_null():
    got = score({"cluster_id": "other", "w_under": 1.0, "w_over": 1.0}, "high", "a1", "a1")
    assert got["u_local_head"] is None and got["u_local_sel"] is None and got["u_global_head"] == -9.6
    got = score({"cluster_id": "c", "w_under": 1.0, "w_over": 1.0}, None, "a1", "a1")
    assert got["u_global_head"] is None and got["u_local_head"] is None


def test_run_review_end_to_end_feeds_the_estimators():
    from autheval.estimation.estimators import estimate

    n = 60
    ids = [f"ISIC_{i:07d}" for i in range(n)]
    images = pa.table(
        {
            "image_id": ids,
            "age": pa.array([20.0 + (i % 5) * 15 for i in range(n)], pa.float64()),
            "anatomic_site": [SITES[i % 8] for i in range(n)],
            "risk_stratum": [("very_low", "low", "moderate", "high")[i % 4] for i in range(n)],
        }
    )
    clusters = pa.table({"image_id": ids, "cluster_id": [f"cluster:{i // 2:04d}" for i in range(n)]})
    s_gate = pa.table({"image_id": ids, "s_gate": [((i * 37) % 100) / 100 for i in range(n)]})
    slates = [["a0", "a1", "a2", "a3"], ["a1", "a2", "a0", "a3"], ["a2", "a3", "a1", "a0"], ["a3", "a2", "a1", "a0"]]
    proposals = pa.Table.from_pylist(
        [
            {
                "mechanism": mech,
                "image_id": image_id,
                "slate": slates[(i + shift) % 4],
                "a_head": slates[(i + shift) % 4][0],
                "p_very_low": None,
                "p_low": None,
                "p_moderate": None,
                "p_high": None,
                "source": "test",
            }
            for mech, shift in (("exact", 0), ("escalating", 1))
            for i, image_id in enumerate(ids)
        ],
        schema=pa.schema(
            [
                ("mechanism", pa.string()),
                ("image_id", pa.string()),
                ("slate", pa.list_(pa.string())),
                ("a_head", pa.string()),
                ("p_very_low", pa.float64()),
                ("p_low", pa.float64()),
                ("p_moderate", pa.float64()),
                ("p_high", pa.float64()),
                ("source", pa.string()),
            ]
        ),
    )
    out = review.run_review(connect(), images, clusters, s_gate, proposals)
    assert out.contexts.num_rows == n // 2
    assert out.selections.num_rows == out.scores.num_rows == out.records.num_rows == 2 * 3 * n
    assert out.checks["check_selections_band"]["violations"] == 0
    assert out.checks["check_contexts_complete"]["violations"] == 0
    for table in (out.contexts, out.selections, out.scores, out.records):
        assert set(table.column("rule_version").to_pylist()) == {RULES.version}
        assert set(table.column("rule_sha256").to_pylist()) == {RULES.sha256}
    assert out.records.column_names[:10] == [
        "analysis",
        "mechanism",
        "regime",
        "case_id",
        "cluster_id",
        "proposed_action",
        "executed_action",
        "utility_executed_local",
        "utility_proposed_local",
        "utility_proposed_global",
    ]
    assert "sens" not in out.records.column_names and "profile" not in out.records.column_names  # private
    sets = review.record_sets(out.records)
    assert [s.analysis for s in sets] == sorted(f"{m} / {r}" for m in ("exact", "escalating") for r in review.REGIMES)
    assert all(s.level == "full_counterfactual" for s in sets)
    result = estimate(sets, scheme="reference", reps=1000)
    exact_capacity = result.estimate("exact / capacity_ceiling", "image_weighted", "J_auth")
    assert exact_capacity["estimate"] == 0.0  # the proposal is the reference level everywhere
    assert all(c["max_point_residual"] <= 1e-12 for c in result.checks if "max_point_residual" in c)


# ------------------------------------------------------------------------------------------------
# Every other rule of the engine, each fed its case (tests/test_planted_bugs.py has the rest)


def _h12(text: str) -> int:
    import hashlib

    return int(hashlib.sha256(text.encode()).hexdigest()[:12], 16)


def _rules_with(mutate):
    data = yaml.safe_load(default_rules_text())
    mutate(data)
    return parse_rules(yaml.safe_dump(data, sort_keys=False), source="service.yaml")


def test_ages_outside_the_bins_are_nan():
    images = pa.table(
        {
            "image_id": ["old", "negative", "missing"],
            "age": pa.array([250.0, -5.0, None], pa.float64()),
            "anatomic_site": ["anterior torso"] * 3,
        }
    )
    con, params = engine(images=images)
    to_table(con, "image_profiles", "ingest/image_profiles", params)
    got = {r["image_id"]: r["profile_signature"] for r in rows(con, "image_profiles")}
    assert got == {"old": "nan|anterior torso", "negative": "nan|anterior torso", "missing": "nan|anterior torso"}


def test_profiles_are_the_declared_list_by_h12_mod_its_length():
    rules = _rules_with(
        lambda d: d.update(profiles={k: d["profiles"][k] for k in ("MSK_like", "BCN_like", "HAM_like")})
    )
    sites = ["anterior torso", "head/neck", "lateral torso", "palms/soles", None]
    images = pa.table(
        {
            "image_id": [f"i{k}" for k in range(5)],
            "age": pa.array([25.0, 40.0, 60.0, 80.0, None]),
            "anatomic_site": sites,
        }
    )
    con, params = engine(rules, images=images)
    to_table(con, "image_profiles", "ingest/image_profiles", params)
    for r in rows(con, "image_profiles"):
        assert r["profile"] == ["MSK_like", "BCN_like", "HAM_like"][_h12(r["profile_signature"]) % 3]


def test_private_factors_follow_the_declared_seed_namespaces_and_levels():
    def mutate(d):
        d["context_seed"] = 7
        d["private_factors"]["sens"]["namespace"] = "burden"  # namespaces are data, not names in the SQL
        d["private_factors"]["sens"]["levels"].append({"name": "extra", "w_under": 1.0, "w_over": 1.0})
        d["private_factors"]["aversion"]["namespace"] = "av2"

    rules = _rules_with(mutate)
    ids = [f"cluster:{k:04d}" for k in range(12)]
    got = contexts_of(
        pa.table({"image_id": ids, "cluster_id": ids}),
        pa.table({"image_id": ids, "s_gate": [0.1] * 12}),
        pa.table({"image_id": ids, "profile": ["BCN_like"] * 12}),
        rule_file=rules,
    )
    sens = ["sens_seeking", "neutral", "spec_seeking", "extra"]
    for cid in ids:
        assert got[cid]["sens"] == sens[_h12(f"7|burden|{cid}") % 4]
        assert got[cid]["burden"] == ["low", "high"][_h12(f"7|burden|{cid}") % 2]
        assert got[cid]["aversion"] == ["neutral", "averse"][_h12(f"7|av2|{cid}") % 2]


def test_a_member_without_a_profile_leaves_the_cluster_unprofiled():
    got = contexts_of(
        pa.table({"image_id": ["a", "b"], "cluster_id": ["c", "c"]}),
        pa.table({"image_id": ["a", "b"], "s_gate": [0.9, 0.9]}),
        pa.table({"image_id": ["a"], "profile": ["MSK_like"]}),
    )
    c = got["c"]
    assert (c["profile"], c["capacity"], c["floor_policy"], c["floor"], c["w_under"], c["w_over"]) == (None,) * 6
    assert c["risk_bin"] == "high" and c["sens"] is not None  # what needs no profile is still known


def test_bins_at_every_threshold_and_floors_clipped_at_zero():
    rules = _rules_with(lambda d: d["proxy_bins"].update(thresholds=[0.2, 0.4, 0.6]))
    scores = {"t1": 0.2, "above_t1": 0.2000001, "t2": 0.4, "t3": 0.6, "above_t3": 0.61}
    ids = list(scores)
    got = contexts_of(
        pa.table({"image_id": ids, "cluster_id": ids}),
        pa.table({"image_id": ids, "s_gate": list(scores.values())}),
        pa.table({"image_id": ids, "profile": ["RURAL_like"] * len(ids)}),
        rule_file=rules,
    )
    assert {k: got[k]["risk_bin"] for k in ids} == {
        "t1": "very_low",
        "above_t1": "low",
        "t2": "low",
        "t3": "moderate",
        "above_t3": "high",
    }
    assert got["t1"]["floor"] == 0  # lenient very_low: clip(0 - 1) = 0, not -1
    assert got["above_t3"]["floor"] == 1
    default = contexts_of(
        pa.table({"image_id": ["x"], "cluster_id": ["x"]}),
        pa.table({"image_id": ["x"], "s_gate": [0.75]}),
        pa.table({"image_id": ["x"], "profile": ["BCN_like"]}),
    )
    assert default["x"]["risk_bin"] == "moderate"  # 0.75 is not > 0.75


def test_mixed_band_with_the_floor_above_the_capacity_is_empty_then_the_default():
    strict_low_capacity = dict(context_row("c", "HAM_like", "high"), capacity=1, floor=3)
    got = select([strict_low_capacity], [{"image_id": "i", "cluster_id": "c", "slate": FULL}])
    assert outcome(got, "i", "mixed") == ("a2", "down_substitution", "empty_band_default")
    assert got[("i", "mixed")]["band_mask"] == 0b0100


def test_overrides_only_act_on_actions_in_the_band():
    got = select(
        [
            context_row("h", "HAM_like", "low", aversion="averse"),  # capacity a2: no a3 to refuse
            context_row("m", "MSK_like", "moderate", burden="high"),
        ],  # safety {a2, a3}: no a1 to remove
        [
            {"image_id": "i", "cluster_id": "h", "slate": FULL},
            {"image_id": "j", "cluster_id": "m", "slate": ["a1", "a2", "a3", "a0"]},
        ],
    )
    assert outcome(got, "i", "capacity_ceiling") == ("a2", "down_substitution", None)
    assert outcome(got, "i", "safety_floor") == ("a2", "down_substitution", "patient_refusal")
    assert outcome(got, "j", "safety_floor") == ("a2", "up_substitution", None)
    assert outcome(got, "j", "capacity_ceiling") == ("a2", "up_substitution", "patient_burden")


def test_the_selection_reads_every_slate_position():
    got = select(
        [context_row("c", "MSK_like", "high")],  # safety and mixed: {a3}
        [
            {"image_id": "fourth", "cluster_id": "c", "slate": ["a0", "a1", "a2", "a3"]},
            {"image_id": "third", "cluster_id": "c", "slate": ["a2", "a0", "a3", "a1"]},
        ],
    )
    assert outcome(got, "fourth", "safety_floor") == ("a3", "up_substitution", None)
    assert outcome(got, "third", "mixed") == ("a3", "up_substitution", None)


def test_fallback_is_the_band_top_for_every_band_shape():
    got = select(
        [
            context_row("two", "HAM_like", "high"),  # mixed: floor a2 = capacity a2 -> {a2}
            context_row("zero", "RURAL_like", "low", burden="high"),
        ],  # capacity {a0, a1} - a1 -> {a0}
        [
            {"image_id": "i", "cluster_id": "two", "slate": ["a0", "a1"]},
            {"image_id": "j", "cluster_id": "zero", "slate": ["a1", "a2"]},
        ],
    )
    assert outcome(got, "i", "mixed") == ("a2", "fallback", None) and got[("i", "mixed")]["band_mask"] == 0b0100
    assert outcome(got, "j", "capacity_ceiling") == ("a0", "fallback", "patient_burden")
    assert got[("j", "capacity_ceiling")]["band_mask"] == 0b0001


def test_no_regime_is_refused():
    con, params = engine(contexts=pa.Table.from_pylist([context_row("c", "HAM_like", "low")]))
    with pytest.raises(ValueError, match="unknown review regime None"):
        review.build_selections(con, params, regimes=())


def test_records_and_scores_are_the_scored_selections_in_the_log_layout():
    con, params = engine(
        contexts=pa.Table.from_pylist([{"cluster_id": "c", "w_under": 1.5, "w_over": 0.9}]),
        images=pa.table({"image_id": ["i"], "risk_stratum": ["moderate"]}),
        clusters=pa.table({"image_id": ["i"], "cluster_id": ["c"]}),
        selections=pa.table(
            {
                "analysis": ["m / mixed"],
                "mechanism": ["m"],
                "regime": ["mixed"],
                "image_id": ["i"],
                "cluster_id": ["c"],
                "a_head": ["a0"],
                "a_sel": ["a3"],
            }
        ),
    )
    review.build_scores(con, params)
    record = rows(con, "records")[0]
    assert {k: record[k] for k in ("case_id", "cluster_id", "proposed_action", "executed_action")} == {
        "case_id": "i",
        "cluster_id": "c",
        "proposed_action": "a0",
        "executed_action": "a3",
    }
    assert record["utility_proposed_local"] == ((-1.5) * 2.0) * 2.0 and record["utility_executed_local"] == -0.9
    assert record["utility_proposed_global"] == ((-1.2) * 2.0) * 2.0
    scored = rows(con, "review_scores")[0]
    assert (scored["u_local_head"], scored["u_local_sel"], scored["u_global_head"]) == (-6.0, -0.9, -4.8)
    assert scored["rule_sha256"] == record["rule_sha256"] == RULES.sha256


def test_write_review_streams_the_same_tables_as_run_review(tmp_path):
    import pyarrow.parquet as pq

    ids = [f"ISIC_{i:07d}" for i in range(24)]
    images = pa.table(
        {
            "image_id": ids,
            "age": pa.array([20.0 + (i % 5) * 15 for i in range(24)], pa.float64()),
            "anatomic_site": [SITES[i % 8] for i in range(24)],
            "risk_stratum": [("very_low", "low", "moderate", "high")[i % 4] for i in range(24)],
        }
    )
    clusters = pa.table({"image_id": ids, "cluster_id": [f"cluster:{i // 3:03d}" for i in range(24)]})
    s_gate = pa.table({"image_id": ids, "s_gate": [((i * 37) % 100) / 100 for i in range(24)]})
    proposals = pa.Table.from_pylist(
        [
            {
                "mechanism": "m",
                "image_id": i,
                "slate": FULL[k % 4 :] + FULL[: k % 4],
                "a_head": (FULL[k % 4 :] + FULL[: k % 4])[0],
            }
            for k, i in enumerate(ids)
        ]
    )
    held = review.run_review(connect(), images, clusters, s_gate, proposals)
    con = connect()
    for name, table in (("images", images), ("clusters", clusters), ("s_gate", s_gate), ("proposals", proposals)):
        con.register(name, table)
    paths = review.write_review(con, tmp_path / "out")
    key = {"contexts": ["cluster_id"], "selections": ["analysis", "image_id"], "scores": ["analysis", "image_id"]}
    for name, expected in (("contexts", held.contexts), ("selections", held.selections), ("scores", held.scores)):
        streamed = pq.read_table(paths[name]).sort_by([(c, "ascending") for c in key[name]])
        assert streamed.to_pylist() == expected.sort_by([(c, "ascending") for c in key[name]]).to_pylist(), name
    records = con.table("records").arrow().read_all().sort_by([("analysis", "ascending"), ("case_id", "ascending")])
    assert (
        records.to_pylist() == held.records.sort_by([("analysis", "ascending"), ("case_id", "ascending")]).to_pylist()
    )
