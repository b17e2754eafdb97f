"""Per-cluster statistics summed once per record (autheval/records/cluster_stats.py): ranges of cluster ids side by
side give the bytes one partition gives, on any number of cores; the count is exact; the bootstrap and the
delta method share the one file; several analyses in one call are each the analysis alone."""

from __future__ import annotations

import gc
import pickle

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from autheval.estimation.analytic import delta_method_rows
from autheval.estimation.estimators import estimate
from autheval.io import table_sha256
from autheval.records import cluster_stats
from autheval.records.read import records_from_table


def noisy_log(clusters: int, rows: int, seed: int = 3) -> pa.Table:
    """Utilities that are arbitrary doubles (no exact tenths): the order of a cluster's additions
    shows in the last bits, so equal bytes mean the same order."""
    rng = np.random.default_rng(seed)
    proposed = rng.integers(0, 4, rows)
    changed = rng.random(rows) < 0.35
    executed = np.where(changed, (proposed + 1) % 4, proposed)
    u_exec = -rng.random(rows) * 5
    return pa.table(
        {
            "case_id": [f"c{k:07d}" for k in range(rows)],
            "cluster_id": [f"k{k:06d}" for k in rng.integers(0, clusters, rows)],
            "proposed_action": [f"a{a}" for a in proposed],
            "executed_action": [f"a{a}" for a in executed],
            "utility_executed_local": u_exec,
            "utility_proposed_local": np.where(changed, -rng.random(rows) * 6, u_exec),
            "utility_proposed_global": -rng.random(rows) * 4,
        }
    )


def read(table: pa.Table, analysis: str = "noisy"):
    return records_from_table(table, f"{analysis}.csv", analysis, table_sha256(table))


def stats_of(records) -> pa.Table:
    held = records.cluster_stats.table
    return held if held is not None else pq.read_table(records.cluster_stats.path)


@pytest.fixture
def in_files(monkeypatch):
    """Every record's statistics in a file, however small (the large-record path)."""
    monkeypatch.setattr(cluster_stats, "HELD_CLUSTERS", 0)


@pytest.mark.parametrize("cores", ["1", "2"])
def test_partitions_side_by_side_give_the_bytes_of_one(monkeypatch, cores):
    table = noisy_log(clusters=3000, rows=24_000)
    whole = read(table)
    assert whole.cluster_stats.partitions == 1 and whole.cluster_stats.path is None  # small: held in memory
    monkeypatch.setattr(cluster_stats, "HELD_CLUSTERS", 0)
    assert stats_of(read(table)).equals(stats_of(whole))  # one partition in a file: the bytes held
    monkeypatch.setattr(cluster_stats, "PARTITION_CLUSTERS", 300)
    monkeypatch.setenv("AUTHEVAL_THREADS", cores)
    split = read(table)
    assert split.cluster_stats.partitions > 10
    assert stats_of(split).equals(stats_of(whole))  # every sum to the bit, the same ranks and order
    assert split.n_clusters == whole.n_clusters == len(set(table.column("cluster_id").to_pylist()))


@pytest.mark.parametrize("layout", ["cluster order", "shuffled", "integer ids"])
def test_ranges_of_a_parquet_dataset_give_the_bytes_of_one(tmp_path, monkeypatch, layout):
    """A dataset of files read where they lie, cut into ranges of cluster ids (whose row groups DuckDB
    skips outside a range when the log is written in cluster order): the same bytes as one partition."""
    from autheval.records.read import read_records

    table = noisy_log(clusters=2000, rows=20_000, seed=11)
    if layout == "cluster order":
        table = table.sort_by("cluster_id")
    elif layout == "integer ids":
        ids = [int(k[1:]) for k in table.column("cluster_id").to_pylist()]
        table = table.set_column(1, "cluster_id", pa.array(ids, pa.int64()))
    folder = tmp_path / "log"
    folder.mkdir()
    for k, first in enumerate(range(0, table.num_rows, 5000)):
        pq.write_table(table.slice(first, 5000), folder / f"part-{k}.parquet", row_group_size=1000)
    whole = read_records(folder, "log")
    monkeypatch.setattr(cluster_stats, "HELD_CLUSTERS", 0)
    monkeypatch.setattr(cluster_stats, "PARTITION_CLUSTERS", 150)
    split = read_records(folder, "log")
    assert split.cluster_stats.partitions > 10 and split.cluster_stats.path is not None
    assert stats_of(split).equals(stats_of(whole))


def test_the_ranges_cover_every_id_in_order():
    ids = [f"k{i:04d}" for i in range(100)]
    ranges = cluster_stats.cluster_ranges(ids + ids[:50], 7)  # repeated ids count once
    assert len(ranges) == 7 and ranges[0][0] is None and ranges[-1][1] is None
    assert all(upper == lower for (_, upper), (lower, _) in zip(ranges, ranges[1:]))  # each ends where the next begins
    sizes = [sum(1 for i in ids if (lo is None or i >= lo) and (hi is None or i < hi)) for lo, hi in ranges]
    assert sum(sizes) == 100 and max(sizes) - min(sizes) <= 2  # of about equal size
    assert cluster_stats.cluster_ranges(["a", "a", "b"], 8) == [(None, "b"), ("b", None)]  # fewer distinct ids
    assert cluster_stats.cluster_ranges([], 4) == [(None, None)]
    # byte order, as DuckDB compares text: 'é' (0xC3 0xA9) after 'z' (0x7A)
    assert cluster_stats.cluster_ranges(["é", "z", "a"], 3) == [(None, "z"), ("z", "é"), ("é", None)]


def test_the_cluster_count_is_exact_not_the_profiles_estimate():
    table = noisy_log(clusters=40_000, rows=120_000)
    distinct = len(set(table.column("cluster_id").to_pylist()))
    records = read(table)
    assert records.n_clusters == distinct
    assert stats_of(records).num_rows == distinct
    assert stats_of(records).column("cluster_rank").to_pylist() == list(range(distinct))


def test_the_bootstrap_and_the_delta_method_share_the_sums_of_the_read(monkeypatch):
    records = read(noisy_log(clusters=200, rows=2000))
    calls = []
    monkeypatch.setattr(cluster_stats, "compute", lambda *a, **k: calls.append(a) or pytest.fail("summed again"))
    estimate([records], scheme="poisson", reps=1000)
    estimate([records], scheme="reference", reps=1000)
    delta_method_rows([records])
    assert calls == []


@pytest.mark.parametrize("scheme", ["reference", "poisson"])
def test_several_analyses_in_one_call_are_each_alone(scheme):
    a = read(noisy_log(clusters=150, rows=1200, seed=1), "arm a")
    b = read(noisy_log(clusters=90, rows=700, seed=2), "arm b")  # another cluster count: another stream
    c = read(noisy_log(clusters=150, rows=900, seed=5), "arm c")  # the same count as a: one shared stream
    together = estimate([a, b, c], scheme=scheme, reps=1000).estimates
    alone = [row for r in (a, b, c) for row in estimate([r], scheme=scheme, reps=1000).estimates]

    def key(row):
        return (row["analysis"], row["unit"], row["metric"])

    assert sorted(together, key=key) == sorted(alone, key=key)
    delta_together = delta_method_rows([a, b, c])
    assert delta_together == [row for r in (a, b, c) for row in delta_method_rows([r])]


def test_the_file_goes_with_its_record(in_files):
    records = read(noisy_log(clusters=20, rows=100))
    path = records.cluster_stats.path
    assert path.is_file()
    del records
    gc.collect()
    assert not path.exists()


def test_a_record_with_its_sums_in_a_file_does_not_travel_to_another_process(in_files):
    records = read(noisy_log(clusters=20, rows=100))
    with pytest.raises(TypeError, match="temporary file of this process"):
        pickle.dumps(records)


def test_a_small_record_holds_its_sums_writes_no_file_and_travels(tmp_path, monkeypatch):
    monkeypatch.setattr(cluster_stats, "_FOLDER", [tmp_path])
    records = read(noisy_log(clusters=20, rows=100))
    assert records.cluster_stats.path is None and list(tmp_path.iterdir()) == []
    again = pickle.loads(pickle.dumps(records))
    assert stats_of(again).equals(stats_of(records))
    assert estimate([again], reps=1000).estimates == estimate([records], reps=1000).estimates


def test_two_databases_never_share_a_spill_folder():
    from warehouse.sql import connect

    folders = {connect().execute("SELECT current_setting('temp_directory')").fetchone()[0] for _ in range(3)}
    assert len(folders) == 3


def test_the_folder_of_a_killed_process_is_removed_by_the_next(tmp_path, monkeypatch, in_files):
    import subprocess
    import sys

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    code = (
        "import os, signal; from autheval.io import table_sha256; "
        "from autheval.records.read import records_from_table; from autheval.records import cluster_stats; "
        "cluster_stats.HELD_CLUSTERS = 0; from tests.test_cluster_stats import noisy_log; t = noisy_log(20, 100); "
        "r = records_from_table(t, 'x.csv', 'x', table_sha256(t)); os.kill(os.getpid(), signal.SIGKILL)"
    )
    subprocess.run([sys.executable, "-c", code], cwd=str(cluster_stats.Path(__file__).resolve().parent.parent))
    left = list(tmp_path.glob(cluster_stats.FOLDER_PREFIX + "*"))
    assert len(left) == 1 and list(left[0].iterdir())  # killed: its statistics stayed behind
    monkeypatch.setattr(cluster_stats, "_FOLDER", [])
    monkeypatch.setattr(cluster_stats.tempfile, "tempdir", str(tmp_path))
    records = read(noisy_log(clusters=20, rows=100))
    assert not left[0].exists()
    assert records.cluster_stats.path.parent.parent == tmp_path


def test_a_full_temporary_folder_is_one_line_and_leaves_nothing(tmp_path, monkeypatch, in_files):
    import errno

    monkeypatch.setattr(cluster_stats, "_FOLDER", [tmp_path])
    written = []
    to_parquet = cluster_stats.to_parquet

    def counted(con, name, path, params=None, fragments=None):
        written.append(path)
        return to_parquet(con, name, path, params, fragments)

    class FullDisk(pq.ParquetWriter):  # the ranges were written; the ranked file does not fit
        def write_table(self, table, row_group_size=None):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cluster_stats, "to_parquet", counted)
    monkeypatch.setattr(pq, "ParquetWriter", FullDisk)
    monkeypatch.setattr(cluster_stats, "PARTITION_CLUSTERS", 4)  # several ranges, then the ranked file
    with pytest.raises(OSError, match="cannot write the per-cluster sums to the temporary folder .*No space left"):
        read(noisy_log(clusters=20, rows=100))
    assert len(written) > 2 and list(tmp_path.iterdir()) == []  # no range and no half file left


def test_the_spill_folders_of_a_killed_process_go_at_the_next_first_connection(tmp_path, monkeypatch):
    import os
    import subprocess
    import sys

    import warehouse.sql as wsql

    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = tmp_path / f"{wsql.SPILL_PREFIX}{int(ended.stdout)}-3"
    living = tmp_path / f"{wsql.SPILL_PREFIX}{os.getppid()}-0"
    for folder in (dead, living):
        folder.mkdir()
        (folder / "duckdb_temp_storage-0.tmp").write_bytes(b"x" * 1024)
    monkeypatch.setattr(wsql, "_SWEPT", set())
    monkeypatch.setattr(cluster_stats.tempfile, "tempdir", str(tmp_path))
    assert wsql.spill_folder().parent == tmp_path
    assert not dead.exists() and living.exists()


def test_sums_held_and_sums_in_a_file_are_read_together(monkeypatch):
    a = read(noisy_log(clusters=150, rows=1200, seed=1), "arm a")
    b_table = noisy_log(clusters=150, rows=900, seed=5)
    b_held = read(b_table, "arm b")
    monkeypatch.setattr(cluster_stats, "HELD_CLUSTERS", 0)
    b_file = read(b_table, "arm b")
    assert a.cluster_stats.path is None and b_file.cluster_stats.path is not None
    for scheme in ("reference", "evaluator"):
        both_held = estimate([a, b_held], scheme=scheme, reps=1000).estimates
        assert estimate([a, b_file], scheme=scheme, reps=1000).estimates == both_held
    assert delta_method_rows([a, b_file]) == delta_method_rows([a, b_held])
