"""What the speed work must not change, and the settings it added (behaviour only, never timed):
parallel and prefetched streams give exactly the numbers of one stream alone, the poisson weights in
numpy are exactly the SQL's, unsupported metrics are not drawn, the DuckDB memory cap follows the
machine unless overridden, progress goes to stderr only, and `autheval --help` loads neither DuckDB nor numpy."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import autheval.estimation.bootstrap as bootstrap
from tests.conftest import ROOT, reference_file


def test_streams_on_threads_equal_each_stream_alone():
    rng = np.random.default_rng(1)
    streams = [
        (11, rng.standard_normal((300, 3))),
        (12, rng.standard_normal((57, 3))),
        (13, rng.standard_normal((300, 2))),
    ]
    alone = [bootstrap.replicate_products(seed, 250, m) for seed, m in streams]
    for workers in (1, 2, 3):
        together = bootstrap.stream_sums(streams, 250, workers=workers)
        for a, b in zip(alone, together):
            assert np.array_equal(a, b)


def test_prefetching_the_next_draws_keeps_the_stream():
    matrix = np.random.default_rng(2).standard_normal((40, 4))
    drawn = [s for _, s in bootstrap.product_blocks(5, 300, matrix, block_values=400, prefetch=True)]
    inline = [s for _, s in bootstrap.product_blocks(5, 300, matrix, block_values=400, prefetch=False)]
    assert all(np.array_equal(a, b) for a, b in zip(drawn, inline))
    counts = np.vstack(
        [np.bincount(np.random.default_rng(5).integers(0, 40, size=(300, 40))[r], minlength=40) for r in range(300)]
    )
    assert np.allclose(np.vstack(drawn), counts @ matrix, rtol=0, atol=1e-12)


def test_constant_columns_get_their_exact_sums():
    g = 33
    matrix = np.column_stack([np.zeros(g), np.ones(g), np.arange(g, dtype=float)])
    sums = bootstrap.replicate_products(9, 50, matrix)
    assert np.all(sums[:, 0] == 0.0) and np.all(sums[:, 1] == g)
    draws = np.random.default_rng(9).integers(0, g, size=(50, g))
    assert np.array_equal(sums[:, 2], draws.sum(axis=1).astype(float))


def test_numpy_poisson_weights_are_the_sql_weights():
    from tests.test_poisson import sql_weights

    seed = 20260711
    pairs = [(r, c) for r in range(6) for c in range(0, 700, 7)]
    ours = [int(bootstrap.poisson_weights(seed, r, 1, c, 1)[0, 0]) for r, c in pairs]
    assert ours == sql_weights(pairs, seed)
    block = bootstrap.poisson_weights(seed, 0, 6, 0, 700)
    assert [int(block[r, c]) for r, c in pairs] == ours


def test_poisson_products_do_not_depend_on_threads_or_pieces(monkeypatch):
    matrix = np.random.default_rng(3).standard_normal((1000, 5))
    one = bootstrap.poisson_products(7, 10, 40, matrix, workers=1)
    monkeypatch.setattr(bootstrap, "POISSON_CHUNK", 64)
    pieces = bootstrap.poisson_products(7, 10, 40, matrix, workers=2)
    assert np.allclose(one, pieces, rtol=0, atol=1e-12)
    assert np.array_equal(pieces, bootstrap.poisson_products(7, 10, 40, matrix, workers=3))
    weights = bootstrap.poisson_weights(7, 10, 40, 0, 1000)
    assert np.allclose(one, weights @ matrix, rtol=0, atol=1e-12)


def test_unsupported_metrics_are_not_drawn(monkeypatch):
    import pyarrow as pa

    import autheval.estimation.estimators as estimators
    from autheval.records.read import records_from_table

    drawn = []
    real = estimators.stream_sums

    def spy(jobs, reps, **kw):
        drawn.append(len(jobs))
        return real(jobs, reps, **kw)

    monkeypatch.setattr(estimators, "stream_sums", spy)
    table = pa.table(
        {
            "case_id": [f"c{i}" for i in range(12)],
            "cluster_id": [f"k{i % 5}" for i in range(12)],
            "proposed_action": ["a0"] * 12,
            "executed_action": ["a0", "a1"] * 6,
            "utility_executed_local": ["0", "-1"] * 6,
            "utility_proposed_local": ["0"] * 12,
        }
    )
    records = records_from_table(table, "log", "log", "0" * 64)
    result = estimators.estimate([records], scheme="evaluator", reps=50)
    supported = [m for m in estimators.METRICS if estimators.availability(records, m).available]
    assert len(supported) == 5 and drawn == [5]  # no global score: J_std, Delta_total, Delta_utility
    for metric in estimators.METRICS:
        row = result.estimate("log", "image_weighted", metric)
        assert row["available"] == (metric in supported)
        assert (row["ci_lower"] is not None) == (metric in supported)


def test_duckdb_memory_cap_follows_the_machine_unless_overridden(monkeypatch):
    from warehouse import sql

    monkeypatch.setenv("AUTHEVAL_DUCKDB_MEMORY", "3GB")
    assert sql.duckdb_memory_limit() == "3GB"
    monkeypatch.delenv("AUTHEVAL_DUCKDB_MEMORY")
    monkeypatch.setattr(sql, "available_memory_bytes", lambda: 10 << 30)
    assert sql.duckdb_memory_limit() == f"{sql.MAX_MEMORY_MB}MB"
    monkeypatch.setattr(sql, "available_memory_bytes", lambda: 1 << 30)
    assert sql.duckdb_memory_limit() == f"{int((1 << 30) * sql.MEMORY_SHARE) >> 20}MB"
    monkeypatch.setattr(sql, "available_memory_bytes", lambda: 100 << 20)
    assert sql.duckdb_memory_limit() == f"{sql.MIN_MEMORY_MB}MB"
    monkeypatch.setattr(sql, "available_memory_bytes", lambda: None)
    assert sql.duckdb_memory_limit() == "512MB"
    con = sql.connect()
    assert con.execute("select current_setting('memory_limit')").fetchone()[0].startswith("488")  # 512 MB in MiB


def test_progress_goes_to_stderr_only(monkeypatch, tmp_path, capsys):
    from autheval.cli.main import main

    real_init = bootstrap.Progress.__init__
    monkeypatch.setattr(
        bootstrap.Progress, "__init__", lambda self, total, report, every=2.0: real_init(self, total, report, 0.0)
    )
    assert (
        main(
            [
                "evaluate",
                "--input",
                str(reference_file("authority_log_example")),
                "--reps",
                "300",
                "--output-dir",
                str(tmp_path),
            ]
        )
        == 0
    )
    out, err = capsys.readouterr()
    assert all(line.startswith(str(tmp_path)) for line in out.splitlines())
    assert "autheval: bootstrap: 300 of 300 replicates" in err
    assert (
        main(
            [
                "evaluate",
                "--input",
                str(reference_file("authority_log_example")),
                "--reps",
                "300",
                "--output-dir",
                str(tmp_path),
                "--no-progress",
            ]
        )
        == 0
    )
    assert "autheval: bootstrap:" not in capsys.readouterr().err


def test_a_short_run_reports_no_progress():
    lines = []
    progress = bootstrap.Progress(100, lambda done, total: lines.append(done), every=60.0)
    for _ in range(10):
        progress.add(10)
    assert lines == []


def test_help_loads_no_duckdb_numpy_or_pyarrow_and_the_parser_constants_agree():
    code = (
        "import sys, io, contextlib\nfrom autheval.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n    try: main(['--help'])\n    except SystemExit: pass\n"
        "print(sorted(m for m in ('duckdb', 'numpy', 'pyarrow', 'pandas', 'dagster', 'torch') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
    from autheval.cli import common, evaluate
    from autheval.cli import main as cli
    from autheval.estimation import estimators
    from warehouse.lake import DEFAULT_LAKE

    assert evaluate.SCHEMES == estimators.SCHEMES
    assert common.DEFAULT_LAKE == DEFAULT_LAKE
    helps = {a.dest: a.help for a in cli.build_parser()._subparsers._group_actions[0]._choices_actions}
    assert helps["aggregate"] == cli.AGGREGATE_HELP


@pytest.mark.parametrize("command", ["evaluate", "compare"])
def test_the_command_line_process_leaves_pandas_and_pyarrow_dataset_alone(command, tmp_path):
    log = str(reference_file("authority_log_example"))
    args = ["evaluate", "--input", log] if command == "evaluate" else ["compare", "--arm", f"a={log}"]
    code = (
        "import sys, atexit\n"
        "atexit.register(lambda: print(sorted(m for m in ('pandas', 'pyarrow.dataset') if m in sys.modules), "
        "file=sys.stderr))\n"
        f"sys.argv = ['autheval', *{args!r}, '--reps', '100', '--output-dir', {str(tmp_path)!r}]\n"
        "from autheval.cli.main import main\nsys.exit(main())"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip().splitlines()[-1] == "[]"
    assert (tmp_path / "estimates.csv").exists()
