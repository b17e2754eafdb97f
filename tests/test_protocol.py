"""The declared acceptance protocol: the packaged default, and every way a protocol file can be broken,
each refused in one line naming the key (exit 2 from `autheval protocol check`)."""

from __future__ import annotations

import hashlib

import pytest

from autheval.cli.main import main
from autheval.errors import RecordError
from autheval.monitoring.protocol import (
    DEFAULT_PROTOCOL,
    ProtocolError,
    default_protocol_text,
    load_protocol,
    parse_protocol,
)
from tests.conftest import run_cli

GOOD = """\
version: p-1
alpha: 0.05
horizon_clusters: 500
min_clusters: 20
rules:
  - {metric: Delta_authority, unit: cluster_equal, lower: -0.10}
  - {metric: intervention_rate, unit: image_weighted, lower: 0.05, upper: 0.60}
"""


def test_the_default_protocol_is_packaged_and_valid():
    protocol = load_protocol(None)
    assert protocol.version == "service-protocol-1" and protocol.multiplicity == "holm"
    assert protocol.sha256 == hashlib.sha256(DEFAULT_PROTOCOL.read_bytes()).hexdigest()
    assert [(r.metric, r.unit, r.lower, r.upper) for r in protocol.rules] == [
        ("Delta_authority", "cluster_equal", -0.10, None),
        ("intervention_rate", "image_weighted", 0.05, 0.60),
    ]


def test_site_overrides_replace_only_what_they_name():
    protocol = parse_protocol(
        GOOD + "sites:\n  b: {min_clusters: 50}\n  c: {alpha: 0.01, rules: "
        "[{metric: J, unit: image_weighted, lower: 0.1}]}\n"
    )
    assert protocol.settings("a") == (0.05, 20, list(protocol.rules))
    assert protocol.settings("b") == (0.05, 50, list(protocol.rules))
    alpha, minimum, rules = protocol.settings("c")
    assert (alpha, minimum, [(r.metric, r.lower) for r in rules]) == (0.01, 20, [("J", 0.1)])


BROKEN = [
    (
        "unknown metric",
        GOOD.replace("metric: Delta_authority", "metric: Delta"),
        "rules[0].metric: must be one of 'Delta_authority', 'intervention_rate', 'delta', 'J', 'J_auth' (got 'Delta')",
    ),
    (
        "unknown unit",
        GOOD.replace("unit: cluster_equal", "unit: per_image"),
        "rules[0].unit: must be one of 'image_weighted', 'cluster_equal' (got 'per_image')",
    ),
    (
        "lower > upper",
        GOOD.replace("lower: 0.05, upper: 0.60", "lower: 0.7, upper: 0.60"),
        "rules[1].lower: must be <= upper (0.6); got 0.7",
    ),
    (
        "no bound",
        GOOD.replace(", lower: -0.10", ""),
        "rules[0].lower: a rule needs a lower or an upper bound (or both)",
    ),
    ("alpha 0", GOOD.replace("alpha: 0.05", "alpha: 0"), "alpha: must be > 0 (got 0)"),
    ("alpha 1", GOOD.replace("alpha: 0.05", "alpha: 1"), "alpha: must be < 1 (got 1)"),
    ("alpha not a number", GOOD.replace("alpha: 0.05", "alpha: five"), "alpha: input should be a valid number"),
    ("alpha quoted", GOOD.replace("alpha: 0.05", "alpha: '0.05'"), "alpha: input should be a valid number"),
    ("bound quoted", GOOD.replace("lower: -0.10", "lower: '-0.10'"), "rules[0].lower: input should be a valid number"),
    ("bound infinite", GOOD.replace("lower: -0.10", "lower: -.inf"), "rules[0].lower: input should be a finite number"),
    (
        "duplicate rule",
        GOOD + "  - {metric: Delta_authority, unit: cluster_equal, upper: 0.5}\n",
        "rules[2]: rule Delta_authority / cluster_equal is given twice (rules[0] and here)",
    ),
    ("unknown field", GOOD + "alpah: 0.01\n", "alpah: unknown key"),
    ("unknown rule field", GOOD.replace("lower: -0.10}", "lower: -0.10, lowre: 1}"), "rules[0].lowre: unknown key"),
    ("empty rules", GOOD[: GOOD.index("rules:")] + "rules: []\n", "rules: must not be empty: list at least one rule"),
    ("no rules", GOOD[: GOOD.index("rules:")], "rules: required key is missing"),
    ("min_clusters < 2", GOOD.replace("min_clusters: 20", "min_clusters: 1"), "min_clusters: must be >= 2 (got 1)"),
    ("horizon missing", GOOD.replace("horizon_clusters: 500\n", ""), "horizon_clusters: required key is missing"),
    ("horizon a float", GOOD.replace("horizon_clusters: 500", "horizon_clusters: 500.5"), "horizon_clusters: "),
    (
        "bad multiplicity",
        GOOD + "multiplicity: sidak\n",
        "multiplicity: must be one of 'holm', 'bonferroni', 'none' (got 'sidak')",
    ),
    ("site override broken", GOOD + "sites:\n  b: {min_clusters: 0}\n", "sites.b.min_clusters: must be >= 2 (got 0)"),
    ("site override unknown key", GOOD + "sites:\n  b: {alfa: 0.1}\n", "sites.b.alfa: unknown key"),
    (
        "reference shares",
        GOOD + "case_mix_reference: {proposed_action: {a0: 0.2, a1: 0.2}}\n",
        "case_mix_reference.proposed_action: shares must sum to 1 (got 0.4)",
    ),
    ("reference dimension", GOOD + "case_mix_reference: {age: {old: 1.0}}\n", "case_mix_reference.age: "),
    ("key twice", GOOD + "alpha: 0.01\n", "alpha: key given twice (lines 2 and 8)"),
    ("bad YAML", GOOD + "rules: [\n", "not valid YAML at line"),
    ("not a mapping", "- 1\n- 2\n", "must be a YAML mapping of protocol keys"),
]


@pytest.mark.parametrize("text, expected", [(t, e) for _, t, e in BROKEN], ids=[n for n, *_ in BROKEN])
def test_each_broken_protocol_is_one_line_naming_the_key(tmp_path, capsys, text, expected):
    path = tmp_path / "protocol.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ProtocolError) as caught:
        load_protocol(path)
    assert isinstance(caught.value, RecordError) and caught.value.exit_code == 2
    assert str(caught.value).startswith(f"{path}: {expected}")
    assert "\n" not in str(caught.value)
    assert main(["protocol", "check", str(path)]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0] and captured.out == ""


def test_a_missing_or_unreadable_protocol_is_one_line(tmp_path):
    with pytest.raises(ProtocolError, match="no such file"):
        load_protocol(tmp_path / "absent.yaml")
    (tmp_path / "latin1.yaml").write_bytes(b"version: caf\xe9\n")
    with pytest.raises(ProtocolError, match="not UTF-8"):
        load_protocol(tmp_path / "latin1.yaml")
    with pytest.raises(ProtocolError, match="a folder"):
        load_protocol(tmp_path)


def test_cli_protocol_show_and_check(tmp_path):
    done = run_cli("protocol", "show")
    assert done.returncode == 0, done.stderr
    assert done.stdout == default_protocol_text()
    good = tmp_path / "p.yaml"
    good.write_text(GOOD, encoding="utf-8")
    done = run_cli("protocol", "check", str(good))
    assert done.returncode == 0, done.stderr
    assert f"ok: version p-1, sha256 {hashlib.sha256(GOOD.encode()).hexdigest()}" in done.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD.replace("alpha: 0.05", "alpha: 1.5"), encoding="utf-8")
    done = run_cli("protocol", "check", str(bad))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"autheval: error: {bad}: alpha: must be < 1 (got 1.5)"]
