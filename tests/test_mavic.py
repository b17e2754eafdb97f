"""MAVIC (DermoGPT section 6, models/mavic.py) on hand-built completions: each term, the gate at the group
median, the declared composites, advantages summing to zero per group, PMI weights from a small training
table, and `autheval mavic score` / `weights` on good and bad files (one line, exit 2, no output)."""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyarrow import csv

from autheval.errors import RecordError
from models.mavic import (
    MavicConfig,
    PmiWeights,
    default_schemas,
    parse_completion,
    parse_schemas,
    pmi_weights,
    score_completions,
    weights_from_table,
    weights_table,
)
from models.ontology import load_ontology
from tests.conftest import run_cli

REF = {"pigment_network": "atypical", "streaks": "irregular", "blue_whitish_veil": "present"}


def completion(attributes, diagnosis="MEL", think=None) -> str:
    text = f"<think>{think}</think>\n" if think is not None else ""
    morph = attributes if isinstance(attributes, str) else json.dumps(attributes)
    return f"{text}<morph>{morph}</morph>\n<final_diagnosis>{diagnosis}</final_diagnosis>"


def score(completions, reference=REF, diagnosis="MEL", modality="dermoscopic", groups=None, **kw):
    n = len(completions)
    return score_completions(
        completions,
        [modality] * n,
        [diagnosis] * n,
        [reference] * n,
        groups if groups is not None else [0] * n,
        with_rules=True,
        **kw,
    )


def test_a_valid_completion_scores_every_term():
    out = score([completion(REF, think="dark, irregular streaks")])
    assert out["format_rule"][0] is None
    for key in ("r_fmt", "r_acc", "s_hier", "s_morph"):
        assert out[key][0] == 1.0, key
    assert out["gate"][0] == 0.5  # alone in its group: at its median
    assert out["reward"][0] == pytest.approx(1 + 1 + 0.5)
    assert out["advantage"][0] == 0.0


@pytest.mark.parametrize(
    "text, rule",
    [
        ('<final_diagnosis>MEL</final_diagnosis><morph>{"streaks": "irregular"}</morph>', "out of order"),
        ('<morph>{"streaks": "irregular"}</morph>', "<final_diagnosis> missing"),
        ("<final_diagnosis>MEL</final_diagnosis>", "<morph> missing"),
        ("I think: " + completion(REF), "text outside the tags"),
        (completion(REF) + " done", "text outside the tags"),
        (completion("{streaks: irregular}"), "not JSON"),
        (completion('{"streaks": "irregular", "streaks": "regular"}'), "repeats a key"),
        (completion('["streaks"]'), "not a JSON object"),
        (completion({}), "follows no declared schema"),
        (completion({"streaks": "wavy"}), "follows no declared schema"),  # not a state of streaks
        (completion({"streaks": "irregular", "papule": "present"}), "follows no declared schema"),  # two schemas mixed
        (
            completion({"streaks": "irregular", "streak": "regular"}),
            "follows no declared schema",
        ),  # one attribute twice
        (completion({"papule": True, "erythema": "present"}), "follows skincon, not the dermoscopic schema"),
        (completion(REF, diagnosis="  "), "empty <final_diagnosis>"),
        (completion(REF).replace("</morph>", ""), "inside <morph>"),
        ("<morph>{}</morph>" + completion(REF), "more than once"),
        (completion(REF, think="x").replace("</think>", ""), "inside <think>"),
        ('<morph>{"streaks": "irregular"}</morph><final_diagnosis>MEL', "not closed"),
        ("</morph>" + completion(REF), "without <morph>"),
        (None, "not text"),
    ],
)
def test_an_invalid_format_scores_zero_on_every_term(text, rule):
    out = score([text, completion(REF)])
    assert rule in out["format_rule"][0]
    for key in ("r_fmt", "r_acc", "s_hier", "s_morph", "reward"):
        assert out[key][0] == 0.0, key
    assert out["r_fmt"][1] == 1.0  # the valid completion beside it


def test_an_invalid_completion_earns_no_morphology_even_where_nothing_is_present():
    out = score(["broken", completion({"streaks": "absent"})], reference={"streaks": "absent"})
    assert out["s_morph"].tolist() == [0.0, 1.0]


def test_a_json_that_follows_two_schemas_is_invalid():
    schemas = parse_schemas(
        "a:\n  modality: dermoscopic\n  categorical:\n    streaks: [absent, regular]\n"
        "b:\n  modality: clinical\n  categorical:\n    streak: [absent, regular]\n"
    )
    config = MavicConfig(modalities={"dermoscopic": "a", "clinical": "b"})
    both = parse_completion(completion({"streaks": "regular"}), "dermoscopic", config, schemas)
    assert both.rule == "<morph> follows several schemas (a, b)"
    assert (
        parse_completion(completion({"streaks": "regular"}), "dermoscopic", MavicConfig(), default_schemas()).rule
        is None
    )


def test_a_clinical_image_takes_the_skincon_schema():
    out = score(
        [completion({"Papule": "present", "erythema": True, "scale": False}, "BCC")],
        reference={"papule": "present", "erythema": "present"},
        diagnosis="BCC",
        modality="Clinical",
    )
    assert out["r_fmt"][0] == 1.0 and out["s_morph"][0] == 1.0
    out = score([completion(REF, "BCC")], reference={"papule": "present"}, diagnosis="BCC", modality="clinical")
    assert out["r_fmt"][0] == 0.0 and "not the clinical schema skincon" in out["format_rule"][0]


def test_attribute_names_match_fuzzily_at_the_threshold():
    schemas = default_schemas()
    config = MavicConfig()
    # difflib ratio: 'streak' vs 'streaks' 12/13, 'pigment network' -> 'pigment_network' (normalised, exact)
    near = {"Pigment Network": "atypical", "streak": "irregular", "blue-whitish veil": "present"}
    assert parse_completion(completion(near), "dermoscopic", config, schemas).attributes == REF
    # 'dots' vs 'dots_and_globules': ratio 8/21, far below 0.8
    assert parse_completion(completion({"dots": "regular"}), "dermoscopic", config, schemas).rule is not None
    # 'streeks' vs 'streaks': 6/7 = 0.857: kept at 0.8, refused at 0.9
    assert parse_completion(completion({"streeks": "regular"}), "dermoscopic", config, schemas).rule is None
    strict = MavicConfig(fuzzy_threshold=0.9)
    assert parse_completion(completion({"streeks": "regular"}), "dermoscopic", strict, schemas).rule is not None


def test_right_and_wrong_diagnosis_at_the_same_risk_level():
    out = score(
        [
            completion(REF, "MEL"),
            completion(REF, "SCC"),
            completion(REF, "NV"),
            completion(REF, "melanoma"),
            completion(REF, "not a diagnosis"),
        ]
    )
    assert out["r_acc"].tolist() == [1.0, 0.0, 0.0, 1.0, 0.0]
    assert out["s_hier"] == pytest.approx([1.0, 2 / 3, 1 / 3, 1.0, 0.0])  # SCC: high risk like MEL
    assert out["r_fmt"].tolist() == [1.0] * 5  # an unknown diagnosis is well formed, it just earns nothing
    isic = score([completion(REF, "SCC"), completion(REF, "NV")], ontology=load_ontology("isic_archive"))
    assert isic["s_hier"] == pytest.approx([4 / 7, 2 / 7])  # Malignant:... vs Benign:...:Nevus


def test_a_partial_attribute_match_is_the_weighted_tversky_index():
    pred = {"pigment_network": "atypical", "streaks": "regular", "vascular_structures": "dotted"}
    out = score([completion(pred)])
    # TP = {pigment_network_atypical}; FP = {streaks_regular, vascular_structures_dotted};
    # FN = {streaks_irregular, blue_whitish_veil}
    assert out["s_morph"][0] == pytest.approx(1 / (1 + 0.7 * 2 + 0.3 * 2))
    schemas = default_schemas()
    w = np.full((1, len(schemas.features)), np.nan)
    index = schemas.index()
    for feature, value in {
        "pigment_network_atypical": 2.0,
        "streaks_regular": 0.5,
        "vascular_structures_dotted": 0.0,
        "streaks_irregular": 3.0,
    }.items():
        w[0, index[feature]] = value  # blue_whitish_veil not given: it weighs default_weight (1)
    weights = PmiWeights(("MEL",), schemas.features, np.full_like(w, np.nan), w)
    out = score([completion(pred)], weights=weights)
    assert out["s_morph"][0] == pytest.approx(2.0 / (2.0 + 0.7 * (0.5 + 0.0) + 0.3 * (3.0 + 1.0)))
    # weights of another diagnosis do not apply: unweighted again
    out = score([completion(pred, "BCC")], weights=weights, diagnosis="BCC")
    assert out["s_morph"][0] == pytest.approx(1 / (1 + 0.7 * 2 + 0.3 * 2))


def test_nothing_present_in_either_agrees_fully():
    absent = {"streaks": "absent", "pigment_network": "absent"}
    out = score([completion(absent), completion(REF)], reference={"streaks": "absent"})
    assert out["s_morph"].tolist() == [1.0, 0.0]
    out = score([completion(absent)])
    assert out["s_morph"][0] == 0.0  # TP = 0, FN = 3


def test_the_gate_is_one_half_at_the_group_median():
    texts = [
        completion(REF, "MEL"),
        completion(REF, "SCC"),
        completion(REF, "NV"),
        completion(REF, "MEL"),
        completion(REF, "NV"),
    ]
    out = score(texts, groups=["a", "a", "a", "b", "b"])
    assert out["s_hier"] == pytest.approx([1.0, 2 / 3, 1 / 3, 1.0, 1 / 3])

    def sigmoid(x):
        return 1 / (1 + math.exp(-x))

    # group a: median 2/3; group b (two completions): median (1 + 1/3) / 2
    assert out["gate"][1] == 0.5
    assert out["gate"] == pytest.approx([sigmoid(10 / 3), 0.5, sigmoid(-10 / 3), sigmoid(10 / 3), sigmoid(-10 / 3)])
    assert score(texts, groups=["a"] * 5, config=MavicConfig(gate_k=2.0))["gate"][0] == pytest.approx(sigmoid(2 / 3))


def test_the_declared_composites():
    texts = [completion({"pigment_network": "atypical"}, "MEL"), completion(REF, "SCC"), "broken"]
    gated = score(texts)
    s_hier, s_morph, gate, r_acc = gated["s_hier"], gated["s_morph"], gated["gate"], gated["r_acc"]
    assert gated["reward"] == pytest.approx(gated["r_fmt"] * (r_acc + s_hier + gate * s_morph))
    assert gated["reward"][2] == 0.0
    ungated = score(texts, config=MavicConfig(composite="ungated", lambda_hier=0.5, lambda_morph=2.0))
    assert ungated["reward"] == pytest.approx([1 + 0.5 + 2 * s_morph[0], 0 + 0.5 * 2 / 3 + 2 * 1.0, 0.0])
    accuracy = score(texts, config=MavicConfig(composite="accuracy"))
    assert accuracy["reward"].tolist() == [1.0, 0.0, 0.0]
    assert MavicConfig().formula() == "r_fmt * (r_acc + lambda_hier * s_hier + lambda_morph * gate * s_morph)"


def test_advantages_are_group_normalised_and_sum_to_zero_per_group():
    rng = np.random.default_rng(7)
    states = ["absent", "regular", "irregular"]
    diagnoses = ["MEL", "NV", "SCC", "BKL", "BCC"]
    texts, groups = [], []
    for i in range(64):
        attrs = {"streaks": states[rng.integers(3)], "dots_and_globules": states[rng.integers(3)]}
        text = completion(attrs, diagnoses[rng.integers(5)])
        texts.append(text if rng.random() > 0.2 else text[5:])  # a fifth badly formatted
        groups.append(f"item{i // 8}")
    out = score(texts, groups=groups)
    groups = np.array(groups)
    for g in np.unique(groups):
        a, r = out["advantage"][groups == g], out["reward"][groups == g]
        assert abs(a.sum()) < 1e-9
        assert a == pytest.approx((r - r.mean()) / (r.std() + 1e-4))
    # scored together or one group at a time: the same numbers (group statistics stay in their group)
    first = score(texts[:8], groups=groups[:8].tolist())
    for key in first:
        if key != "format_rule":
            assert first[key] == pytest.approx(out[key][:8])
    constant = score([completion(REF)] * 3)
    assert constant["advantage"].tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize(
    "kwargs, column",
    [
        ({"modality": "ultrasound"}, "modality"),
        ({"diagnosis": "XYZ"}, "reference_diagnosis"),
        ({"reference": {"spots": "present"}}, "reference_attributes"),
        ({"reference": {"streaks": "wavy"}}, "reference_attributes"),
        ({"reference": {"papule": "present"}}, "reference_attributes"),  # a clinical attribute on a dermoscopic image
    ],
)
def test_bad_labels_are_one_line_naming_the_column_and_row(kwargs, column):
    with pytest.raises(RecordError) as err:
        score([completion(REF), completion(REF)], source="labels.csv", **kwargs)
    assert err.value.column == column and "row 1" in str(err.value) and "\n" not in str(err.value)


def test_pmi_weights_from_a_small_training_table():
    attributes = [
        {"streaks": "irregular"},
        {"streaks": "irregular", "blue_whitish_veil": "present"},
        {"streaks": "regular"},
        {"papule": "present"},
    ]
    weights = pmi_weights(attributes, ["dermoscopic"] * 3 + ["clinical"], ["MEL", "MEL", "NV", "BCC"])
    assert weights.diagnoses == ("BCC", "MEL", "NV")
    index = default_schemas().index()
    eps = 1e-5

    def pmi(d, f):
        return float(weights.pmi[weights.diagnoses.index(d), index[f]])

    # p(streaks_irregular, MEL) = 2/4, p(streaks_irregular) = 2/4, p(MEL) = 2/4
    assert pmi("MEL", "streaks_irregular") == pytest.approx(math.log((0.5 + eps) / (0.25 + eps)))
    assert pmi("NV", "streaks_irregular") == pytest.approx(math.log(eps / (0.5 * 0.25 + eps)))  # never together
    assert pmi("MEL", "blue_whitish_veil") == pytest.approx(math.log((0.25 + eps) / (0.25 * 0.5 + eps)))
    assert pmi("BCC", "papule") == pytest.approx(math.log((0.25 + eps) / (0.25 * 0.25 + eps)))
    assert pmi("MEL", "pigment_network_typical") == 0.0  # never seen: log(eps / eps)
    assert weights.weight[weights.diagnoses.index("NV"), index["streaks_irregular"]] == 0.0  # negative PMI floored
    assert np.all(weights.weight >= 0)
    again = weights_from_table(weights_table(weights))
    assert again.diagnoses == weights.diagnoses and np.array_equal(again.weight, weights.weight)


def test_a_bad_weights_table_is_one_line():
    table = pa.table({"diagnosis": ["MEL"], "feature": ["streaks_wavy"], "weight": [1.0]})
    with pytest.raises(RecordError, match="'feature'.*not a feature"):
        weights_from_table(table, "w.csv")
    table = pa.table({"diagnosis": ["MEL"], "feature": ["streaks_regular"], "weight": [-1.0]})
    with pytest.raises(RecordError, match="finite number >= 0"):
        weights_from_table(table, "w.csv")


# ---------------------------------------------------------------- the command


def write_completions(path, rows):
    table = pa.table(
        {
            "group_id": [r[0] for r in rows],
            "completion": [r[1] for r in rows],
            "modality": [r[2] for r in rows],
            "reference_diagnosis": [r[3] for r in rows],
            "reference_attributes": [r[4] if isinstance(r[4], str) else json.dumps(r[4]) for r in rows],
        }
    )
    if path.suffix == ".csv":
        csv.write_csv(table, path)
    else:
        pq.write_table(table, path)
    return path


GOOD_ROWS = [
    ("g1", completion(REF, "MEL"), "dermoscopic", "MEL", REF),
    ("g1", completion({"streaks": "irregular"}, "SCC"), "dermoscopic", "MEL", REF),
    ("g1", "no tags at all", "dermoscopic", "MEL", REF),
    ("g2", completion({"papule": "present"}, "BCC"), "clinical", "BCC", {"papule": "present", "ulcer": "present"}),
    ("g2", completion({"papule": "present"}, "NV"), "clinical", "BCC", {"papule": "present", "ulcer": "present"}),
]


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_score_command_writes_the_terms_beside_the_input(tmp_path, suffix):
    source = write_completions(tmp_path / f"completions{suffix}", GOOD_ROWS)
    training = tmp_path / "train.csv"
    csv.write_csv(
        pa.table(
            {
                "attributes": [json.dumps(r[4]) for r in GOOD_ROWS],
                "modality": [r[2] for r in GOOD_ROWS],
                "diagnosis": [r[3] for r in GOOD_ROWS],
            }
        ),
        training,
    )
    weights = tmp_path / "pmi.parquet"
    done = run_cli("mavic", "weights", "--input", str(training), "--output", str(weights))
    assert done.returncode == 0, done.stderr
    expected_weights = pmi_weights([r[4] for r in GOOD_ROWS], [r[2] for r in GOOD_ROWS], [r[3] for r in GOOD_ROWS])
    written = weights_from_table(pq.read_table(weights))
    assert written.diagnoses == expected_weights.diagnoses == ("BCC", "MEL")
    assert np.array_equal(written.weight, expected_weights.weight)
    out = tmp_path / f"scores{suffix}"
    done = run_cli("mavic", "score", "--input", str(source), "--output", str(out), "--weights", str(weights))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(out)
    table = csv.read_csv(out) if suffix == ".csv" else pq.read_table(out)
    expected = score_completions(
        [r[1] for r in GOOD_ROWS],
        [r[2] for r in GOOD_ROWS],
        [r[3] for r in GOOD_ROWS],
        [r[4] for r in GOOD_ROWS],
        [r[0] for r in GOOD_ROWS],
        weights=weights_from_table(pq.read_table(weights)),
    )
    for key, values in expected.items():
        assert table.column(key).to_pylist() == pytest.approx(values.tolist(), abs=1e-15), key
    assert table.column("r_fmt").to_pylist() == [1.0, 1.0, 0.0, 1.0, 1.0]
    assert table.column("format_rule").to_pylist()[2] == "text outside the tags"
    assert set(table.column("composite").to_pylist()) == {MavicConfig().formula()}
    assert table.column_names[:5] == [
        "group_id",
        "completion",
        "modality",
        "reference_diagnosis",
        "reference_attributes",
    ]
    again = tmp_path / f"again{suffix}"
    assert (
        run_cli("mavic", "score", "--input", str(source), "--output", str(again), "--weights", str(weights)).returncode
        == 0
    )
    assert again.read_bytes() == out.read_bytes()  # same inputs, same bytes


def _refused(done, *words):
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip()
    assert "\n" not in line, line
    for word in words:
        assert word in line, line


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda rows: [r[:4] + ("{not json",) for r in rows], ["reference_attributes", "row 1", "JSON object"]),
        (lambda rows: [r[:4] + ("[1, 2]",) for r in rows], ["reference_attributes", "row 1", "JSON object", "[1, 2]"]),
        (lambda rows: rows[:1] + [rows[1][:2] + ("xray",) + rows[1][3:]], ["'modality'", "row 2", "unknown modality"]),
        (lambda rows: rows[:1] + [rows[1][:3] + ("ZZZ",) + rows[1][4:]], ["'reference_diagnosis'", "row 2"]),
        (lambda rows: [("",) + rows[0][1:]], ["'group_id'", "row 1", "must not be empty"]),
        (lambda rows: rows[:1] + [rows[1][:4] + ({"streaks": "wavy"},)], ["'reference_attributes'", "row 2", "wavy"]),
    ],
)
def test_score_command_refuses_a_bad_row_in_one_line(tmp_path, change, words):
    source = write_completions(tmp_path / "completions.csv", change(GOOD_ROWS[:2]))
    out = tmp_path / "scores.csv"
    _refused(run_cli("mavic", "score", "--input", str(source), "--output", str(out)), str(source), *words)
    assert not out.exists()


def test_score_command_refuses_a_missing_column_a_bad_config_and_an_output_that_is_an_input(tmp_path):
    source = tmp_path / "completions.csv"
    csv.write_csv(
        pa.table({"group_id": ["g"], "completion": ["x"], "modality": ["clinical"], "reference_diagnosis": ["MEL"]}),
        source,
    )
    out = tmp_path / "scores.csv"
    _refused(
        run_cli("mavic", "score", "--input", str(source), "--output", str(out)),
        str(source),
        "'reference_attributes'",
        "missing column",
    )
    good = write_completions(tmp_path / "good.csv", GOOD_ROWS)
    config = tmp_path / "mavic.yaml"
    config.write_text("gate_k: -1\n")
    _refused(
        run_cli("mavic", "score", "--input", str(good), "--output", str(out), "--config", str(config)),
        str(config),
        "gate_k",
    )
    config.write_text("gate: 3\n")
    _refused(
        run_cli("mavic", "score", "--input", str(good), "--output", str(out), "--config", str(config)),
        str(config),
        "gate",
    )
    _refused(run_cli("mavic", "score", "--input", str(good), "--output", str(good)), "--output", "replace the input")
    _refused(
        run_cli("mavic", "score", "--input", str(good), "--output", str(tmp_path / "scores.json")),
        "--output",
        "unknown file type",
    )
    assert not out.exists()
    config.write_text("ontology: isic_archive\ncomposite: ungated\n")
    done = run_cli("mavic", "score", "--input", str(good), "--output", str(out), "--config", str(config))
    assert done.returncode == 0, done.stderr
    table = csv.read_csv(out)
    assert table.column("s_hier").to_pylist()[1] == pytest.approx(4 / 7)  # SCC vs MEL over the Archive's tree
    assert table.column("ontology").to_pylist()[0].startswith("isic_archive")


def test_weights_command_refuses_a_bad_training_table(tmp_path):
    training = tmp_path / "train.csv"
    csv.write_csv(pa.table({"attributes": ['{"streaks": "irregular"}'], "modality": ["dermoscopic"]}), training)
    _refused(
        run_cli("mavic", "weights", "--input", str(training), "--output", str(tmp_path / "w.csv")),
        str(training),
        "'diagnosis'",
        "missing column",
    )
    csv.write_csv(
        pa.table(
            {
                "attributes": ['{"streaks": "irregular"}', '{"stripes": "present"}'],
                "modality": ["dermoscopic", "dermoscopic"],
                "diagnosis": ["MEL", "NV"],
            }
        ),
        training,
    )
    _refused(
        run_cli("mavic", "weights", "--input", str(training), "--output", str(tmp_path / "w.csv")),
        str(training),
        "'attributes'",
        "row 2",
        "stripes",
    )
    assert not (tmp_path / "w.csv").exists()
