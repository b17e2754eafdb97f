"""The declared local rules file: the default is the study's values; every broken rule is one line
naming the key (RuleError, exit 2 from `autheval rules check`)."""

from __future__ import annotations

import copy

import pytest
import yaml

from autheval.errors import RecordError
from autheval.review.rules import RuleError, default_rules_text, load_rules, parse_rules
from autheval.vocabulary import ACTIONS
from tests.conftest import run_cli

BASE = yaml.safe_load(default_rules_text())


def broken(mutate) -> str:
    """The default rules with one change, as YAML text."""
    data = copy.deepcopy(BASE)
    mutate(data)
    return yaml.safe_dump(data, sort_keys=False)


def error_of(text: str) -> str:
    with pytest.raises(RuleError) as caught:
        parse_rules(text, source="rules.yaml")
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_default_rules_are_the_study_values():
    rule_file = load_rules()
    rules = rule_file.rules
    assert rule_file.version == "autheval-reference-1"
    assert len(rule_file.sha256) == 64
    assert list(rules.profiles) == ["BCN_like", "HAM_like", "MSK_like", "RURAL_like"]  # H12 index order
    assert [(p.capacity, p.floor_policy, p.w_under, p.w_over) for p in rules.profiles.values()] == [
        ("a3", "standard", 1.20, 0.75),
        ("a2", "standard", 1.20, 1.20),
        ("a3", "strict", 1.80, 0.90),
        ("a1", "lenient", 1.30, 2.00),
    ]
    assert rules.severity == {"very_low": 0.5, "low": 1.0, "moderate": 2.0, "high": 4.0}
    assert rules.proxy_bins.thresholds == [0.25, 0.50, 0.75]
    assert rules.floor.base == {"very_low": 0, "low": 0, "moderate": 1, "high": 2}
    assert rules.floor.shift == {"lenient": -1, "standard": 0, "strict": 1}
    assert rules.context_seed == 20260706
    sens = rules.private_factors.sens.levels
    assert [(s.name, s.w_under, s.w_over) for s in sens] == [
        ("sens_seeking", 1.25, 0.95),
        ("neutral", 1.0, 1.0),
        ("spec_seeking", 0.95, 1.25),
    ]
    assert [(b.name, b.w_over) for b in rules.private_factors.burden.levels] == [("low", 1.0), ("high", 1.15)]
    assert [(a.name, a.w_over) for a in rules.private_factors.aversion.levels] == [("neutral", 1.0), ("averse", 1.2)]
    assert rules.empty_band_default == {"very_low": "a0", "low": "a0", "moderate": "a2", "high": "a2"}
    assert (rules.global_utility.w_under, rules.global_utility.w_over) == (1.2, 1.2)
    assert rules.profile_assignment.missing_age_and_site == "missing_tokens"


def test_the_sha256_is_the_files(tmp_path):
    import hashlib

    path = tmp_path / "rules.yaml"
    path.write_text(default_rules_text(), encoding="utf-8")
    assert load_rules(path).sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (
            lambda d: d["profiles"].update(clinic=dict(BASE["profiles"]["BCN_like"], capacity="a4")),
            "rules.yaml: profiles.clinic.capacity: must be one of a0..a3 (got 'a4')",
        ),
        (
            lambda d: d["profiles"]["BCN_like"].update(capacity=3),
            "rules.yaml: profiles.BCN_like.capacity: must be one of a0..a3 (got 3)",
        ),
        (lambda d: d.update(colour="red"), "rules.yaml: colour: unknown key"),
        (lambda d: d["profiles"]["HAM_like"].update(w_overr=1.2), "rules.yaml: profiles.HAM_like.w_overr: unknown key"),
        (
            lambda d: d["profiles"]["HAM_like"].pop("w_over"),
            "rules.yaml: profiles.HAM_like.w_over: required key is missing",
        ),
        (lambda d: d.pop("global_utility"), "rules.yaml: global_utility: required key is missing"),
        (
            lambda d: d.update(actions=["a0", "a2", "a1", "a3"]),
            "rules.yaml: actions: must be the ordinal action list a0, a1, a2, a3 in this order (got a0, a2, a1, a3)",
        ),
        (lambda d: d.update(actions=["a0", "a1", "a2"]), "rules.yaml: actions: must be the ordinal action list"),
        (
            lambda d: d["profiles"]["MSK_like"].update(w_under=-1.8),
            "rules.yaml: profiles.MSK_like.w_under: must be >= 0",
        ),
        (
            lambda d: d["private_factors"]["burden"]["levels"][1].update(w_over=-1.15),
            "rules.yaml: private_factors.burden.levels[1].w_over: must be >= 0",
        ),
        (lambda d: d["severity"].update(high=-4.0), "rules.yaml: severity.high: must be >= 0"),
        (lambda d: d["global_utility"].update(w_over=-1.2), "rules.yaml: global_utility.w_over: must be >= 0"),
        (
            lambda d: d["profiles"]["RURAL_like"].update(floor_policy="lax"),
            "rules.yaml: profiles.RURAL_like.floor_policy: must be one of lenient, standard, strict",
        ),
        (
            lambda d: d["overrides"]["patient_refusal"].update(level="refusing"),
            "rules.yaml: overrides.patient_refusal.level: must be one of neutral, averse",
        ),
        (
            lambda d: d["overrides"]["patient_burden"].update(removes="a9"),
            "rules.yaml: overrides.patient_burden.removes: must be one of a0..a3",
        ),
        (lambda d: d["severity"].pop("moderate"), "rules.yaml: severity: missing risk level 'moderate'"),
        (
            lambda d: d["empty_band_default"].update(extreme="a3"),
            "rules.yaml: empty_band_default: unknown risk level 'extreme'",
        ),
        (lambda d: d["floor"]["base"].update(high=4), "rules.yaml: floor.base.high: must be <= 3"),
        (
            lambda d: d["proxy_bins"].update(thresholds=[0.5, 0.25, 0.75]),
            "rules.yaml: proxy_bins.thresholds: must be strictly increasing",
        ),
        (
            lambda d: d["proxy_bins"].update(thresholds=[0.5]),
            "rules.yaml: proxy_bins.thresholds: must list 3 thresholds",
        ),
        (
            lambda d: d["profile_assignment"].update(missing_age_and_site="guess"),
            "rules.yaml: profile_assignment.missing_age_and_site: must be one of "
            "'missing_tokens', 'nan_age_bin', 'image_id'",
        ),
        (
            lambda d: d["private_factors"]["aversion"]["levels"].append({"name": "neutral", "w_over": 1.0}),
            "rules.yaml: private_factors.aversion.levels: level 'neutral' is listed twice",
        ),
        (lambda d: d["private_factors"]["sens"].update(levels=[]), "rules.yaml: private_factors.sens.levels:"),
        (lambda d: d.update(profiles={}), "rules.yaml: profiles:"),
        (lambda d: d.update(context_seed="seed"), "rules.yaml: context_seed:"),
        (lambda d: d.pop("version"), "rules.yaml: version: required key is missing"),
        # every other rule of the schema, each fed its case
        (
            lambda d: d["proxy_bins"].update(thresholds=[0.25, 0.25, 0.75]),
            "rules.yaml: proxy_bins.thresholds: must be strictly increasing",
        ),
        (
            lambda d: d["proxy_bins"].update(thresholds=[0.25, 0.5, float("inf")]),
            "rules.yaml: proxy_bins.thresholds[2]: input should be a finite number (got inf)",
        ),
        (
            lambda d: d["proxy_bins"].update(thresholds=[0.25, 0.5, 1e300]),
            "rules.yaml: proxy_bins.thresholds[2]: must be <= 1e+06",
        ),
        (lambda d: d["floor"]["base"].update(low=-1), "rules.yaml: floor.base.low: must be >= 0 (got -1)"),
        (lambda d: d["floor"]["base"].update(low=1.0), "rules.yaml: floor.base.low: input should be a valid integer"),
        (
            lambda d: d["floor"]["shift"].update(strict="1"),
            "rules.yaml: floor.shift.strict: input should be a valid integer",
        ),
        (
            lambda d: d["floor"]["shift"].update(strict=9223372036854775808),
            "rules.yaml: floor.shift.strict: must be <= 3 (got 9223372036854775808)",
        ),
        (lambda d: d["floor"]["shift"].update(lenient=-4), "rules.yaml: floor.shift.lenient: must be >= -3"),
        (lambda d: d["floor"].update(shift={}), "rules.yaml: floor.shift:"),
        (
            lambda d: d["profiles"]["BCN_like"].update(w_under=float("inf")),
            "rules.yaml: profiles.BCN_like.w_under: input should be a finite number (got inf)",
        ),
        (
            lambda d: d["profiles"]["BCN_like"].update(w_over=float("nan")),
            "rules.yaml: profiles.BCN_like.w_over: input should be a finite number",
        ),
        (lambda d: d["severity"].update(high=1e308), "rules.yaml: severity.high: must be <= 1e+06 (got 1e+308)"),
        (
            lambda d: d["private_factors"]["sens"]["levels"][0].update(w_under=2e6),
            "rules.yaml: private_factors.sens.levels[0].w_under: must be <= 1e+06",
        ),
        (
            lambda d: d["global_utility"].update(w_under=float("inf")),
            "rules.yaml: global_utility.w_under: input should be a finite",
        ),
        (
            lambda d: d.update(context_seed="20260706"),
            "rules.yaml: context_seed: input should be a valid integer (got '20260706')",
        ),
        (lambda d: d.update(context_seed=20260706.0), "rules.yaml: context_seed: input should be a valid integer"),
        (lambda d: d.update(context_seed=-1), "rules.yaml: context_seed: must be >= 0 (got -1)"),
        (lambda d: d.update(context_seed=2**63), "rules.yaml: context_seed: must be <= 9223372036854775807"),
        (lambda d: d.update(version=""), "rules.yaml: version: string should have at least 1 character"),
        (lambda d: d.update(version="my rules"), "rules.yaml: version: string should match pattern"),
        (
            lambda d: d["profiles"].update({"my clinic": BASE["profiles"]["BCN_like"]}),
            "rules.yaml: profiles.my clinic:",
        ),
        (lambda d: d.update(severity=[0.5, 1.0, 2.0, 4.0]), "rules.yaml: severity: input should be a valid dictionary"),
        (lambda d: d["private_factors"]["burden"].update(levels=[]), "rules.yaml: private_factors.burden.levels:"),
        (
            lambda d: d["private_factors"]["sens"]["levels"][2].update(name="neutral"),
            "rules.yaml: private_factors.sens.levels: level 'neutral' is listed twice",
        ),
        (
            lambda d: d["overrides"]["patient_burden"].update(level="heavy"),
            "rules.yaml: overrides.patient_burden.level: must be one of low, high "
            "(the levels of private_factors.burden)",
        ),
        (
            lambda d: d["overrides"]["patient_refusal"].update(removes="a4"),
            "rules.yaml: overrides.patient_refusal.removes: must be one of a0..a3 (got 'a4')",
        ),
        (
            lambda d: d["overrides"]["patient_burden"]["if_band_has"].pop("high"),
            "rules.yaml: overrides.patient_burden.if_band_has: missing risk level 'high'",
        ),
        (
            lambda d: d["overrides"]["patient_burden"]["if_band_has"].update(low="a5"),
            "rules.yaml: overrides.patient_burden.if_band_has.low: must be one of a0..a3 (got 'a5')",
        ),
        (
            lambda d: d["empty_band_default"].update(high="A2"),
            "rules.yaml: empty_band_default.high: must be one of a0..a3 (got 'A2')",
        ),
        (lambda d: d["empty_band_default"].pop("low"), "rules.yaml: empty_band_default: missing risk level 'low'"),
    ],
)
def test_each_broken_rule_is_one_line_naming_the_key(mutate, expected):
    assert error_of(broken(mutate)).startswith(expected)


def test_not_yaml_and_not_a_mapping():
    assert error_of("profiles: [a0,").startswith("rules.yaml: not valid YAML at line 1")
    assert error_of("- a0\n- a1\n") == "rules.yaml: must be a YAML mapping of rule sections (see `autheval rules show`)"
    assert error_of("") == "rules.yaml: must be a YAML mapping of rule sections (see `autheval rules show`)"
    assert error_of("# only a comment\n").startswith("rules.yaml: must be a YAML mapping")


DEFAULT = default_rules_text()


@pytest.mark.parametrize(
    "text, expected",
    [
        (DEFAULT + "\nversion: other\n", "rules.yaml: version: key given twice (lines 5 and 77)"),
        (
            DEFAULT.replace("w_under: 1.20, w_over: 0.75}", "w_under: 1.20, w_over: 0.75, w_over: 0.8}"),
            "rules.yaml: profiles.BCN_like.w_over: key given twice (on line 21)",
        ),
        (
            DEFAULT.replace("  HAM_like: {capacity: a2", "  BCN_like: {capacity: a2"),
            "rules.yaml: profiles.BCN_like: key given twice (lines 21 and 22)",
        ),
        (
            DEFAULT.replace("      - {name: low, w_over: 1.00}", "      - {name: low, w_over: 1.00, name: lower}"),
            "rules.yaml: private_factors.burden.levels[0].name: key given twice",
        ),
    ],
    ids=["top level", "flow mapping", "profile", "inside a list"],
)
def test_a_key_given_twice_is_refused_not_last_wins(text, expected):
    assert yaml.safe_load(text) is not None  # plain YAML takes it: the last value wins
    assert error_of(text).startswith(expected)


# The billion laughs under `version:`: nine levels of nine aliases each (9^9 values once expanded).
BOMB = "version:\n" + "".join(
    f"  - &{k} [" + ", ".join([f"*{p}"] * 9 if p else ["lol"] * 9) + "]\n"
    for p, k in zip([None, *"abcdefgh"], "abcdefghi")
)


def test_an_alias_bomb_is_refused_at_once():
    import time

    start = time.perf_counter()
    text = DEFAULT.replace("version: autheval-reference-1\n", BOMB)
    assert error_of(text).startswith("rules.yaml: version[5]: YAML aliases expand to more than 100000 values")
    few = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{k}: &{k} [*{p}, *{p}, *{p}, *{p}, *{p}]\n" for p, k in zip("abcde", "bcdef")
    )  # f: 35156 values
    assert error_of(few + "version: [*f]\n") == (  # 26 aliases, 79k values in all: the schema speaks
        "rules.yaml: version: input should be a valid string (got [[[...], [...], [...], [...], [...]]])"
    )
    assert error_of(few + "version: [*f, *f, *f]\n").startswith(
        "rules.yaml: version: YAML aliases expand to more than 100000"
    )
    assert time.perf_counter() - start < 5  # (without the bounds: gigabytes and minutes)


def test_aliases_within_the_bounds_are_accepted():
    text = DEFAULT.replace(
        "  BCN_like: {capacity: a3, floor_policy: standard, w_under: 1.20, w_over: 0.75}",
        "  BCN_like: &base {capacity: a3, floor_policy: standard, w_under: 1.20, w_over: 0.75}\n  CLINIC: *base",
    )
    assert list(parse_rules(text).rules.profiles) == ["BCN_like", "CLINIC", "HAM_like", "MSK_like", "RURAL_like"]
    many = "".join(f"  P{i}: *base\n" for i in range(99))
    text = DEFAULT.replace("  BCN_like: {capacity: a3", "  BCN_like: &base {capacity: a3").replace(
        "  HAM_like:", many + "  HAM_like:"
    )
    assert len(parse_rules(text).rules.profiles) == 103  # 99 aliases: under the bound
    over = text.replace("  HAM_like:", "  P99: *base\n  P100: *base\n  HAM_like:")
    assert error_of(over).startswith("rules.yaml: profiles.P100: more than 100 YAML aliases")


def test_recursive_aliases_deep_nesting_and_huge_integers_are_one_line():
    assert error_of("version: &a [*a]\n").startswith(
        "rules.yaml: version[0]: a YAML alias refers to a value that contains it"
    )
    assert (
        error_of("version: " + "[" * 3000 + "]" * 3000 + "\n")
        == "rules.yaml: not valid YAML: nested too deeply for a rule file"
    )
    assert error_of("context_seed: " + "9" * 5000 + "\n").startswith("rules.yaml: not valid YAML: Exceeds the limit")


def test_a_huge_value_is_named_in_a_short_line():
    text = DEFAULT.replace("version: autheval-reference-1", "version: [" + ", ".join(["long text"] * 5000) + "]")
    message = error_of(text)
    assert message.startswith("rules.yaml: version: input should be a valid string (got [") and len(message) < 200


def test_a_file_that_is_not_utf8_is_one_line(tmp_path):
    path = tmp_path / "rules.yaml"
    path.write_bytes(default_rules_text().encode("utf-16"))
    with pytest.raises(RuleError, match="is not UTF-8 text"):
        load_rules(path)


def test_rule_error_is_a_record_error_with_exit_code_2(tmp_path):
    with pytest.raises(RecordError) as caught:
        load_rules(tmp_path / "absent.yaml")
    assert caught.value.exit_code == 2
    assert str(caught.value) == f"{tmp_path / 'absent.yaml'}: file not found"


def test_actions_are_the_ordinal_list():
    assert ACTIONS == ("a0", "a1", "a2", "a3")


def test_cli_rules_show_prints_the_default():
    done = run_cli("rules", "show")
    assert done.returncode == 0, done.stderr
    assert done.stdout == default_rules_text()


def test_cli_rules_check(tmp_path):
    good = tmp_path / "rules.yaml"
    good.write_text(default_rules_text(), encoding="utf-8")
    done = run_cli("rules", "check", str(good))
    assert done.returncode == 0, done.stderr
    assert "ok: version autheval-reference-1" in done.stdout

    bad = tmp_path / "bad.yaml"
    bad.write_text(
        broken(lambda d: d["profiles"].update(clinic=dict(BASE["profiles"]["BCN_like"], capacity="a7"))),
        encoding="utf-8",
    )
    done = run_cli("rules", "check", str(bad))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].endswith(f"{bad}: profiles.clinic.capacity: must be one of a0..a3 (got 'a7')")

    for text, expected in (
        (DEFAULT.replace("lenient: -1", "lenient: 9223372036854775808"), "floor.shift.lenient: must be <= 3"),
        (DEFAULT.replace("high: 4.0}", "high: 1e308}"), "severity.high: must be <= 1e+06"),
        (DEFAULT + "\nversion: again\n", "version: key given twice"),
        (DEFAULT.replace("version: autheval-reference-1\n", BOMB), "version[5]: YAML aliases expand"),
    ):
        bad.write_text(text, encoding="utf-8")
        done = run_cli("rules", "check", str(bad))
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1 and f"{bad}: {expected}" in lines[0], done.stderr
