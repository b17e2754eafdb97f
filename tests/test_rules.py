"""The declared local rules file: the default is the study's values; every broken rule is one line
naming the key (RuleError, exit 2 from `autheval rules check`)."""

from __future__ import annotations

import copy

import pytest
import yaml

from autheval.errors import RecordError
from autheval.rules import ACTIONS, RuleError, default_rules_text, load_rules, parse_rules
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
        ("a3", "standard", 1.20, 0.75), ("a2", "standard", 1.20, 1.20),
        ("a3", "strict", 1.80, 0.90), ("a1", "lenient", 1.30, 2.00)]
    assert rules.severity == {"very_low": 0.5, "low": 1.0, "moderate": 2.0, "high": 4.0}
    assert rules.proxy_bins.thresholds == [0.25, 0.50, 0.75]
    assert rules.floor.base == {"very_low": 0, "low": 0, "moderate": 1, "high": 2}
    assert rules.floor.shift == {"lenient": -1, "standard": 0, "strict": 1}
    assert rules.context_seed == 20260706
    sens = rules.private_factors.sens.levels
    assert [(s.name, s.w_under, s.w_over) for s in sens] == [
        ("sens_seeking", 1.25, 0.95), ("neutral", 1.0, 1.0), ("spec_seeking", 0.95, 1.25)]
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


@pytest.mark.parametrize("mutate, expected", [
    (lambda d: d["profiles"].update(clinic=dict(BASE["profiles"]["BCN_like"], capacity="a4")),
     "rules.yaml: profiles.clinic.capacity: must be one of a0..a3 (got 'a4')"),
    (lambda d: d["profiles"]["BCN_like"].update(capacity=3),
     "rules.yaml: profiles.BCN_like.capacity: must be one of a0..a3 (got 3)"),
    (lambda d: d.update(colour="red"), "rules.yaml: colour: unknown key"),
    (lambda d: d["profiles"]["HAM_like"].update(w_overr=1.2), "rules.yaml: profiles.HAM_like.w_overr: unknown key"),
    (lambda d: d["profiles"]["HAM_like"].pop("w_over"), "rules.yaml: profiles.HAM_like.w_over: required key is missing"),
    (lambda d: d.pop("global_utility"), "rules.yaml: global_utility: required key is missing"),
    (lambda d: d.update(actions=["a0", "a2", "a1", "a3"]),
     "rules.yaml: actions: must be the ordinal action list a0, a1, a2, a3 in this order (got a0, a2, a1, a3)"),
    (lambda d: d.update(actions=["a0", "a1", "a2"]), "rules.yaml: actions: must be the ordinal action list"),
    (lambda d: d["profiles"]["MSK_like"].update(w_under=-1.8), "rules.yaml: profiles.MSK_like.w_under: must be >= 0"),
    (lambda d: d["private_factors"]["burden"]["levels"][1].update(w_over=-1.15),
     "rules.yaml: private_factors.burden.levels[1].w_over: must be >= 0"),
    (lambda d: d["severity"].update(high=-4.0), "rules.yaml: severity.high: must be >= 0"),
    (lambda d: d["global_utility"].update(w_over=-1.2), "rules.yaml: global_utility.w_over: must be >= 0"),
    (lambda d: d["profiles"]["RURAL_like"].update(floor_policy="lax"),
     "rules.yaml: profiles.RURAL_like.floor_policy: must be one of lenient, standard, strict"),
    (lambda d: d["overrides"]["patient_refusal"].update(level="refusing"),
     "rules.yaml: overrides.patient_refusal.level: must be one of neutral, averse"),
    (lambda d: d["overrides"]["patient_burden"].update(removes="a9"),
     "rules.yaml: overrides.patient_burden.removes: must be one of a0..a3"),
    (lambda d: d["severity"].pop("moderate"), "rules.yaml: severity: missing risk level 'moderate'"),
    (lambda d: d["empty_band_default"].update(extreme="a3"), "rules.yaml: empty_band_default: unknown risk level 'extreme'"),
    (lambda d: d["floor"]["base"].update(high=4), "rules.yaml: floor.base.high: must be <= 3"),
    (lambda d: d["proxy_bins"].update(thresholds=[0.5, 0.25, 0.75]),
     "rules.yaml: proxy_bins.thresholds: must be strictly increasing"),
    (lambda d: d["proxy_bins"].update(thresholds=[0.5]), "rules.yaml: proxy_bins.thresholds: must list 3 thresholds"),
    (lambda d: d["profile_assignment"].update(missing_age_and_site="guess"),
     "rules.yaml: profile_assignment.missing_age_and_site: must be one of 'missing_tokens', 'nan_age_bin', 'image_id'"),
    (lambda d: d["private_factors"]["aversion"]["levels"].append({"name": "neutral", "w_over": 1.0}),
     "rules.yaml: private_factors.aversion.levels: level 'neutral' is listed twice"),
    (lambda d: d["private_factors"]["sens"].update(levels=[]), "rules.yaml: private_factors.sens.levels:"),
    (lambda d: d.update(profiles={}), "rules.yaml: profiles:"),
    (lambda d: d.update(context_seed="seed"), "rules.yaml: context_seed:"),
    (lambda d: d.pop("version"), "rules.yaml: version: required key is missing"),
])
def test_each_broken_rule_is_one_line_naming_the_key(mutate, expected):
    assert error_of(broken(mutate)).startswith(expected)


def test_not_yaml_and_not_a_mapping():
    assert error_of("profiles: [a0,").startswith("rules.yaml: not valid YAML at line 1")
    assert error_of("- a0\n- a1\n") == "rules.yaml: must be a YAML mapping of rule sections (see `autheval rules show`)"


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
    bad.write_text(broken(lambda d: d["profiles"].update(clinic=dict(BASE["profiles"]["BCN_like"], capacity="a7"))),
                   encoding="utf-8")
    done = run_cli("rules", "check", str(bad))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].endswith(f"{bad}: profiles.clinic.capacity: must be one of a0..a3 (got 'a7')")
