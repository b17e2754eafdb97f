"""CCT aggregators (DermoGPT section 1) against hand-computed cases, and `autheval aggregate` on good and
bad tables (each bad table: exit 2, one line naming the file and the column, no output written)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from autheval.cli.main import main
from autheval.errors import RecordError
from autheval.proposals.cct import aggregate, aggregate_table, cct_proposals, variant_probabilities
from tests.conftest import read_csv_rows, run_cli

OPTIONS = ("a0", "a1", "a2", "a3")


def long_table(cases: dict[str, list[list[float]]]) -> pa.Table:
    rows = [
        (case, variant, OPTIONS[o], p)
        for case, variants in cases.items()
        for variant, vector in enumerate(variants)
        for o, p in enumerate(vector)
    ]
    case, variant, option, prob = zip(*rows)
    return pa.table({"case_id": list(case), "variant": list(variant), "option": list(option), "prob": list(prob)})


def ranked(table: pa.Table, case: str) -> tuple[list[str], list[float]]:
    rows = [r for r in table.to_pylist() if r["case_id"] == case]
    assert [r["rank"] for r in rows] == list(range(len(rows)))
    return [r["option"] for r in rows], [r["prob"] for r in rows]


# case A: two variants; confidence margins 0.2 and 0.1, equal deviations
A = [[0.5, 0.3, 0.2, 0.0], [0.1, 0.2, 0.3, 0.4]]
# case B: three variants, two agreeing; deviations 0.04, 0.04, 0.16, equal margins 0.6
B = [[0.7, 0.1, 0.1, 0.1], [0.7, 0.1, 0.1, 0.1], [0.1, 0.1, 0.1, 0.7]]


def test_single_uses_variant_zero_and_ties_go_to_the_lower_option():
    table = aggregate_table(
        long_table({"x": [[0.1, 0.4, 0.1, 0.4], [0.0, 0.0, 0.0, 1.0]], "y": [[0.25] * 4, [1.0, 0.0, 0.0, 0.0]]}),
        "single",
    )
    assert ranked(table, "x") == (["a1", "a3", "a0", "a2"], [0.4, 0.4, 0.1, 0.1])
    assert ranked(table, "y")[0] == ["a0", "a1", "a2", "a3"]


def test_meanprob_is_the_barycenter():
    options, probs = ranked(aggregate_table(long_table({"A": A}), "meanprob"), "A")
    assert options == ["a0", "a1", "a2", "a3"]  # a1 and a2 tie at 0.25: lower first
    assert probs == pytest.approx([0.3, 0.25, 0.25, 0.2], abs=1e-15)


def test_vote_counts_argmaxes_then_mean_probability_then_lower_option():
    # A: a0 and a3 one vote each; mean prob a0 0.3 > a3 0.2; the zero-vote a1, a2 tie on mean 0.25
    options, probs = ranked(aggregate_table(long_table({"A": A}), "vote"), "A")
    assert options == ["a0", "a3", "a1", "a2"] and probs == [0.5, 0.5, 0.0, 0.0]
    # three variants: a2 twice, a1 once (variant 2 ties a1/a3 -> its vote goes to the lower, a1)
    D = [[0.1, 0.2, 0.6, 0.1], [0.2, 0.1, 0.5, 0.2], [0.0, 0.4, 0.2, 0.4]]
    options, probs = ranked(aggregate_table(long_table({"D": D}), "vote"), "D")
    assert options == ["a2", "a1", "a3", "a0"]  # a3 mean 0.2333 > a0 0.1
    assert probs == pytest.approx([2 / 3, 1 / 3, 0.0, 0.0])


def test_vote_tie_on_votes_and_mean_goes_to_the_lower_option():
    E = [[0.6, 0.0, 0.0, 0.4], [0.4, 0.0, 0.0, 0.6]]
    assert ranked(aggregate_table(long_table({"E": E}), "vote"), "E")[0] == ["a0", "a3", "a1", "a2"]


def test_confonly_weights_by_confidence_margin():
    lam = 10.0
    w0 = math.exp(lam * 0.2) / (math.exp(lam * 0.2) + math.exp(lam * 0.1))  # = e / (e + 1)
    expected = [w0 * a + (1 - w0) * b for a, b in zip(*A)]
    options, probs = ranked(aggregate_table(long_table({"A": A}), "confonly", lam=lam), "A")
    assert probs == pytest.approx(sorted(expected, reverse=True), abs=1e-12)
    assert options == ["a0", "a1", "a2", "a3"]
    # beta is not used by confonly: the same result whatever beta says
    again = aggregate(variant_probabilities(long_table({"A": A})), "confonly", lam=lam, beta=99.0)
    assert again.beta is None and again.prob[0].tolist() == pytest.approx(expected, abs=1e-12)
    # the margin, not the top probability: F0 has the larger top1 (0.45 > 0.4) but no margin (0 < 0.1)
    F = [[0.45, 0.45, 0.1, 0.0], [0.1, 0.2, 0.3, 0.4]]
    w0 = math.exp(lam * 0.0) / (math.exp(lam * 0.0) + math.exp(lam * 0.1))
    result = aggregate(variant_probabilities(long_table({"F": F})), "confonly", lam=lam)
    assert result.prob[0].tolist() == pytest.approx([w0 * a + (1 - w0) * b for a, b in zip(*F)], abs=1e-12)


def test_consonly_downweights_the_deviating_variant():
    beta = 10.0
    logits = [-beta * 0.04, -beta * 0.04, -beta * 0.16]
    w = [math.exp(v) for v in logits]
    w = [v / sum(w) for v in w]
    expected = [sum(w[r] * B[r][o] for r in range(3)) for o in range(4)]
    options, probs = ranked(aggregate_table(long_table({"B": B}), "consonly", beta=beta), "B")
    assert options == ["a0", "a3", "a1", "a2"]
    assert probs == pytest.approx([expected[0], expected[3], expected[1], expected[2]], abs=1e-12)
    # lam is not used by consonly, even where the margins differ
    F = [[0.45, 0.45, 0.1, 0.0], [0.1, 0.2, 0.3, 0.4]]
    plain = aggregate(variant_probabilities(long_table({"F": F})), "consonly", beta=beta)
    with_lam = aggregate(variant_probabilities(long_table({"F": F})), "consonly", lam=99.0, beta=beta)
    assert with_lam.lam is None and with_lam.prob.tolist() == plain.prob.tolist()
    # equal margins: confonly cannot tell the variants apart and gives the barycenter
    conf = aggregate(variant_probabilities(long_table({"B": B})), "confonly", lam=10.0)
    assert conf.prob[0].tolist() == pytest.approx([0.5, 0.1, 0.1, 0.3], abs=1e-12)


def test_cc_combines_confidence_and_consistency():
    lam, beta = 2.0, 10.0
    mean = [(x + y) / 2 for x, y in zip(*A)]
    deviation = [0.5 * sum((v - m) ** 2 for v, m in zip(vec, mean)) for vec in A]
    assert deviation == pytest.approx([0.0425, 0.0425])
    logits = [lam * 0.2 - beta * deviation[0], lam * 0.1 - beta * deviation[1]]
    w0 = math.exp(logits[0]) / (math.exp(logits[0]) + math.exp(logits[1]))
    expected = [w0 * a + (1 - w0) * b for a, b in zip(*A)]
    result = aggregate(variant_probabilities(long_table({"A": A})), "cc", lam=lam, beta=beta)
    assert result.prob[0].tolist() == pytest.approx(expected, abs=1e-12)
    assert (result.lam, result.beta) == (2.0, 10.0)


def test_many_cases_at_once_equal_one_case_at_a_time():
    rng = np.random.default_rng(7)
    cases = {f"c{i:03d}": rng.dirichlet([0.5] * 4, size=4).tolist() for i in range(60)}
    together = aggregate_table(long_table(cases), "cc", lam=3.0, beta=5.0).to_pylist()
    for case in ("c000", "c031", "c059"):
        alone = aggregate_table(long_table({case: cases[case]}), "cc", lam=3.0, beta=5.0).to_pylist()
        assert [r for r in together if r["case_id"] == case] == alone


def test_each_aggregator_is_a_proposal_mechanism():
    proposals, meta = cct_proposals(long_table({"img1": A + [[0.25] * 4], "img2": B}), "cc", lam=1.0, beta=1.0)
    assert proposals.column_names == [
        "mechanism",
        "image_id",
        "slate",
        "a_head",
        "p_very_low",
        "p_low",
        "p_moderate",
        "p_high",
        "source",
    ]
    rows = proposals.to_pylist()
    assert [r["mechanism"] for r in rows] == ["CCT cc"] * 2 and rows[0]["source"] == "model"
    assert all(r["a_head"] == r["slate"][0] and sorted(r["slate"]) == list(OPTIONS) for r in rows)
    assert rows[1]["slate"] == ["a0", "a3", "a1", "a2"]
    assert meta == {"method": "cc", "lam": 1.0, "beta": 1.0, "n_cases": 2, "n_variants": 3, "options": list(OPTIONS)}


# ---------------------------------------------------------------- the command


def write_csv(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


GOOD = "case_id,variant,option,prob\n" + "".join(
    f"{case},{v},{OPTIONS[o]},{p}\n"
    for case, vs in (("A", A), ("B", B[:2]))
    for v, vec in enumerate(vs)
    for o, p in enumerate(vec)
)


def test_aggregate_command_writes_csv_and_parquet(tmp_path):
    source = write_csv(tmp_path / "probs.csv", GOOD)
    result = run_cli("aggregate", "--input", str(source), "--method", "vote", "--output", str(tmp_path / "out.csv"))
    assert result.returncode == 0, result.stderr
    rows = read_csv_rows(tmp_path / "out.csv")
    assert list(rows[0]) == ["case_id", "option", "prob", "rank"]
    assert [(r["case_id"], r["option"], float(r["prob"]), int(r["rank"])) for r in rows[:4]] == [
        ("A", "a0", 0.5, 0),
        ("A", "a3", 0.5, 1),
        ("A", "a1", 0.0, 2),
        ("A", "a2", 0.0, 3),
    ]
    parquet_in = tmp_path / "probs.parquet"
    pq.write_table(long_table({"A": A}), parquet_in)
    assert (
        main(
            ["aggregate", "--input", str(parquet_in), "--method", "meanprob", "--output", str(tmp_path / "out.parquet")]
        )
        == 0
    )
    table = pq.read_table(tmp_path / "out.parquet")
    assert table.column("option").to_pylist() == ["a0", "a1", "a2", "a3"]
    assert table.column("rank").to_pylist() == [0, 1, 2, 3]


def test_sums_within_tolerance_pass(tmp_path):
    text = "case_id,variant,option,prob\nA,0,a0,0.5000005\nA,0,a1,0.5\nA,0,a2,0\nA,0,a3,0\n"
    assert (
        main(
            [
                "aggregate",
                "--input",
                str(write_csv(tmp_path / "p.csv", text)),
                "--method",
                "single",
                "--output",
                str(tmp_path / "o.csv"),
            ]
        )
        == 0
    )


BAD = {
    "sum": ("case_id,variant,option,prob\nA,0,a0,0.5000011\nA,0,a1,0.5\nA,0,a2,0\nA,0,a3,0\n", "prob"),
    "missing variant": (GOOD + "C,0,a0,1\nC,0,a1,0\nC,0,a2,0\nC,0,a3,0\n", "variant"),
    "unknown option": (GOOD.replace("A,1,a3,0.4", "A,1,a4,0.4"), "option"),
    "missing option": ("\n".join(GOOD.splitlines()[:-1]) + "\n", "option"),
    "extra column": ("case_id,variant,option,prob,model\nA,0,a0,1,m\nA,0,a1,0,m\nA,0,a2,0,m\nA,0,a3,0,m\n", "model"),
    "missing column": ("case_id,option,prob\nA,a0,1\nA,a1,0\nA,a2,0\nA,a3,0\n", "variant"),
    "not a number": (GOOD.replace("A,0,a0,0.5", "A,0,a0,half"), "prob"),
    "duplicate row": (GOOD + "A,0,a0,0.5\n", "option"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_tables_get_one_line_and_exit_2(tmp_path, capsys, case):
    text, column = BAD[case]
    source = write_csv(tmp_path / "probs.csv", text)
    out = tmp_path / "out.csv"
    assert main(["aggregate", "--input", str(source), "--method", "cc", "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert str(source) in err[0] and f"column '{column}'" in err[0], err[0]
    assert not out.exists() and list(tmp_path.iterdir()) == [source]


def test_bad_table_through_the_installed_command(tmp_path):
    source = write_csv(tmp_path / "probs.csv", BAD["sum"][0])
    result = run_cli("aggregate", "--input", str(source), "--method", "cc", "--output", str(tmp_path / "o.csv"))
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "sum to 1 within 1e-6" in result.stderr


def test_a_failed_write_leaves_no_output(tmp_path, monkeypatch):
    from pyarrow import csv

    def crash_midway(table, path):
        Path(path).write_text("case_id,option\n")
        raise OSError("disk full")

    monkeypatch.setattr(csv, "write_csv", crash_midway)
    out = tmp_path / "out.csv"
    try:  # the command line may report the OSError in one line (exit non-zero) or let it propagate
        code = main(
            ["aggregate", "--input", str(write_csv(tmp_path / "p.csv", GOOD)), "--method", "cc", "--output", str(out)]
        )
    except OSError:
        code = None
    assert code != 0
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["p.csv"]


def test_flags_the_method_does_not_use_are_refused(tmp_path, capsys):
    source = write_csv(tmp_path / "probs.csv", GOOD)
    assert (
        main(
            [
                "aggregate",
                "--input",
                str(source),
                "--method",
                "meanprob",
                "--lam",
                "2",
                "--output",
                str(tmp_path / "o.csv"),
            ]
        )
        == 2
    )
    assert "--lam" in capsys.readouterr().err
    assert (
        main(
            [
                "aggregate",
                "--input",
                str(source),
                "--method",
                "consonly",
                "--lam",
                "2",
                "--output",
                str(tmp_path / "o.csv"),
            ]
        )
        == 2
    )
    assert (
        main(
            [
                "aggregate",
                "--input",
                str(source),
                "--method",
                "confonly",
                "--beta",
                "2",
                "--output",
                str(tmp_path / "o.csv"),
            ]
        )
        == 2
    )
    assert not (tmp_path / "o.csv").exists()
    with pytest.raises(RecordError):
        variant_probabilities(pa.table({"case_id": ["A"], "variant": [0], "option": ["a0"], "prob": [0.5]}), "t")


def test_scorer_rows_become_the_long_table():
    from autheval.proposals.cct import variant_table_from_scores

    wide = pa.table(
        {
            "image_id": ["i1", "i1"],
            "variant": [0, 1],
            "p_very_low": [0.5, 0.1],
            "p_low": [0.3, 0.2],
            "p_moderate": [0.2, 0.3],
            "p_high": [0.0, 0.4],
        }
    )
    long = variant_table_from_scores(wide)
    assert long.to_pylist()[:2] == [
        {"case_id": "i1", "variant": 0, "option": "a0", "prob": 0.5},
        {"case_id": "i1", "variant": 0, "option": "a1", "prob": 0.3},
    ]
    assert (
        aggregate_table(long, "meanprob").to_pylist() == aggregate_table(long_table({"i1": A}), "meanprob").to_pylist()
    )


@pytest.mark.parametrize("lam, beta", [(float("nan"), 1.0), (1.0, float("inf")), (float("-inf"), 1.0)])
def test_non_finite_weights_are_refused(lam, beta):
    """lam or beta NaN gave NaN probabilities (and a head chosen by the tie rule), silently."""
    data = variant_probabilities(long_table({"A": A, "B": B[:2]}))
    with pytest.raises(ValueError, match="must be a finite number"):
        aggregate(data, "cc", lam, beta)
    with pytest.raises(ValueError, match="must be a finite number"):
        cct_proposals(long_table({"A": A}), "cc", lam, beta, mechanism="CCT cc", model="/models/scorer")
    with pytest.raises(ValueError, match="lam must be a finite number"):
        aggregate(data, "confonly", float("nan"))


def test_weights_that_overflow_are_refused():
    with pytest.raises(ValueError, match="overflow"):
        aggregate(variant_probabilities(long_table({"E": [[1.0, 0, 0, 0], [0, 0, 0, 1.0]]})), "cc", 1.7e308, -1.7e308)


def test_aggregate_command_refuses_a_nan_lam(tmp_path, capsys):
    source = write_csv(tmp_path / "probs.csv", GOOD)
    out = tmp_path / "o.csv"
    assert main(["aggregate", "--input", str(source), "--method", "cc", "--lam", "nan", "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "lam must be a finite number" in err[0], err
    assert not out.exists()
