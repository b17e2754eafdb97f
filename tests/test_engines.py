"""The engine matrix: every estimator SQL file runs on DuckDB and on local Spark (local[2]) through the
engine seam and gives the same numbers; bad engine configuration is one line and exit code 2.

One Spark session (one JVM) serves the whole module. Without the spark extra or Java the Spark cases
skip with the reason (`.ci/run` installs both where it can); the DuckDB cases always run.

Per file: the DuckDB form (as the default engine runs it, on a plain DuckDB connection) against its
portable form (sql/README.md) on DuckDB through Ibis and on Spark, on identical inputs, to 1e-12
relative. End to end: `estimate(..., engine=spark)` against the default engine, the mixed reference
summary against the published file (1e-12), the poisson scheme's weights (identical) and intervals.
"""

from __future__ import annotations

import importlib.util
import math
import os
import re
import socket
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from autheval.estimation.bootstrap import replicate_products
from autheval.estimation.engine_estimates import point_weights, reference_weight_blocks, replicate_id_blocks
from autheval.estimation.estimators import estimate
from autheval.records.cluster_stats import create_cluster_stats
from autheval.records.read import read_records
from tests.conftest import ROOT, published_summary, read_csv_rows, reference_file
from tests.sql import engine_read, sql_text
from tests.test_poisson import expected_weight, grid_index
from warehouse.engine import EngineConfig, EngineError, bind_parameters, connect_engine, engine_config

SEED = 20260711
MATRIX_REPS = 300  # replicates of the per-file matrix (the end-to-end cases use the published 5000)
CONTRAST = ("CLIP probe minus LLaVA-Med head", "CLIP probe", "LLaVA-Med head")
ARMS = (("mixed", "trace_mixed"), ("LLaVA-Med head", "trace_llava_med_head"), ("CLIP probe", "trace_clip_probe"))

# Every estimator SQL file the default engine runs (autheval/estimation/estimators.py) -> the form every engine
# runs, with the key columns its rows are matched on. The DuckDB-only `evaluator` scheme is declared
# apart (sql/README.md); a test below keeps both lists complete.
MATRIX = {
    "records/cluster_stats": ("records/portable_cluster_stats", ("analysis", "cluster_rank")),
    "records/cluster_matrix": ("records/cluster_matrix", ("analysis", "cluster_rank")),
    "estimates/replicates_point": ("estimates/portable_replicates_weighted", ("analysis", "rep")),
    "replicates_poisson": ("estimates/portable_replicates_poisson", ("analysis", "rep")),
    "estimates/replicate_metrics": ("estimates/replicate_metrics", ("analysis", "rep", "unit")),
    "estimates/intervals": ("portable_intervals", ("analysis", "unit", "metric")),
    "estimates/identity_check": ("portable_identity_check", ("analysis", "unit")),
    "estimates/paired_clusters_mismatch": ("estimates/paired_clusters_mismatch", ("contrast", "cluster_id")),
    "estimates/paired_contrast": ("portable_paired_contrast", ("contrast", "unit")),
    "estimates/delta_method": ("estimates/delta_method", ("analysis", "unit", "metric")),
    "estimates/evaluator_clusters": ("estimates/portable_evaluator_clusters", ("analysis", "metric", "cluster_rank")),
    "estimates/multiplicity": (
        "estimates/multiplicity",
        ("row_id",),
    ),  # autheval/estimation/multiplicity.py: Holm and BH over families
}  # portable_evaluator_weighted: against the in-process products (test_evaluator_weighted_...)
# Runs on the in-process DuckDB whatever the engine (on one row per replicate, analysis and metric).
DUCKDB_ONLY = {
    "estimates/evaluator_metrics",
    "estimates/evaluator_stream_runs",
    "records/cluster_matrix_runs",
    "warehouse/duckdb_memory_limit",
}


def spark_missing() -> str | None:
    if importlib.util.find_spec("pyspark") is None:
        return "the spark extra is not installed (pip install -e '.[spark]')"
    from warehouse.engine import java_executable

    if java_executable() is None:
        return "Java is missing (apt-get install openjdk-17-jre-headless)"
    return None


# ---------------------------------------------------------------------------------------------- inputs


@pytest.fixture(scope="module")
def recordsets():
    return [read_records(reference_file(trace), analysis=name) for name, trace in ARMS]


@pytest.fixture(scope="module")
def inputs(recordsets) -> dict[str, pa.Table]:
    """Identical input tables for every engine, made by the default engine's own SQL."""
    con = duckdb.connect()
    con.register("records", pa.concat_tables([r.table for r in recordsets]))
    create_cluster_stats(con)  # the default engine's sums (one partition) and ranks
    params = {"first_rep": 0, "reps": MATRIX_REPS, "seed": SEED}
    point = _arrow(con.execute(sql_text("estimates/replicates_point")).arrow())
    sums = pa.concat_tables(
        [point, _arrow(con.execute(sql_text("replicates_poisson"), params).arrow()).cast(point.schema)]
    )
    con.register("replicate_sums", sums)
    con.sql(sql_text("estimates/replicate_metrics")).create("replicate_metrics")
    con.sql(sql_text("estimates/evaluator_clusters")).create("evaluator_clusters")
    # the published contrast, and one whose second arm is missing (paired_clusters_mismatch finds it)
    pairs = pa.table(
        {
            "contrast": [CONTRAST[0], "mixed minus nobody"],
            "arm_a": [CONTRAST[1], "mixed"],
            "arm_b": [CONTRAST[2], "nobody"],
        }
    )
    return {
        "records": _arrow(con.table("records").arrow()),
        "cluster_sums": _arrow(con.table("cluster_sums").arrow()),
        "cluster_stats": _arrow(con.table("cluster_stats").arrow()),
        "replicate_weights": point_weights([2090]),  # the point
        "replicate_ids": pa.table({"rep": np.arange(0, MATRIX_REPS, dtype=np.int64)}),
        "replicate_sums": sums,
        "replicate_metrics": _arrow(con.table("replicate_metrics").arrow()),
        "contrast_pairs": pairs,
        "evaluator_clusters": _arrow(con.table("evaluator_clusters").arrow()),
        "tested": pa.table(
            {
                "row_id": np.arange(9, dtype=np.int64),
                "family": list("aaaabbbbb"),
                "p_value": [0.01, 0.04, 0.03, 0.005, 0.2, None, 0.2, 0.001, 0.9],
            }
        ),
    }


def _number(value):
    """DuckDB sums a DECIMAL literal's multiples as DECIMAL: compare it as the double it stands for."""
    return float(value) if isinstance(value, Decimal) else value


def _arrow(obj) -> pa.Table:
    return obj.read_all() if hasattr(obj, "read_all") else obj


PARAMS = {
    "replicates_poisson": {"first_rep": 0, "reps": MATRIX_REPS, "seed": SEED},
    "estimates/portable_replicates_poisson": {"seed": SEED},
    "estimates/intervals": {"lower": 0.025, "upper": 0.975},
    "portable_intervals": {"lower": 0.025, "upper": 0.975},
    "estimates/paired_contrast": {"lower": 0.025, "upper": 0.975},
    "portable_paired_contrast": {"lower": 0.025, "upper": 0.975},
    "estimates/delta_method": {"z_lower": -1.959963984540054, "z_upper": 1.959963984540054},
}


def duckdb_rows(inputs, sql_name: str) -> list[dict]:
    """`sql/<sql_name>.sql` as the default engine runs it: a plain DuckDB connection, bound parameters."""
    con = duckdb.connect()
    for name, table in inputs.items():
        con.register(name, table)
    cursor = con.execute(sql_text(sql_name), PARAMS.get(sql_name, {}))
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


def engine_rows(engine, inputs, sql_name: str) -> list[dict]:
    for name, table in inputs.items():
        engine.register(name, table)
    return engine_read(engine, sql_name, PARAMS.get(sql_name)).to_pylist()


def max_relative_difference(expected: list[dict], got: list[dict], keys) -> float:
    """Rows matched on `keys`; the same columns and the same non-numbers; the largest difference of a
    number relative to max(1, |expected|). NULL and NaN must agree."""
    assert len(expected) == len(got) and expected, (len(expected), len(got))
    index = {tuple(r[k] for k in keys): r for r in got}
    worst = 0.0
    for row in expected:
        other = index[tuple(row[k] for k in keys)]
        assert set(other) == set(row), (sorted(row), sorted(other))
        for column, value in row.items():
            value, theirs = _number(value), _number(other[column])
            if isinstance(value, float) or isinstance(theirs, float):
                if value is None or theirs is None:
                    assert value is None and theirs is None, (column, value, theirs)
                elif math.isnan(value) or math.isnan(theirs):
                    assert math.isnan(value) and math.isnan(theirs), (column, value, theirs)
                else:
                    worst = max(worst, abs(value - theirs) / max(1.0, abs(value)))
            else:
                assert value == theirs, (column, value, theirs)
    return worst


# ------------------------------------------------------------------------------------------- engines


@pytest.fixture(scope="module")
def duck():
    with connect_engine("duckdb") as engine:
        yield engine


SPARK = {}  # the module's one session: the last test stops it and checks that it is gone


@pytest.fixture(scope="module")
def spark():
    reason = spark_missing()
    if reason:
        pytest.skip(f"Spark cases skipped: {reason}")
    engine = connect_engine(EngineConfig("spark", spark_cores=2, shuffle_partitions=4))
    SPARK["engine"] = engine
    yield engine
    engine.close()


# ------------------------------------------------------------------------------------ the per-file matrix


def test_every_estimator_file_is_in_the_matrix_or_declared_duckdb_only():
    source = (ROOT / "autheval" / "estimation" / "estimators.py").read_text()
    used = set(re.findall(r'load_sql\("([a-z_/]+)"\)', source))
    used |= set(re.findall(r'materialize\(con, "[a-z_]+", "([a-z_]+)"', source))
    used |= {"estimates/delta_method"}  # autheval/estimation/analytic.py
    assert used, "no SQL file found in autheval/estimation/estimators.py"
    assert used - set(MATRIX) - DUCKDB_ONLY == set()
    for native, (portable, _) in MATRIX.items():
        sql_text(native), sql_text(portable)
    readme = (ROOT / "sql" / "README.md").read_text()
    for name in DUCKDB_ONLY:
        assert name in readme, f"{name} is DuckDB-only but sql/README.md does not say so"


@pytest.mark.parametrize("native", sorted(MATRIX))
def test_file_on_duckdb_through_ibis(native, inputs, duck):
    portable, keys = MATRIX[native]
    expected = duckdb_rows(inputs, native)
    assert max_relative_difference(expected, engine_rows(duck, inputs, portable), keys) <= 1e-12


@pytest.mark.parametrize("native", sorted(MATRIX))
def test_file_on_spark(native, inputs, spark):
    portable, keys = MATRIX[native]
    expected = duckdb_rows(inputs, native)
    assert max_relative_difference(expected, engine_rows(spark, inputs, portable), keys) <= 1e-12


EVALUATOR_COLUMNS = {"s": "w_s", "n": "w_n", "m": "c_m", "k": "c_k"}  # evaluator_clusters -> evaluator_sums


def evaluator_products(inputs, reps: int) -> list[dict]:
    """The evaluator scheme's replicate sums as the in-process path makes them: each (analysis, metric)
    stream's multiplicities (seed + offset, its own clusters) times its (s, n, m, k) matrix."""
    rows, clusters = [], inputs["evaluator_clusters"].to_pylist()
    for key in sorted({(r["analysis"], r["metric"]) for r in clusters}):
        own = sorted((r for r in clusters if (r["analysis"], r["metric"]) == key), key=lambda r: r["cluster_rank"])
        matrix = np.array([[r[c] for c in EVALUATOR_COLUMNS] for r in own])
        sums = replicate_products(SEED + own[0]["seed_offset"], reps, matrix)
        rows += [
            {"analysis": key[0], "metric": key[1], "rep": rep, **dict(zip(EVALUATOR_COLUMNS.values(), map(float, row)))}
            for rep, row in enumerate(sums)
        ]
    return rows


def engine_evaluator_sums(engine, inputs, reps: int) -> list[dict]:
    """portable_evaluator_weighted on `engine`, every stream's weights joined in as the engine path does."""
    for name, table in inputs.items():
        engine.register(name, table)
    rows = []
    for stream in engine.read("estimates/portable_evaluator_streams").to_pylist():
        offset, g = int(stream["seed_offset"]), int(stream["n_clusters"])
        for weights in reference_weight_blocks(SEED + offset, g, reps):
            engine.register(
                "replicate_weights",
                weights.append_column("seed_offset", pa.array(np.full(weights.num_rows, offset, np.int32))),
            )
            rows += engine.read("estimates/portable_evaluator_weighted").to_pylist()
    return rows


@pytest.mark.parametrize("which", ["duck", "spark"])
def test_evaluator_weighted_equals_the_in_process_products(inputs, which, request):
    """The evaluator scheme's weights joined in on an engine give the in-process path's sums: every
    stream, every replicate, both units' terms (delta's cluster unit too)."""
    engine = request.getfixturevalue(which)
    reps = 50
    got = engine_evaluator_sums(engine, inputs, reps)
    assert {r["metric"] for r in got} >= {"J", "delta"}
    assert max_relative_difference(evaluator_products(inputs, reps), got, ("analysis", "metric", "rep")) <= 1e-12


def test_the_matrix_sees_a_difference(inputs, duck):
    """The comparison can fail: another seed's poisson sums are not the same numbers."""
    portable, keys = MATRIX["replicates_poisson"]
    expected = duckdb_rows(inputs, "replicates_poisson")
    for name, table in inputs.items():
        duck.register(name, table)
    other = engine_read(duck, portable, {"seed": SEED + 1}).to_pylist()
    assert max_relative_difference(expected, other, keys) > 1e-3


def test_reference_weights_are_numpys_stream_whatever_the_block_size():
    """The sparse weights shipped to an engine are the multiplicities of AuthEval's per-replicate draws
    `default_rng(seed).integers(0, G, size=G)`, across block boundaries; the point (rep -1, every
    cluster once) is a table of its own, the same for every scheme."""
    g, reps = 37, 23
    rng = np.random.default_rng(SEED)
    expected = np.stack([np.bincount(rng.integers(0, g, size=g), minlength=g) for _ in range(reps)])
    for block_values in (g, 5 * g, 10**6):
        got = np.zeros((reps, g))
        for block in reference_weight_blocks(SEED, g, reps, block_values):
            assert min(block.column("mult").to_pylist()) > 0  # sparse: drawn clusters only
            assert min(block.column("rep").to_pylist()) >= 0  # replicates only
            got[np.asarray(block.column("rep")), np.asarray(block.column("cluster_rank"))] = block.column("mult")
        assert np.array_equal(got, expected)
    point = point_weights([3, 2]).to_pydict()
    assert point == {"n_clusters": [3, 3, 3, 2, 2], "rep": [-1] * 5, "cluster_rank": [0, 1, 2, 0, 1], "mult": [1.0] * 5}
    ids = [t.column("rep").to_pylist() for t in replicate_id_blocks(5, block_reps=3)]
    assert ids == [[0, 1, 2], [3, 4]]


# --------------------------------------------------------------------------- poisson weights, identical


def poisson_weights(engine, inputs, reps: int) -> np.ndarray:
    engine.register("cluster_stats", inputs["cluster_stats"])
    engine.register("replicate_ids", pa.table({"rep": np.arange(-1, reps, dtype=np.int64)}))
    table = engine_read(engine, "portable_poisson_weights", {"seed": SEED})
    dense = np.zeros((reps + 1, 2090))
    dense[np.asarray(table.column("rep")) + 1, np.asarray(table.column("cluster_rank"))] = table.column("mult")
    return dense


def test_poisson_weights_identical_on_both_engines(inputs, duck, spark):
    reps = 200
    on_duckdb = poisson_weights(duck, inputs, reps)
    on_spark = poisson_weights(spark, inputs, reps)
    assert np.array_equal(on_duckdb, on_spark)
    assert np.all(on_duckdb[0] == 1.0)  # the point: every cluster once
    # pinned by an independent replica of the hash (tests/test_poisson.py), on a sample of pairs
    for rep, rank in [(0, 0), (0, 2089), (7, 1000), (199, 5), (123, 456)]:
        assert on_duckdb[rep + 1, rank] == expected_weight(grid_index(SEED, rep, rank))
    # and they are the weights of replicates_poisson.sql: joined in, they give its sums
    weights = engine_read(duck, "portable_poisson_weights", {"seed": SEED})
    duck.register("replicate_weights", weights)
    duck.register("cluster_stats", inputs["cluster_stats"])
    joined = duck.read("estimates/portable_replicates_weighted").filter(
        pa.compute.greater_equal(pa.compute.field("rep"), 0)
    )
    expected = [r for r in duckdb_rows(inputs, "replicates_poisson") if r["rep"] < reps]
    assert max_relative_difference(expected, joined.to_pylist(), ("analysis", "rep")) <= 1e-12


def test_poisson_weights_differ_with_the_seed(inputs, duck):
    duck.register("cluster_stats", inputs["cluster_stats"])
    duck.register("replicate_ids", pa.table({"rep": np.arange(0, 20, dtype=np.int64)}))
    a = engine_read(duck, "portable_poisson_weights", {"seed": SEED}).to_pylist()
    b = engine_read(duck, "portable_poisson_weights", {"seed": SEED + 1}).to_pylist()
    assert a != b


# ----------------------------------------------------------------------------------- end to end


def estimate_rows(result) -> dict:
    return {(r["analysis"], r["unit"], r["metric"]): r for r in result.estimates}


def max_estimate_difference(a, b) -> float:
    ra, rb = estimate_rows(a), estimate_rows(b)
    assert ra.keys() == rb.keys()
    worst = 0.0
    for key, row in ra.items():
        other = rb[key]
        assert row["available"] == other["available"] and row["status"] == other["status"]
        for column in ("estimate", "ci_lower", "ci_upper"):
            if row[column] is None:
                assert other[column] is None, (key, column)
            else:
                worst = max(worst, abs(row[column] - other[column]))
    return worst


@pytest.fixture(scope="module")
def reference_on_both(recordsets, spark):
    contrasts = [CONTRAST[1:]]
    default = estimate(recordsets, scheme="reference", contrasts=contrasts)
    on_spark = estimate(recordsets, scheme="reference", contrasts=contrasts, engine=spark)
    return default, on_spark


def test_reference_scheme_on_spark_equals_the_default_engine(reference_on_both):
    default, on_spark = reference_on_both
    assert max_estimate_difference(default, on_spark) <= 1e-12
    for a, b in zip(default.contrasts, on_spark.contrasts):
        assert a["contrast"] == b["contrast"] and a["excludes_zero"] == b["excludes_zero"]
        for column in ("difference", "ci_lower", "ci_upper"):
            assert abs(a[column] - b[column]) <= 1e-12
    assert {(c["analysis"], c["unit"]) for c in default.checks} == {(c["analysis"], c["unit"]) for c in on_spark.checks}


def test_mixed_reference_summary_on_spark_equals_the_published_one(reference_on_both):
    _, on_spark = reference_on_both
    published = {row["estimand"]: row for row in published_summary()}["image_weighted_primary"]
    compared = 0
    for metric in ("J_auth", "J", "intervention_rate", "delta", "Delta_authority"):
        row = on_spark.estimate("mixed", "image_weighted", metric)
        for column, suffix in (("estimate", ""), ("ci_lower", "_ci_lower"), ("ci_upper", "_ci_upper")):
            assert abs(row[column] - float(published[metric + suffix])) <= 1e-12, (metric, column)
            compared += 1
    assert compared == 15


def test_poisson_scheme_on_spark_equals_the_default_engine(recordsets, spark):
    default = estimate(recordsets[:1], scheme="poisson", reps=1000)
    on_spark = estimate(recordsets[:1], scheme="poisson", reps=1000, engine=spark)
    assert max_estimate_difference(default, on_spark) <= 1e-12
    other_seed = estimate(recordsets[:1], scheme="poisson", reps=1000, seed=SEED + 1)
    assert max_estimate_difference(default, other_seed) > 1e-4  # the comparison can fail


@pytest.fixture(scope="module")
def duck_engine_path():
    """DuckDB through Ibis taken down the engine path (`estimate` runs a `duckdb` engine in process):
    the path Spark takes, on the engine that is always here."""
    with connect_engine("duckdb") as engine:
        engine.kind = "duckdb through the engine path"
        yield engine


@pytest.mark.parametrize("scheme", ["reference", "evaluator", "poisson"])
def test_the_engine_path_equals_the_default_engine(recordsets, duck_engine_path, scheme):
    default = estimate(recordsets, scheme=scheme, reps=300)
    on_engine = estimate(recordsets, scheme=scheme, reps=300, engine=duck_engine_path)
    assert max_estimate_difference(default, on_engine) <= 1e-12
    assert [(c["analysis"], c["unit"]) for c in default.checks] == [
        (c["analysis"], c["unit"]) for c in on_engine.checks
    ]
    assert all(c["point_residual"] <= 1e-12 for c in on_engine.checks)


def test_delta_method_on_spark_equals_duckdb(recordsets, spark):
    from autheval.estimation.analytic import delta_method_rows

    default = delta_method_rows(recordsets)
    on_spark = delta_method_rows(recordsets, engine=spark)
    keys = ("analysis", "unit", "metric")
    assert max_relative_difference(default, on_spark, keys) <= 1e-12


def test_spark_session_is_local_and_bound_to_loopback(spark):
    conf = spark.session.conf
    assert os.environ["SPARK_LOCAL_IP"] == "127.0.0.1"
    assert conf.get("spark.driver.host") == "127.0.0.1"
    assert conf.get("spark.driver.bindAddress") == "127.0.0.1"
    assert conf.get("spark.sql.shuffle.partitions") == "4"
    assert spark.session.sparkContext.master == "local[2]"
    warehouse = conf.get("spark.sql.warehouse.dir")
    assert str(spark.scratch) in warehouse and not (Path.cwd() / "spark-warehouse").exists()


# ------------------------------------------------------------------------------- bad configuration


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "autheval", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=300,
    )


def one_error_line(proc: subprocess.CompletedProcess, *words: str) -> str:
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("autheval: error: "), proc.stderr
    for word in words:
        assert word in lines[0], lines[0]
    assert proc.stdout == ""
    return lines[0]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the socket is: nothing listens there


def test_unknown_engine_is_one_line(tmp_path):
    proc = run_cli(
        "evaluate", "--input", str(reference_file("trace_mixed")), "--engine", "flink", "--output-dir", str(tmp_path)
    )
    one_error_line(proc, "--engine", "flink", "duckdb, spark")


def test_spark_master_needs_spark(tmp_path):
    proc = run_cli(
        "evaluate",
        "--input",
        str(reference_file("trace_mixed")),
        "--spark-master",
        "spark://127.0.0.1:7077",
        "--output-dir",
        str(tmp_path),
    )
    one_error_line(proc, "--spark-master")


def test_spark_extra_missing_is_one_line(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pyspark" else real(name, *a))
    with pytest.raises(EngineError, match="the Spark extra is not installed"):
        engine_config("spark")


def test_java_missing_is_one_line(tmp_path):
    if importlib.util.find_spec("pyspark") is None:
        pytest.skip("the spark extra is not installed: the extra's check comes first")
    proc = run_cli(
        "evaluate",
        "--input",
        str(reference_file("trace_mixed")),
        "--engine",
        "spark",
        "--output-dir",
        str(tmp_path),
        env={"PATH": "/nonexistent", "JAVA_HOME": ""},
    )
    one_error_line(proc, "Java is missing")


def test_unreachable_master_is_one_line(tmp_path):
    if spark_missing():
        pytest.skip(spark_missing())
    port = closed_port()
    proc = run_cli(
        "compare",
        "--arm",
        f"a={reference_file('trace_mixed')}",
        "--engine",
        "spark",
        "--spark-master",
        f"spark://127.0.0.1:{port}",
        "--output-dir",
        str(tmp_path),
    )
    one_error_line(proc, "--spark-master", "cannot reach", str(port))
    assert not (tmp_path / "estimates.csv").exists()


@pytest.mark.parametrize("master", ["local", "spark://", "mesos://host:5050", "http://127.0.0.1:7077"])
def test_malformed_master_is_refused(master):
    if spark_missing():
        pytest.skip(spark_missing())
    if master == "local":
        engine_config("spark", master)  # local is a master
        return
    with pytest.raises(EngineError, match="--spark-master"):
        engine_config("spark", master)


def test_evaluator_scheme_on_spark_equals_the_default_engine(spark):
    """AuthEval's log evaluator (eight per-metric streams; delta over intervened clusters only) on the
    4-row example log and on a trace with global scores."""
    for name in ("authority_log_example", "trace_llava_med_head"):
        records = [read_records(reference_file(name), analysis=name)]
        default = estimate(records, scheme="evaluator", reps=1000)
        on_spark = estimate(records, scheme="evaluator", reps=1000, engine=spark)
        assert max_estimate_difference(default, on_spark) <= 1e-12


def test_parameters_are_bound_as_typed_literals():
    bound = bind_parameters("SELECT $a AS a, $b AS b, $c AS c", {"a": 3, "b": 0.025, "c": "x'); drop"})
    assert "CAST(3 AS BIGINT)" in bound and "CAST(0.025 AS DOUBLE)" in bound and "'x''); drop'" in bound
    with pytest.raises(KeyError):
        bind_parameters("SELECT $a", {})
    with pytest.raises(KeyError):
        bind_parameters("SELECT 1", {"a": 1})
    with pytest.raises(TypeError):
        bind_parameters("SELECT $a", {"a": [1]})


# --------------------------------------------------------------------- the command line, end to end


@pytest.mark.slow
def test_evaluate_with_spark_writes_the_same_summary(tmp_path):
    if spark_missing():
        pytest.skip(spark_missing())
    trace = str(reference_file("trace_mixed"))
    default = run_cli("evaluate", "--input", trace, "--scheme", "reference", "--output-dir", str(tmp_path / "duckdb"))
    assert default.returncode == 0, default.stderr
    spark = run_cli(
        "evaluate",
        "--engine",
        "spark",
        "--input",
        trace,
        "--scheme",
        "reference",
        "--output-dir",
        str(tmp_path / "spark"),
    )
    assert spark.returncode == 0, spark.stderr
    a = read_csv_rows(tmp_path / "duckdb" / "authority_summary.csv")
    b = read_csv_rows(tmp_path / "spark" / "authority_summary.csv")
    assert (
        [r["estimand"] for r in a]
        == [r["estimand"] for r in b]
        == ["image_weighted_primary", "cluster_equal_sensitivity"]
    )
    worst = 0.0
    for x, y in zip(a, b):
        for column, value in x.items():
            if column == "estimand" or value == "":
                assert y[column] == value
            else:
                worst = max(worst, abs(float(value) - float(y[column])))
    assert worst <= 1e-12


def test_zz_spark_session_stops_cleanly(spark):
    """Last in the module: closing stops the session and removes its temporary folder."""
    from pyspark import SparkContext

    scratch = spark.scratch
    assert scratch.is_dir()
    spark.close()
    assert SparkContext._active_spark_context is None
    assert not scratch.exists()
    spark.close()  # twice is harmless


# ------------------------------------------------------------------------- the Dagster estimate assets


def test_engine_resource_checks_its_configuration():
    from assets.resources import EngineResource

    with EngineResource().engine() as compute:
        assert compute is None  # duckdb: the estimators run in the step's process
    with pytest.raises(EngineError, match="unknown engine 'presto'"):
        with EngineResource(kind="presto").engine():
            pass


@pytest.mark.slow
def test_zzz_the_estimate_assets_on_spark_pass_the_published_summary_check(tmp_path, monkeypatch):
    """The reference study through Dagster with AUTHEVAL_ENGINE=spark (a fresh session: the module's
    was stopped above): the blocking check that the mixed analysis equals the published summary to
    1e-12 passes, and the estimates equal the default engine's."""
    if spark_missing():
        pytest.skip(spark_missing())
    from dagster_project.demo import run_stages
    from warehouse.lake import Lake

    monkeypatch.setenv("AUTHEVAL_ENGINE", "spark")
    checks = run_stages(
        tmp_path / "spark",
        stages=("ingest", "duplicates", "proposals", "review", "scoring", "estimates"),
        out=lambda line: None,
    )
    assert checks["estimates_match_published_summary"] is True
    assert checks["estimates_gap_identity"] is True
    monkeypatch.setenv("AUTHEVAL_ENGINE", "duckdb")
    run_stages(
        tmp_path / "duckdb",
        stages=("ingest", "duplicates", "proposals", "review", "scoring", "estimates"),
        out=lambda line: None,
    )
    keys = ("study", "analysis", "unit", "metric")
    columns = keys + ("estimate", "ci_lower", "ci_upper", "available", "status", "scheme", "reps", "seed")
    on_spark, on_duckdb = (
        Lake(tmp_path / name).read("estimates").select(list(columns)).to_pylist() for name in ("spark", "duckdb")
    )
    assert max_relative_difference(on_duckdb, on_spark, keys) <= 1e-12
